package rmqkuiper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// target is where a test runs: rmqfake (always) or the real broker (when
// RMQFLOW_ENDPOINT is set), with a LITE main topic the rule reads and one it
// writes, each with a wildcard group. On the real broker they are the
// fixtures rmqflow-sql-<scenario>[-out] (scripts/rocketmq/fixtures.txt), and
// every lite topic a test sends to is unique to the run, so that messages
// left by an earlier run are told apart.
type target struct {
	name      string
	endpoint  string
	in, inG   string
	out, outG string
	// fake is rmqfake, whose counters show acks; nil on the real broker.
	fake *rmqfake.Server
	// run prefixes the lite topics of this run.
	run string
	// simple: the in topic is a normal topic read in the source's simple
	// mode (its group a plain one) with the tag filter tag; the out topic
	// stays LITE. The rows' "session" field tells this run's apart.
	simple bool
	tag    string
	// exact: the in group is a lite group without wildcard (lite-topics);
	// liteTopics, when set, are the lite topics read subscribes it to.
	exact      bool
	liteTopics []string
}

// eachTarget runs fn on rmqfake, then on the real broker if there is one.
// The rule tests run in parallel (go test's -parallel, GOMAXPROCS by
// default): each has its own server, fake and fixture topics.
func eachTarget(t *testing.T, scenario string, fn func(t *testing.T, tg *target)) {
	eachTargetOf(t, scenario, false, fn)
}

// eachTargetOf is eachTarget with the in topic a normal one read in simple
// mode when simple is set.
func eachTargetOf(t *testing.T, scenario string, simple bool, fn func(t *testing.T, tg *target)) {
	eachTargetKind(t, scenario, simple, false, fn)
}

// eachTargetKind is eachTargetOf with the in group a lite group without
// wildcard (an exact subscription, lite-topics) when exact is set.
func eachTargetKind(t *testing.T, scenario string, simple, exact bool, fn func(t *testing.T, tg *target)) {
	t.Run("rmqfake", func(t *testing.T) {
		tg := fakeTarget(t, "s", simple)
		if exact {
			tg.exact = true
			if err := tg.fake.CreateGroup("in-x-g", rmqfake.LiteBind(tg.in)); err != nil {
				t.Fatal(err)
			}
			tg.inG = "in-x-g"
		}
		fn(t, tg)
	})
	t.Run("broker", func(t *testing.T) {
		if os.Getenv(rmqtest.EnvEndpoint) == "" {
			t.Skipf("%s is not set: no real broker", rmqtest.EnvEndpoint)
		}
		base := "rmqflow-sql-" + scenario
		tg := &target{name: "broker", endpoint: rmqtest.Endpoint(t), in: base, inG: base + "-g", out: base + "-out",
			outG: base + "-out-g", run: rmqtest.Unique("s"), simple: simple, exact: exact}
		tg.requireFixtures(t)
		fn(t, tg)
	})
}

// fakeTarget is an rmqfake with the in and out topics and groups; run
// prefixes the lite topics.
func fakeTarget(t *testing.T, run string, simple bool) *target {
	t.Helper()
	f := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	tg := &target{name: "rmqfake", endpoint: f.Addr(), in: "in", inG: "in-g", out: "out", outG: "out-g", fake: f, run: run, simple: simple}
	for _, p := range [][2]string{{tg.in, tg.inG}, {tg.out, tg.outG}} {
		if simple && p[0] == tg.in {
			if err := f.CreateTopic(p[0], rmqfake.TopicNormal); err != nil {
				t.Fatal(err)
			}
			if err := f.CreateGroup(p[1]); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := f.CreateTopic(p[0], rmqfake.TopicLite); err != nil {
			t.Fatal(err)
		}
		if err := f.CreateGroup(p[1], rmqfake.LiteBind(p[0]), rmqfake.Wildcard()); err != nil {
			t.Fatal(err)
		}
	}
	return tg
}

// requireFixtures fails a real-broker test whose fixture topics the broker
// does not have (scripts/rocketmq.sh creates the fixtures of
// scripts/rocketmq/fixtures.txt when it starts; on a broker started before
// the file was edited, run scripts/rocketmq.sh apply scripts/rocketmq/fixtures.txt).
func (tg *target) requireFixtures(t *testing.T) {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: tg.endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, topic := range []string{tg.in, tg.out} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := c.QueryRoute(ctx, topic)
		cancel()
		if err != nil {
			t.Fatalf("the broker has no fixture topic %s (scripts/rocketmq/fixtures.txt; scripts/rocketmq.sh apply scripts/rocketmq/fixtures.txt creates it): %v", topic, err)
		}
	}
}

// lite names lite topic i of this run.
func (tg *target) lite(i int) string { return fmt.Sprintf("%s-%d", tg.run, i) }

// ours reports whether a lite topic belongs to this run.
func (tg *target) ours(lite string) bool { return strings.HasPrefix(lite, tg.run+"-") }

// sourceSection is the rocketmq.yaml section the tests' streams use.
func (tg *target) sourceSection() map[string]any {
	m := map[string]any{"endpoints": tg.endpoint, "consumer-group": tg.inG, "await-duration": "5s",
		"invisible-duration": "10s", "renewal-ahead-time": "3s"}
	if tg.simple {
		m["mode"], m["filter-type"], m["filter-expression"] = "simple", "tag", tg.tag
	}
	if tg.exact {
		m["lite-topics"] = tg.liteTopics
	}
	return m
}

// sinkAction is a rocketmq action writing to the out topic, one lite topic
// per session.
func (tg *target) sinkAction(extra map[string]any) map[string]any {
	a := map[string]any{"endpoints": tg.endpoint, "topic": tg.out, "lite-topic-field": "session"}
	for k, v := range extra {
		a[k] = v
	}
	return map[string]any{"rocketmq": a}
}

// send produces one JSON message per row into the in topic, row i into lite
// topic lite(i).
func (tg *target) send(t *testing.T, rows []map[string]any, lite func(i int) string) {
	t.Helper()
	tg.sendWith(t, rows, lite, nil)
}

// sendWith is send with user properties per row.
func (tg *target) sendWith(t *testing.T, rows []map[string]any, lite func(i int) string, props func(i int) map[string]string) {
	t.Helper()
	recs := make([]rmqflow.Record, len(rows))
	for i, r := range rows {
		b, _ := json.Marshal(r)
		if r == nil { // a JSON array of two rows
			b = []byte(`[{"n": 100, "text": "t100"}, {"n": 101, "text": "t101"}]`)
		}
		recs[i] = rmqflow.Record{LiteTopic: lite(i), Body: b}
		if props != nil {
			recs[i].Properties = props(i)
		}
	}
	tg.sendRecords(t, recs)
}

// sendRecords produces records into the in topic.
func (tg *target) sendRecords(t *testing.T, recs []rmqflow.Record) {
	t.Helper()
	ctx := t.Context()
	s, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: tg.endpoint}, Topic: tg.in})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	_, errs := s.Send(ctx, recs...)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// inStats is the in group's counts on rmqfake.
func (tg *target) inStats() rmqfake.Counts { return tg.fake.Stats().Groups[tg.inG].Counts }

// outRow is one message the rules wrote, as read back.
type outRow struct {
	topic   string // the message's topic: %DLQ%<group> for a dead-lettered copy
	lite    string
	body    map[string]any
	attempt int32
	tag     string
	keys    []string
	props   map[string]string
}

// reader reads the out topic of a target and acks what it read; it keeps
// the rows of this run.
type reader struct {
	mu   sync.Mutex
	rows []outRow
}

func (tg *target) readOut(t *testing.T) *reader {
	t.Helper()
	return tg.read(t, tg.out, tg.outG, true)
}

// read reads topic through group, acking every message when ack is set,
// leaving them otherwise.
func (tg *target) read(t *testing.T, topic, group string, ack bool) *reader {
	t.Helper()
	cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: tg.endpoint},
		Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}}, AwaitDuration: 5 * time.Second,
		InvisibleDuration: 10 * time.Second}
	simple := tg.simple && topic == tg.in
	if tg.exact && topic == tg.in {
		cfg.Lite[0].LiteTopics = tg.liteTopics
	}
	if simple {
		cfg.Mode, cfg.Lite, cfg.Topic, cfg.Group, cfg.Filter = rmqflow.ModeSimple, nil, topic, group, client.TagFilter(tg.tag)
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := src.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &reader{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := src.Next(ctx)
			if err != nil {
				return
			}
			if ack {
				_ = src.Acker().Ack(ctx, m.Handle)
			}
			var body map[string]any
			_ = json.Unmarshal(m.Value, &body)
			if session, _ := body["session"].(string); !tg.ours(m.Meta.LiteTopic) && !(simple && tg.ours(session)) {
				continue
			}
			r.mu.Lock()
			r.rows = append(r.rows, outRow{topic: m.Meta.Topic, lite: m.Meta.LiteTopic, body: body, attempt: m.Meta.DeliveryAttempt,
				tag: m.Meta.Tag, keys: m.Meta.Keys, props: m.Meta.Properties})
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		_ = src.Close(cctx)
	})
	return r
}

func (r *reader) snapshot() []outRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outRow(nil), r.rows...)
}

// eventually polls cond every 50 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noneComeBack reads the in topic's group for d after the server stopped
// and fails if a message of this run comes back: every one was acked. It is
// the real broker's check (rmqfake's counters say it at once).
func (tg *target) noneComeBack(t *testing.T, d time.Duration) {
	t.Helper()
	r := tg.read(t, tg.in, tg.inG, true)
	time.Sleep(d) // waiting for an absence: the broker would redeliver within d
	if rows := r.snapshot(); len(rows) > 0 {
		t.Fatalf("%d messages of this run came back after the rule acked them, e.g. %v", len(rows), rows[0])
	}
}

func rowsN(n int, f func(i int) map[string]any) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func num(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case json.Number:
		n, _ := x.Int64()
		return int(n)
	}
	return -1
}

// watchAcksFollowWrites samples, on rmqfake, the invariant of the rules that
// write results to tg.out: no input message is acked before a result was
// written. The function it returns stops the sampling and gives the
// violation seen, "" for none (always "" on the broker, whose acks cannot
// be counted).
func (tg *target) watchAcksFollowWrites() (stop func() string) {
	quit, checked := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(checked)
		for tg.fake != nil {
			if acked, written := tg.inStats().Acked, tg.fake.Stats().Topics[tg.out].Sent; acked > 0 && written == 0 {
				checked <- fmt.Sprintf("%d input messages acked before any result was written", acked)
				return
			}
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() string {
		once.Do(func() { close(quit) })
		return <-checked
	}
}
