package conformance

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"google.golang.org/protobuf/types/known/durationpb"
)

// sqlProps are the user properties (and tag) of the messages scenario q
// sends once per expression of sqlCases ("d" is empty: the broker drops it).
var sqlProps = []struct {
	tag   string
	props map[string]string
}{
	{"t1", map[string]string{"a": "3", "b": "x"}},
	{"t1", map[string]string{"a": "10", "b": "it's"}},
	{"", map[string]string{"b": "y"}},
	{"", map[string]string{"a": "abc", "b": "x"}},
	{"", map[string]string{"a": "2.5", "d": ""}},
}

// sqlCases are SQL92 expressions and the messages of sqlProps (by index)
// each one selects, as RocketMQ 5.5.0 answered.
var sqlCases = []struct {
	expr  string
	match []int
}{
	{"a = 3", []int{0}},
	{"a = '3'", []int{0}},
	{"a = 3.0", []int{0}},
	{"a > 2", []int{0, 1}},       // "2.5" is no Integer: the conversion error drops the message
	{"a >= 2.5", []int{0, 1, 4}}, // a double literal converts with Double.valueOf
	{"a > -1", []int{0, 1}},      // unary minus
	{"a = -3", nil},              //
	{"a <> 3", []int{1}},         // missing → unknown; "abc" → conversion error
	{"a BETWEEN 3 AND 10", []int{0, 1}},
	{"a NOT BETWEEN 4 AND 10", []int{0}},
	{"b IN ('x', 'it''s')", []int{0, 1, 3}},
	{"b NOT IN ('x')", []int{1, 2}}, // a missing b is unknown, not TRUE
	{"b = 'it''s'", []int{1}},
	{"c IS NULL", []int{0, 1, 2, 3, 4}},
	{"a IS NOT NULL", []int{0, 1, 3, 4}},
	{"a IS NULL AND b = 'y'", []int{2}},
	{"c = 'x'", nil},
	{"c <> 'x'", nil},
	{"NOT (c = 'x')", nil},
	{"b = 'x' OR a = 10", []int{0, 1, 3}}, // OR stops at TRUE before "abc" fails to convert
	{"a = 10 OR b = 'x'", []int{0, 1}},    // "abc" fails first: the whole expression is dropped
	{"NOT (a = 3)", []int{1}},
	{"NOT a = '3'", nil}, // (NOT a) = '3'
	{"a = TRUE", nil},
	{"a", nil},
	{"TRUE", []int{0, 1, 2, 3, 4}},
	{"A = '3'", nil}, // property names are case-sensitive
	{"a = '3' and b = 'x'", []int{0}},
	{"b CONTAINS 'x'", []int{0, 3}},
	{"b STARTSWITH 'it'", []int{1}},
	{"b NOT ENDSWITH 's'", []int{0, 2, 3}},
	{"TAGS = 't1'", []int{0, 1}},
	{"TAGS IS NULL", []int{2, 3, 4}},
	{"a > b", nil},
	{"KEYS STARTSWITH 'q-'", []int{0, 1, 2, 3, 4}},           // KEYS: the message keys
	{"UNIQ_KEY IS NOT NULL", []int{0, 1, 2, 3, 4}},           // the message id
	{"PGROUP = 'rmqflow-normal-q'", []int{0, 1, 2, 3, 4}},    // the proxy sends with the topic as producer group
	{"BORN_TIMESTAMP > 1700000000000", []int{0, 1, 2, 3, 4}}, // a long literal: Long.valueOf
	{"RECONSUME_TIME = 0", []int{0, 1, 2, 3, 4}},
	{"CLUSTER IS NOT NULL", []int{0, 1, 2, 3, 4}},
	{"CLUSTER = 'DefaultCluster'", []int{0, 1, 2, 3, 4}},
	{"MSG_REGION = 'DefaultRegion'", []int{0, 1, 2, 3, 4}},
	{"TRACE_ON = 'true'", []int{0, 1, 2, 3, 4}},
	{"__BORNHOST IS NOT NULL", []int{0, 1, 2, 3, 4}},
	{"WAIT IS NOT NULL", nil},
	{"TAGS IS NOT NULL", []int{0, 1}},   // an untagged message has no TAGS
	{"d IS NULL", []int{0, 1, 2, 3, 4}}, // an empty property value is dropped
	{"d = ''", nil},
	{"'x' <> c", []int{0, 1, 2, 3, 4}}, // NOT ('x' = c): a missing right side is FALSE, not unknown
	{"'x' = c", nil},
	{"a < 2.6 AND a > 2.4", []int{4}},
	{"a = 2.5", []int{4}},
	{"-a < -2", nil}, // minus on a string is unknown
	{"a = -(-3)", []int{0}},
	{"a BETWEEN -5 AND -10", nil}, // -5 is no constant: not refused
	{"TRUE = (a = '3')", []int{0}},
	{"a = +'3'", []int{0}},
	{"b IN ('x') AND b NOT IN ('y')", []int{0, 3}},
	{"(a > 1) = TRUE", []int{0, 1}},
	{"a > 2147483648", nil},
	{"a = 3L", []int{0}},
	{"a = 3e0", []int{0}},
	{"a = 3 -- c\n", []int{0}}, // comments
	{"a /* c */ = 3", []int{0}},
	{"NOT NULL", nil},
	{"NULL IS NULL", []int{0, 1, 2, 3, 4}},
	{"a IS NULL IS NULL", nil},
}

// sqlIllegal are expressions the broker cannot compile.
var sqlIllegal = []string{
	"a = NULL", "a != '3'", "a == '3'", "a IN (3)", "a BETWEEN 5 AND 1", "a > 0.0", "3",
	`a = "3"`, "a > '2'", "a = ",
}

// SQLFilters (q): SQL92 filters on user properties, as the broker compiles
// and evaluates them.
//   - Every message of sqlProps is sent once per expression of sqlCases, and
//     one poll filter selects, for the messages of each expression, what that
//     expression selects; each expression selects the messages listed. The
//     broker converts the property string to the literal's type (a failed
//     conversion drops the message for the whole expression, so the order of
//     an OR matters), a missing property is unknown (never TRUE), NOT binds
//     tighter than =, a doubled quote is one quote inside a string literal.
//   - Trailing tokens after a complete expression are ignored.
//   - Messages a filter does not select are consumed for the group: a later
//     poll without a filter never sees them.
//   - An expression the broker cannot compile answers INTERNAL_SERVER_ERROR
//     "parse the consumer's subscription failed" on every receive, at once;
//     a session may still subscribe with it. An empty expression is
//     ILLEGAL_FILTER_EXPRESSION "Expression can't be null! SQL92" on a
//     receive.
func SQLFilters(t *testing.T, e *Env) {
	const s = "q"
	topic, group := rmqtest.NormalTopic(s), rmqtest.NormalGroup(s)
	run := rmqtest.Unique("q")
	p := e.Producer(t, topic)
	send := func(m *client.Message) string {
		t.Helper()
		res, err := p.Send(rmqtest.Context(t, 10*time.Second), m)
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
		return res[0].MessageID
	}
	// One message per case and property set; the body names both.
	var terms []string
	want := map[string]bool{}
	for ci, c := range sqlCases {
		for pi, ps := range sqlProps {
			props := map[string]string{"run": run, "qn": strconv.Itoa(ci)}
			for k, v := range ps.props {
				props[k] = v
			}
			body := fmt.Sprintf("%d/%d", ci, pi)
			send(&client.Message{Topic: topic, Tag: ps.tag, Keys: []string{run}, Properties: props, Body: []byte(body)})
			if slices.Contains(c.match, pi) {
				want[body] = true
			}
		}
		terms = append(terms, fmt.Sprintf("(qn = '%d' AND (%s))", ci, c.expr))
	}
	expr := fmt.Sprintf("run = '%s' AND (%s)", run, strings.Join(terms, " OR "))
	c := e.Client(t)
	if _, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.SimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic, Filter: client.SQLFilter(expr)}}}); err != nil {
		t.Fatalf("consumer session with an SQL92 subscription: %v", err)
	}
	req := client.ReceiveRequest{Group: group, Topic: topic, Filter: client.SQLFilter(expr), InvisibleDuration: 60 * time.Second, LongPollingTimeout: poll}
	got := Collect(rmqtest.Context(t, 40*time.Second), t, c, req, OfRun(run), len(want))
	seen := map[string]bool{}
	for _, m := range got {
		seen[string(m.Body)] = true
		if err := AckOne(t, c, group, m); err != nil {
			t.Errorf("ack %s: %v", m.Body, err)
		}
	}
	for ci, sc := range sqlCases {
		var gotIdx, wantIdx []int
		for pi := range sqlProps {
			b := fmt.Sprintf("%d/%d", ci, pi)
			if seen[b] {
				gotIdx = append(gotIdx, pi)
			}
			if want[b] {
				wantIdx = append(wantIdx, pi)
			}
		}
		if !slices.Equal(gotIdx, wantIdx) {
			t.Errorf("%q selected messages %v, want %v", sc.expr, gotIdx, wantIdx)
		}
	}

	// Trailing tokens are ignored; then a poll without a filter sees none
	// of the messages the filters skipped.
	send(&client.Message{Topic: topic, Keys: []string{run}, Properties: map[string]string{"run": run, "qn": "z", "a": "3"}, Body: []byte("z/3")})
	send(&client.Message{Topic: topic, Keys: []string{run}, Properties: map[string]string{"run": run, "qn": "z", "a": "4"}, Body: []byte("z/4")})
	trailing := fmt.Sprintf("run = '%s' AND qn = 'z' AND a = '3' xyz )", run)
	tc := e.Client(t)
	if _, err := tc.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.SimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic, Filter: client.SQLFilter(trailing)}}}); err != nil {
		t.Fatalf("consumer session: %v", err)
	}
	treq := req
	treq.Filter = client.SQLFilter(trailing)
	z := Collect(rmqtest.Context(t, 20*time.Second), t, tc, treq, OfRun(run), 1)
	if len(z) != 1 || string(z[0].Body) != "z/3" {
		t.Errorf("%q selected %v, want [z/3]", trailing, bodies(z))
	}
	for _, m := range z {
		if err := AckOne(t, tc, group, m); err != nil {
			t.Errorf("ack %s: %v", m.Body, err)
		}
	}
	nc := e.NormalConsumer(t, s)
	Nothing(t, nc, NormalReq(s, 60*time.Second), OfRun(run), poll+2*time.Second)

	// Expressions the broker cannot compile, and the empty one (sent as
	// is: the client package turns an empty filter into TAG "*").
	stub := v2.NewMessagingServiceClient(c.Conn())
	for _, bad := range append(sqlIllegal, "") {
		wantCode, wantText := v2.Code_INTERNAL_SERVER_ERROR, "parse the consumer's subscription failed"
		if bad == "" {
			wantCode, wantText = v2.Code_ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92"
		}
		for i := 0; i < 2; i++ {
			st, n, took := sqlReceive(t, stub, c, bad)
			if st.GetCode() != wantCode || st.GetMessage() != wantText || n != 0 || took > 2*time.Second {
				t.Errorf("receive with %q: %v %q and %d messages after %v; want %v %q at once", bad, st.GetCode(), st.GetMessage(), n, took, wantCode, wantText)
			}
		}
	}
	// A session may subscribe with an expression the broker cannot compile:
	// the proxy only refuses an empty one there (with gRPC InvalidArgument
	// "expression format is not correct", which rmqfake does not emulate
	// yet, so it is not asserted here).
	if err := sqlSettings(t, e.Client(t), "a = NULL"); err != nil {
		t.Errorf("Telemetry settings subscribing with %q: %v, want them accepted", "a = NULL", err)
	}
}

// sqlReceive polls scenario q's group with an SQL92 filter and returns the
// status, how many messages came and how long it took.
func sqlReceive(t *testing.T, stub v2.MessagingServiceClient, c *client.Client, expr string) (*v2.Status, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.OutgoingContext(context.Background()), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	rs, err := stub.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{
		Group:            &v2.Resource{Name: rmqtest.NormalGroup("q")},
		MessageQueue:     &v2.MessageQueue{Topic: &v2.Resource{Name: rmqtest.NormalTopic("q")}},
		FilterExpression: &v2.FilterExpression{Type: v2.FilterType_SQL, Expression: expr},
		BatchSize:        1, InvisibleDuration: durationpb.New(MinInvisible), LongPollingTimeout: durationpb.New(poll),
	})
	if err != nil {
		t.Fatalf("receive with %q: %v", expr, err)
	}
	var st *v2.Status
	n := 0
	for {
		r, err := rs.Recv()
		if err != nil {
			return st, n, time.Since(t0)
		}
		switch x := r.GetContent().(type) {
		case *v2.ReceiveMessageResponse_Status:
			st = x.Status
		case *v2.ReceiveMessageResponse_Message:
			n++
		}
	}
}

// sqlSettings opens a Telemetry stream for c and sends the settings of a
// simple consumer of scenario q subscribing with SQL92 expression expr. It
// returns the stream's error, nil when the settings were answered.
func sqlSettings(t *testing.T, c *client.Client, expr string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.OutgoingContext(context.Background()), 10*time.Second)
	defer cancel()
	tel, err := v2.NewMessagingServiceClient(c.Conn()).Telemetry(ctx)
	if err != nil {
		return err
	}
	typ := v2.ClientType_SIMPLE_CONSUMER
	err = tel.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{
		ClientType:     &typ,
		AccessPoint:    &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: "127.0.0.1", Port: 8081}}},
		RequestTimeout: durationpb.New(3 * time.Second),
		UserAgent:      &v2.UA{Language: v2.Language_GOLANG, Version: "5.1.4", Platform: "linux", Hostname: "q"},
		PubSub: &v2.Settings_Subscription{Subscription: &v2.Subscription{
			Group:              &v2.Resource{Name: rmqtest.NormalGroup("q")},
			LongPollingTimeout: durationpb.New(poll),
			Subscriptions: []*v2.SubscriptionEntry{{
				Topic:      &v2.Resource{Name: rmqtest.NormalTopic("q")},
				Expression: &v2.FilterExpression{Type: v2.FilterType_SQL, Expression: expr},
			}},
		}},
	}}})
	if err != nil {
		return err
	}
	_, err = tel.Recv()
	_ = tel.CloseSend()
	return err
}
