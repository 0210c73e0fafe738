package rmqio

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestReadRefusedCredentials: a broker that refuses the job's credentials
// (a wrong secret) fails the job at once: the pipeline's run returns an
// error that names the credentials to fix (before: the job failed with the
// broker's "UNAUTHORIZED ... check signature failed" deep in the bundle's
// error, not saying which setting it was).
func TestReadRefusedCredentials(t *testing.T) {
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.Credentials("rmqio-ak", "right-secret"))
	closeReaders(t)
	t.Setenv("RMQIO_AUTH_AK", "rmqio-ak")
	t.Setenv("RMQIO_AUTH_SK", "wrong-secret")
	conn := Connection{Endpoints: s.Addr(), AccessKeyEnv: "RMQIO_AUTH_AK", SecretKeyEnv: "RMQIO_AUTH_SK"}
	p, sc := beam.NewPipelineWithRoot()
	beam.ParDo(sc, &recordFn{Label: "refused"}, Read(sc, ReadConfig{Connection: conn, MainTopic: "rmqflow-beam-a",
		Group: "rmqflow-beam-a-g", MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: 5 * time.Second}))
	start := time.Now()
	err := ptest.Run(p)
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("the job with a refused credential succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "refused the credentials of RMQIO_AUTH_AK and RMQIO_AUTH_SK") {
		t.Errorf("job error %q: want rmqio's, naming the refused credentials", msg)
	}
}

// TestAckRefusedNamesItsEndpoint: an Ack the broker refuses for the
// credentials fails the bundle, and on Prism the job, with an error naming
// the endpoint the ack went to, the handle's (where its message was read),
// not AckConfig's Connection.Endpoints, which may list other access points
// (before: it named that list).
func TestAckRefusedNamesItsEndpoint(t *testing.T) {
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.Credentials("rmqio-ak", "right-secret"))
	closeReaders(t)
	t.Setenv("RMQIO_AUTH_AK", "rmqio-ak")
	t.Setenv("RMQIO_AUTH_SK", "wrong-secret")
	h := rmqflow.ReceiptHandle{Endpoints: s.Addr(), Group: "rmqflow-beam-a-g", Topic: "rmqflow-beam-a", LiteTopic: "l",
		MessageID: "01REFUSED", Handle: "refused-handle", DeliveryAttempt: 1}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The pool may ack at both access points; this handle's is the second.
	conn := Connection{Endpoints: "127.0.0.1:1;" + s.Addr(), AccessKeyEnv: "RMQIO_AUTH_AK", SecretKeyEnv: "RMQIO_AUTH_SK"}
	p, sc := beam.NewPipelineWithRoot()
	Ack(sc, AckConfig{Connection: conn}, beam.Create(sc, AckableMessage{Topic: h.Topic, LiteTopic: h.LiteTopic, MessageID: h.MessageID, Handle: b}))
	err = ptest.Run(p)
	t.Logf("job error: %v", err)
	want := fmt.Sprintf("the broker at %s refused the credentials of RMQIO_AUTH_AK and RMQIO_AUTH_SK", s.Addr())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("job error %v: want one that says %q", err, want)
	}
}
