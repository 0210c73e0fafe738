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
// and acked once stored: nothing goes to %DLQ%<group>. On rmqfake.
func TestDeadLetterTopicParks(t *testing.T) {
	fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, fake.CreateTopic("dlt", rmqfake.TopicLite))
	must(t, fake.CreateGroup("dlt-g", rmqfake.LiteBind("dlt"), rmqfake.Wildcard()))
	must(t, fake.CreateTopic("dlt-parked", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("dlt-parked-g"))
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	conf, _, err := parseSource(map[string]any{"endpoints": fake.Addr(), "datasource": "dlt", "consumer-group": "dlt-g",
		"max-delivery-attempt": 1, "dead-letter-topic": "dlt-parked"})
	must(t, err)
	log := &testLogger{}
	s := &source{conf: conf, log: log}
	sess, err := s.open(ctx)
	must(t, err)
	defer sess.close(ctx)

	in, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conf.src.Connection, Topic: "dlt", LiteTopic: "l"})
	must(t, err)
	defer in.Close(context.WithoutCancel(ctx))
	_, err = in.Write(ctx, rmqflow.Record{Body: []byte(`{"n":1}`), Properties: map[string]string{"k": "v"}}).Wait(ctx)
	must(t, err)
	m, err := sess.src.Next(ctx)
	must(t, err)

	// The rule's acking sink fails on the message's row.
	l := &ledger{key: ledgerKey{"dlt-rule", 1}, marks: map[string]int64{}, now: time.Now}
	must(t, l.attach(s, rmqAcker{sess.src.Acker(), sess.v}, 1))
	seq := l.addMsg(m.Handle, m, 1, false)[0]
	if n := l.failedOwn(ctx, seq); n != 1 {
		t.Fatalf("failedOwn gave back %d messages, want 1", n)
	}

	out, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conf.src.Connection, Mode: rmqflow.ModeSimple,
		Topic: "dlt-parked", Group: "dlt-parked-g"}, rmqflow.BytesDecoder())
	must(t, err)
	must(t, out.Start(ctx))
	defer out.Close(context.WithoutCancel(ctx))
	p, err := out.Next(ctx)
	must(t, err)
	props := p.Meta.Properties
	if string(p.Value) != `{"n":1}` || props["k"] != "v" || props[rmqflow.PropertyDeadLetterMessageID] != m.Meta.MessageID ||
		props[rmqflow.PropertyDeadLetterOrigin] != "dlt" || props[rmqflow.PropertyDeadLetterLiteTopic] != "l" {
		t.Errorf("parked copy %q with properties %v: want the body, k=v, and where it came from", p.Value, props)
	}
	must(t, out.Acker().Ack(ctx, p.Handle))
	err = fake.WaitFor(ctx, func(st rmqfake.Stats) bool { return st.Groups["dlt-g"].Acked == 1 })
	if g := fake.Stats().Groups["dlt-g"]; err != nil || g.DeadLettered != 0 {
		t.Errorf("group counts %+v (%v): want the original acked once stored, none in %%DLQ%%dlt-g", g.Counts, err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	t.Log(log.lines)
	if len(log.lines) != 1 || !strings.Contains(log.lines[0], "failed 1 times (valve at 1): parked in dead-letter-topic dlt-parked and acked") {
		t.Errorf("log %q: want one line saying it was parked", log.lines)
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
