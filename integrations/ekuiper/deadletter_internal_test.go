package rmqkuiper

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger is an api.Logger that keeps its lines.
type testLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLogger) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
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
