package rmqfake_test

import (
	"testing"

	"github.com/rmqflow/rmqflow/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSQLSettingsEmptyExpression: a consumer whose settings subscribe with
// an empty SQL92 expression is refused on its Telemetry stream
// (InvalidArgument), as by the proxy; one that does not compile is accepted
// there (the broker compiles it on receive).
func TestSQLSettingsEmptyExpression(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	for expr, ok := range map[string]bool{" ": false, "\t": false, "a = ": true, "a = '1'": true} {
		c := newClient(t, s, client.Config{})
		_, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.SimpleConsumer, Group: normalGroup,
			Subscriptions: []client.Subscription{{Topic: normalTopic, Filter: client.Filter{Type: client.FilterSQL, Expression: expr}}}})
		if (err == nil) != ok || (err != nil && status.Code(err) != codes.InvalidArgument) {
			t.Errorf("settings with SQL %q: %v, want ok=%v (else gRPC InvalidArgument)", expr, err, ok)
		}
	}
}
