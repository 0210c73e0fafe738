package rmqkuiper

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/lf-edge/ekuiper/contract/v2/api"
	mockContext "github.com/lf-edge/ekuiper/v2/pkg/mock/context"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger is an api.Logger that keeps its lines (its warnings and
// errors).
type testLogger struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed at the next line; nil until waited on
}

func (l *testLogger) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// waitLines waits until the logger has n lines, or ctx ends, and returns
// its lines then.
func (l *testLogger) waitLines(ctx context.Context, n int) []string {
	for {
		l.mu.Lock()
		if len(l.lines) >= n || ctx.Err() != nil {
			defer l.mu.Unlock()
			return slices.Clone(l.lines)
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}
func (l *testLogger) Debug(args ...any)                 {}
func (l *testLogger) Info(args ...any)                  {}
func (l *testLogger) Warn(args ...any)                  { l.add("%s", fmt.Sprint(args...)) }
func (l *testLogger) Error(args ...any)                 { l.add("%s", fmt.Sprint(args...)) }
func (l *testLogger) Debugf(format string, args ...any) {}
func (l *testLogger) Infof(format string, args ...any)  {}
func (l *testLogger) Warnf(format string, args ...any)  { l.add(format, args...) }
func (l *testLogger) Errorf(format string, args ...any) { l.add(format, args...) }

// TestDeadLetterTopicParks: with dead-letter-topic, a message whose rows
// failed in an acking sink once its valve fired (max-delivery-attempt 1:
// at its first failure) is written to that topic, with where it came from,
// and acked once stored: nothing goes to %DLQ%<group>. Through the source's
// own loop (ingest keeps the message for the park), on rmqfake.
func TestDeadLetterTopicParks(t *testing.T) {
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("dlt", rmqfake.TopicLite))
	must(t, fake.CreateGroup("dlt-g", rmqfake.LiteBind("dlt"), rmqfake.Wildcard()))
	must(t, fake.CreateTopic("dlt-parked", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("dlt-parked-g"))
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	t.Setenv("RMQFLOW_SQL_RULE_API", "http://127.0.0.1:1") // no rule to confirm
	conf, _, err := parseSource(map[string]any{"endpoints": fake.Addr(), "datasource": "dlt", "consumer-group": "dlt-g",
		"idle-ack": 0, "max-delivery-attempt": 1, "dead-letter-topic": "dlt-parked"})
	must(t, err)
	log := &testLogger{}
	rows, _ := failingRule(t, ctx, &source{conf: conf, log: log}, "dlt-rule")

	in, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conf.src.Connection, Topic: "dlt", LiteTopic: "l"})
	must(t, err)
	defer in.Close(context.WithoutCancel(ctx))
	_, err = in.Write(ctx, rmqflow.Record{Body: []byte(`{"n":1}`), Properties: map[string]string{"k": "v"}}).Wait(ctx)
	must(t, err)
	var id any
	select {
	case meta := <-rows:
		id = meta[rmqflow.AttrMessageID]
	case <-ctx.Done():
		t.Fatal("no row ingested")
	}

	out, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conf.src.Connection, Mode: rmqflow.ModeSimple,
		Topic: "dlt-parked", Group: "dlt-parked-g"}, rmqflow.BytesDecoder())
	must(t, err)
	must(t, out.Start(ctx))
	defer out.Close(context.WithoutCancel(ctx))
	p, err := out.Next(ctx)
	must(t, err)
	props := p.Meta.Properties
	if string(p.Value) != `{"n":1}` || props["k"] != "v" || props[rmqflow.PropertyDeadLetterMessageID] != id ||
		props[rmqflow.PropertyDeadLetterOrigin] != "dlt" || props[rmqflow.PropertyDeadLetterLiteTopic] != "l" {
		t.Errorf("parked copy %q with properties %v: want the body, k=v, and where it came from (message %v)", p.Value, props, id)
	}
	must(t, out.Acker().Ack(ctx, p.Handle))
	lines := log.waitLines(ctx, 1)
	t.Log(lines)
	if g := fake.Stats().Groups["dlt-g"]; g.Acked != 1 || g.DeadLettered != 0 {
		t.Errorf("group counts %+v: want the original acked once stored, none in %%DLQ%%dlt-g", g.Counts)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "failed 1 times (valve at 1): parked in dead-letter-topic dlt-parked and acked") {
		t.Errorf("log %q: want one line saying it was parked", lines)
	}
}

// TestDeadLetterTopicOfWrongType: a dead-letter-topic that cannot store a
// parked copy, a LITE topic (the copy has no lite topic) or a FIFO one,
// fails the source when it opens, with an error that says so (before, the
// source opened, and every park failed: the message came back until the
// broker's own limit, holding its lite topic). On rmqfake.
func TestDeadLetterTopicOfWrongType(t *testing.T) {
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("wt", rmqfake.TopicLite))
	must(t, fake.CreateGroup("wt-g", rmqfake.LiteBind("wt"), rmqfake.Wildcard()))
	must(t, fake.CreateTopic("wt-lite", rmqfake.TopicLite))
	must(t, fake.CreateTopic("wt-fifo", rmqfake.TopicFIFO))
	for topic, want := range map[string]string{"wt-lite": "accepts LITE messages only", "wt-fifo": "accepts FIFO messages only"} {
		conf, _, err := parseSource(map[string]any{"endpoints": fake.Addr(), "datasource": "wt", "consumer-group": "wt-g",
			"dead-letter-topic": topic})
		must(t, err)
		sess, err := (&source{conf: conf, log: &testLogger{}}).open(t.Context())
		if err == nil {
			sess.close(t.Context())
		}
		if err == nil || !strings.Contains(err.Error(), "dead-letter-topic "+topic) || !strings.Contains(err.Error(), want) {
			t.Errorf("dead-letter-topic %s: %v; want the source refused, saying it %s", topic, err, want)
		}
	}
}

// TestDeadLetterTopicParkKeepsFailing: a message whose park in
// dead-letter-topic keeps failing (a topic that refuses every copy, past
// the check at start) is not left to come back until the broker's own
// limit, holding its lite topic: after maxParkFailures failed parks it goes
// where on-valve says (the group's dead-letter queue), logged (before, it
// came back and failed to park at every delivery). On rmqfake, whose
// dead-letter-topic answers every send as a LITE topic answers a copy
// without lite topic.
func TestDeadLetterTopicParkKeepsFailing(t *testing.T) {
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("pf", rmqfake.TopicLite))
	must(t, fake.CreateGroup("pf-g", rmqfake.LiteBind("pf"), rmqfake.Wildcard()))
	must(t, fake.CreateTopic("pf-parked", rmqfake.TopicNormal))
	fake.Intercept("SendMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, m := range c.Request.(*v2.SendMessageRequest).GetMessages() {
			if m.GetTopic().GetName() == "pf-parked" {
				return rmqfake.Verdict{Response: &v2.SendMessageResponse{Status: &v2.Status{Code: v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
					Message: "test: TopicMessageType validate failed, the expected type is LITE, but actual type is NORMAL"}}}
			}
		}
		return rmqfake.Verdict{}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Setenv("RMQFLOW_SQL_RULE_API", "http://127.0.0.1:1") // no rule to confirm
	conf, _, err := parseSource(map[string]any{"endpoints": fake.Addr(), "datasource": "pf", "consumer-group": "pf-g",
		"idle-ack": 0, "invisible-duration": "10s", "max-delivery-attempt": 1, "dead-letter-topic": "pf-parked"})
	must(t, err)
	log := &testLogger{}
	failingRule(t, ctx, &source{conf: conf, log: log}, "pf-rule")
	in, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conf.src.Connection, Topic: "pf", LiteTopic: "l"})
	must(t, err)
	defer in.Close(context.WithoutCancel(ctx))
	_, err = in.Write(ctx, rmqflow.Record{Body: []byte(`{"n":1}`)}).Wait(ctx)
	must(t, err)

	// Two failed parks, each left to come back; the third falls back.
	lines := log.waitLines(ctx, maxParkFailures+1)
	t.Logf("log: %q", lines)
	for i := range maxParkFailures - 1 {
		if !strings.Contains(lines[i], "parking it in dead-letter-topic pf-parked failed, it comes back") {
			t.Errorf("line %d %q: want a failed park", i, lines[i])
		}
	}
	if len(lines) < maxParkFailures+1 || !strings.Contains(lines[maxParkFailures-1], fmt.Sprintf("parking it in dead-letter-topic pf-parked failed %d times", maxParkFailures)) ||
		!strings.Contains(lines[maxParkFailures], "moved to the dead-letter queue %DLQ%pf-g") {
		t.Errorf("log %q: want park %d to fall back to on-valve's dead-letter queue", lines, maxParkFailures)
	}
	if st := fake.Stats(); st.Groups["pf-g"].DeadLettered != 1 || st.Topics["pf-parked"].Sent != 0 {
		t.Errorf("%d in %%DLQ%%pf-g, %d parked: want 1 and 0", st.Groups["pf-g"].DeadLettered, st.Topics["pf-parked"].Sent)
	}
}

// failingRule runs s as Connect and Subscribe run it for one run of a rule
// in ack-mode sink, without eKuiper: it opens s's session, joins the run's
// ledger as its source (one acking sink), and ingests; the rule's one
// acking sink fails every row as soon as it is ingested (ledger.failedOwn
// with the row's rocketmq_seq). Each row's meta is sent on the returned
// channel after that. stop closes the source (Close). The run never gets
// its rule confirmed (no REST API: watchRule finds no rule named rule).
func failingRule(t *testing.T, ctx context.Context, s *source, rule string) (rows <-chan map[string]any, stop func()) {
	t.Helper()
	sess, err := s.open(ctx)
	must(t, err)
	led := ledgerOf(ledgerKey{rule, 1})
	if err := led.attach(s, rmqAcker{sess.src.Acker(), sess.v}, 1); err != nil {
		sess.close(ctx)
		t.Fatal(err)
	}
	s.mu.Lock()
	s.sess, s.led, s.sch, s.def = sess, led, func(string, string) {}, ruleDef{ID: rule}
	s.mu.Unlock()
	out := make(chan map[string]any, 64)
	sctx := mockContext.NewMockContext(rule, "op")
	must(t, s.Subscribe(sctx, func(_ api.StreamContext, _ []byte, meta map[string]any, _ time.Time) {
		if seq, ok := meta[MetaSeq].(int64); ok {
			led.failedOwn(ctx, seq)
		}
		out <- meta
	}, func(api.StreamContext, error) {}))
	var once sync.Once
	stop = func() { once.Do(func() { _ = s.Close(sctx) }) }
	t.Cleanup(stop)
	return out, stop
}

// TestParkedAckFailedOneCopy: a message parked in dead-letter-topic whose
// ack then failed comes back; a source of the same process that has no
// dead-letter-topic (the stream changed, the rule restarted) acks it on
// arrival, and does not hand its rows to the rule again, which would fail
// them and send a second copy to %DLQ%<group> (a first version did: the
// process remembered the park, not where it went). One copy, in the parked
// topic; the original acked. Through the source's own loop, on rmqfake.
func TestParkedAckFailedOneCopy(t *testing.T) {
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("pk", rmqfake.TopicLite))
	must(t, fake.CreateGroup("pk-g", rmqfake.LiteBind("pk"), rmqfake.Wildcard()))
	must(t, fake.CreateTopic("pk-parked", rmqfake.TopicNormal))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Setenv("RMQFLOW_SQL_RULE_API", "http://127.0.0.1:1") // no rule to confirm
	props := func(deadLetter string) map[string]any {
		m := map[string]any{"endpoints": fake.Addr(), "datasource": "pk", "consumer-group": "pk-g", "idle-ack": 0,
			"invisible-duration": "10s", "max-delivery-attempt": 1}
		if deadLetter != "" {
			m["dead-letter-topic"] = deadLetter
		}
		return m
	}
	var failAcks atomic.Bool
	fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		if failAcks.Load() {
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "test: ack lost")}
		}
		return rmqfake.Verdict{}
	})
	in, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr()}, Topic: "pk", LiteTopic: "l"})
	must(t, err)
	defer in.Close(context.WithoutCancel(ctx))

	// The first run parks the message; its ack fails.
	conf, _, err := parseSource(props("pk-parked"))
	must(t, err)
	log := &testLogger{}
	failAcks.Store(true)
	rows, stop := failingRule(t, ctx, &source{conf: conf, log: log}, "pk-rule-a")
	_, err = in.Write(ctx, rmqflow.Record{Body: []byte(`{"n":1}`)}).Wait(ctx)
	must(t, err)
	select {
	case <-rows:
	case <-ctx.Done():
		t.Fatal("no row ingested")
	}
	stop()
	failAcks.Store(false)
	lines := log.waitLines(ctx, 1)
	if st := fake.Stats(); st.Topics["pk-parked"].Sent != 1 || st.Groups["pk-g"].Acked != 0 || !strings.Contains(lines[0], "but its ack failed") {
		t.Fatalf("after the first run: %d parked copies, %d acked, log %q; want 1 parked, its ack failed",
			st.Topics["pk-parked"].Sent, st.Groups["pk-g"].Acked, lines)
	}

	// The stream loses its dead-letter-topic; the message comes back.
	conf, _, err = parseSource(props(""))
	must(t, err)
	rows, _ = failingRule(t, ctx, &source{conf: conf, log: log}, "pk-rule-b")
	// What the second run does with it is logged once its RPC answered.
	lines = log.waitLines(ctx, 2)
	t.Logf("log: %q", lines)
	st := fake.Stats()
	if g := st.Groups["pk-g"]; g.Acked != 1 || g.DeadLettered != 0 || st.Topics["pk-parked"].Sent != 1 {
		t.Errorf("group %+v, %d parked copies: want the original acked, 1 parked copy, none in %%DLQ%%pk-g", g.Counts, st.Topics["pk-parked"].Sent)
	}
	if len(rows) != 0 {
		t.Errorf("%d rows handed to the rule again: want none (the message was parked)", len(rows))
	}
}
