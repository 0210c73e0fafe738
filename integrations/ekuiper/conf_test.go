package rmqkuiper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mockContext "github.com/lf-edge/ekuiper/v2/pkg/mock/context"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestParseSource: the reference connector's option names map onto the
// rmqflow source; durations take "30s" or milliseconds; bad values name the
// key.
func TestParseSource(t *testing.T) {
	c, unknown, err := parseSource(map[string]any{"endpoints": "127.0.0.1:8081", "datasource": "agents",
		"consumer-group": "agents-g", "await-duration": "5s", "invisible-duration": 30000, "max-message-num": 16,
		"fetch-concurrency": "2", "format": "json", "typo-key": 1})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.src
	if sc.Lite[0].Topic != "agents" || sc.Lite[0].Group != "agents-g" || sc.AwaitDuration != 5*time.Second ||
		sc.InvisibleDuration != 30*time.Second || sc.MaxMessageNum != 16 || sc.FetchConcurrency != 2 {
		t.Fatalf("parsed %+v", sc)
	}
	if c.ackMode != AckSink || !sc.Leases.Enabled || sc.Leases.MaxExtension != DefaultPendingMaxAge {
		t.Fatalf("ack mode %q, leases %+v", c.ackMode, sc.Leases)
	}
	if len(unknown) != 1 || unknown[0] != "typo-key" {
		t.Fatalf("unknown keys %v", unknown)
	}
	for key, bad := range map[string]map[string]any{
		"endpoints":         {"datasource": "t", "consumer-group": "g"},
		"consumer-group":    {"endpoints": "h:1", "datasource": "t"},
		"mode":              {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "mode": "push"},
		"ack-mode":          {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "ack-mode": "never"},
		"await-duration":    {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "await-duration": "soon"},
		"secret-key":        {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "access-key": "ak"},
		"InvisibleDuration": {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "invisible-duration": "1s"},
		"filter-expression": {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "mode": "simple", "filter-type": "sql"},
		"interval":          {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "interval": "1s"},
		"payloadFormat":     {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "payloadFormat": "json"},
		"payloadField":      {"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "payloadField": "data"},
	} {
		_, _, err := parseSource(bad)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming it", key, err)
		}
	}
	t.Setenv("TEST_RMQ_AK", "ak1")
	t.Setenv("TEST_RMQ_SK", "sk1")
	c, _, err = parseSource(map[string]any{"endpoints": "h:1", "datasource": "t", "consumer-group": "g",
		"access-key-env": "TEST_RMQ_AK", "secret-key-env": "TEST_RMQ_SK"})
	if err != nil || c.src.Credentials.AccessKey != "ak1" || c.src.Credentials.AccessSecret != "sk1" {
		t.Fatalf("keys from the environment: %v", err)
	}
	_, _, err = parseSource(map[string]any{"endpoints": "h:1", "datasource": "t", "consumer-group": "g",
		"access-key": "ak", "secret-key-env": "TEST_RMQ_UNSET"})
	if err == nil || !strings.Contains(err.Error(), "TEST_RMQ_UNSET") || strings.Contains(err.Error(), "sk1") {
		t.Fatalf("an unset variable: %v", err)
	}
	// A plain secret-key is refused (eKuiper logs the configuration), without
	// its value in the error; secret-key-env is the way.
	const secret = "S3cr3t-value-never-logged"
	for _, m := range []map[string]any{
		{"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "access-key": "ak", "secret-key": secret},
		{"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "access-key": "ak", "Secret-Key": secret},
	} {
		_, _, err := parseSource(m)
		if err == nil || !strings.Contains(err.Error(), "secret-key-env") || strings.Contains(err.Error(), secret) {
			t.Errorf("a plain secret-key in the source: %v", err)
		}
		if err := NewSource().(interface{ Validate(map[string]any) error }).Validate(m); err == nil ||
			!strings.Contains(err.Error(), "secret-key-env") || strings.Contains(err.Error(), secret) {
			t.Errorf("a plain secret-key in a conf key: %v", err)
		}
		m["topic"] = "t"
		if _, _, err := parseSink(m); err == nil || !strings.Contains(err.Error(), "secret-key-env") || strings.Contains(err.Error(), secret) {
			t.Errorf("a plain secret-key in the sink: %v", err)
		}
	}
	if err := NewSource().(interface{ Validate(map[string]any) error }).Validate(map[string]any{"access-key": "ak", "secret-key-env": "X"}); err != nil {
		t.Errorf("a conf key with secret-key-env: %v", err)
	}
	var ce *ConfError
	if _, _, err := parseSource(map[string]any{}); !errors.As(err, &ce) {
		t.Errorf("an empty configuration: %v, want a *ConfError", err)
	}
	var oe *rmqflow.OptionError
	if _, _, err := parseSource(map[string]any{"endpoints": "h:1", "datasource": "t", "consumer-group": "g", "max-message-num": 99}); !errors.As(err, &oe) {
		t.Errorf("max-message-num 99: %v, want rmqflow's *OptionError", err)
	}
}

// TestParseSink: topic is required, lite-topic and lite-topic-field exclude
// each other, and eKuiper's own action keys are not reported as unknown.
func TestParseSink(t *testing.T) {
	c, unknown, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "answers", "lite-topic-field": "lite",
		"sendSingle": false, "bufferLength": 1024})
	if err != nil || c.liteTopicField != "lite" || !c.ack || len(unknown) != 0 {
		t.Fatalf("conf %+v, unknown %v, err %v", c, unknown, err)
	}
	if _, _, err := parseSink(map[string]any{"endpoints": "h:1"}); err == nil || !strings.Contains(err.Error(), "topic") {
		t.Errorf("no topic: %v", err)
	}
	if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", "lite-topic": "a", "lite-topic-field": "b"}); err == nil {
		t.Error("lite-topic with lite-topic-field accepted")
	}
	for _, key := range []string{"sendSingle", "enableCache"} {
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: true}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s true on an acking sink: %v", key, err)
		}
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: true, "ack": false}); err != nil {
			t.Errorf("%s true on a sink that does not ack: %v", key, err)
		}
	}
	// eKuiper reads its action options in any capitalisation: another
	// spelling of a guarded one (which the checks read exactly) is refused,
	// here and in the rule check. "SendSingle": true split a window's result
	// into calls, and the first call's progress acked the other groups' rows.
	for _, key := range []string{"SendSingle", "ENABLECACHE", "Concurrency", "batchsize", "DataTemplate"} {
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: true}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s on an acking sink: %v, want it refused", key, err)
		}
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: false}); err == nil {
			t.Errorf("%s (false) on an acking sink accepted: write it as eKuiper documents it", key)
		}
	}
	if c, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", "ack": false}); err != nil || c.ack {
		t.Errorf("ack false: %+v, %v", c, err)
	}
	// eKuiper evaluates a template property over the call's list of rows
	// unless sendSingle is true, and drops the rows when that fails.
	for _, key := range []string{"lite-topic", "tag", "keys"} {
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: "{{.session}}"}); err == nil || !strings.Contains(err.Error(), key+"-field") {
			t.Errorf("a template in %s of an acking sink: %v", key, err)
		}
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: "{{.session}}", "ack": false}); err == nil {
			t.Errorf("a template in %s without sendSingle accepted", key)
		}
		if _, _, err := parseSink(map[string]any{"endpoints": "h:1", "topic": "t", key: "{{.session}}", "ack": false, "sendSingle": true}); err != nil {
			t.Errorf("a template in %s with sendSingle: %v", key, err)
		}
	}
}

// fakeAcker records what a ledger acks, releases and leaves, and the
// messages it gives back charged with a failure of their own (own).
type fakeAcker struct {
	mu                     sync.Mutex
	acked, back, left, own []string
}

func (f *fakeAcker) failedOwn(_ context.Context, h rmqflow.ReceiptHandle, _ *rmqflow.AckableMessage[[]byte]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.own = append(f.own, h.MessageID)
}

func (f *fakeAcker) ackAll(_ context.Context, hs []rmqflow.ReceiptHandle) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range hs {
		f.acked = append(f.acked, h.MessageID)
	}
	return make([]error, len(hs))
}

func (f *fakeAcker) Release(_ context.Context, h rmqflow.ReceiptHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.back = append(f.back, h.MessageID)
	return nil
}

func (f *fakeAcker) Leave(h rmqflow.ReceiptHandle) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, h.MessageID)
}

func (f *fakeAcker) state() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("acked %v left %v released %v", f.acked, f.left, f.back)
}

// TestLedger: nothing is acked before every acking sink of the rule
// reported; then everything up to the lowest report is; a message of
// several rows (a JSON array) only once all its rows passed; a failure
// leaves every unsettled message up to the failed seq to come back, and
// later progress does not ack them; detach gives back the rest.
func TestLedger(t *testing.T) {
	ctx := t.Context()
	a := &fakeAcker{}
	l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
	src := new(int)
	if err := l.attach(src, a, 2); err != nil {
		t.Fatal(err)
	}
	if err := l.attach(new(int), a, 2); !errors.Is(err, ErrTwoSources) {
		t.Fatalf("a second source: %v, want ErrTwoSources", err)
	}
	if _, err := l.confirm(ctx); err != nil { // TestLedgerHeldUntilConfirmed has the time before
		t.Fatal(err)
	}
	h := func(id string) rmqflow.ReceiptHandle { return rmqflow.ReceiptHandle{MessageID: id} }
	l.add(h("a"), 1, false) // 1
	l.add(h("b"), 1, false) // 2
	l.add(h("c"), 2, false) // 3, 4
	l.add(h("d"), 1, false) // 5
	l.add(h("e"), 1, false) // 6
	l.add(h("f"), 1, false) // 7
	l.join("s1")
	if err := l.delivered(ctx, "s1", 3); err != nil {
		t.Fatal(err)
	}
	if st := a.state(); st != "acked [] left [] released []" {
		t.Fatalf("one of two sinks reported: %s", st)
	}
	l.join("s2")
	if err := l.delivered(ctx, "s2", 4); err != nil {
		t.Fatal(err)
	}
	// Low is 3: a, b; c has row 4 still open.
	if st := a.state(); st != "acked [a b] left [] released []" {
		t.Fatalf("after s1=3, s2=4: %s", st)
	}
	if n := l.failed(5); n != 2 {
		t.Fatalf("failed(5) gave back %d messages, want 2 (c, d)", n)
	}
	if err := l.delivered(ctx, "s1", 6); err != nil {
		t.Fatal(err)
	}
	if err := l.delivered(ctx, "s2", 6); err != nil {
		t.Fatal(err)
	}
	if st := a.state(); st != "acked [a b e] left [c d] released []" {
		t.Fatalf("after the failure and progress to 6: %s", st)
	}
	l.add(h("g"), 1, true) // 8: a dead-lettered copy
	if err := l.delivered(ctx, "s1", 8); err != nil {
		t.Fatal(err)
	}
	if err := l.delivered(ctx, "s2", 8); err != nil {
		t.Fatal(err)
	}
	if st := a.state(); st != "acked [a b e f] left [c d g] released []" {
		t.Fatalf("after progress past a dead-lettered copy: %s", st)
	}
	l.add(h("i"), 1, false) // 9
	if err := l.detach(ctx, src); err != nil {
		t.Fatal(err)
	}
	if st := a.state(); st != "acked [a b e f] left [c d g] released [i]" {
		t.Fatalf("after detach: %s", st)
	}
	if l.pending() != 0 {
		t.Fatalf("%d pending after detach", l.pending())
	}
}

// TestCheckRule: the rule options under which eKuiper could drop or reorder
// rows are refused, each with a reason naming the option; a good rule counts
// its acking actions.
func TestCheckRule(t *testing.T) {
	good := func() ruleDef {
		var r ruleDef
		r.ID, r.SQL = "r", "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM s WHERE n > 1"
		r.Options.DisableBufferFullDiscard, r.Options.Concurrency = true, 1
		r.Actions = []map[string]any{{"rocketmq": map[string]any{"topic": "t"}}, {"log": map[string]any{}},
			{"rocketmq_ack": map[string]any{}}, {"rocketmq": map[string]any{"ack": false}}}
		return r
	}
	if n, err := checkRule(good(), ""); err != nil || n != 2 {
		t.Fatalf("good rule: %d acking sinks, %v; want 2", n, err)
	}
	for want, edit := range map[string]func(*ruleDef){
		"disableBufferFullDiscard": func(r *ruleDef) { r.Options.DisableBufferFullDiscard = false },
		"concurrency":              func(r *ruleDef) { r.Options.Concurrency = 2 },
		"isEventTime":              func(r *ruleDef) { r.Options.IsEventTime = true },
		"HOPPINGWINDOW":            func(r *ruleDef) { r.SQL += " GROUP BY HOPPINGWINDOW(ss, 10, 5)" },
		"countwindow":              func(r *ruleDef) { r.SQL += " GROUP BY countwindow(10, 5)" },
		"sendMetaToSink":           func(r *ruleDef) { r.SQL = "SELECT n FROM s" },
		"no action acks":           func(r *ruleDef) { r.Actions = r.Actions[1:2] },
		// The window check reads the SQL as eKuiper's scanner does.
		"HOPPINGWINDOW:": func(r *ruleDef) { r.SQL += " GROUP BY HOPPINGWINDOW/**/(ss, 10, 5)" },
		"SLIDINGWINDOW:": func(r *ruleDef) { r.SQL += " GROUP BY `slidingwindow` (ss, 10)" },
		"COUNTWINDOW ":   func(r *ruleDef) { r.SQL += " GROUP BY COUNTWINDOW(10/**/,5)" },
		"COUNTWINDOW wi": func(r *ruleDef) { r.SQL += " GROUP BY COUNTWINDOW(10 -- x\n, 5)" },
		"FOOWINDOW":      func(r *ruleDef) { r.SQL += " GROUP BY FOOWINDOW(ss, 10)" },
		// After \' the scanner takes the next quote as text too: the
		// string runs on to the quote after TUMBLINGWINDOW(ss, 10).
		"HOPPINGWINDOW  ": func(r *ruleDef) {
			r.SQL = "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM s WHERE n != 'x\\'' TUMBLINGWINDOW(ss, 10) ' GROUP BY HOPPINGWINDOW(ss, 10, 5)"
		},
		"qos":             func(r *ruleDef) { r.Options.Qos = 1 },
		"DEDUP_TRIGGER":   func(r *ruleDef) { r.SQL = "SELECT dedup_trigger(id, s, e, now(), 1) /* */ FROM s" },
		"sendMetaToSink ": func(r *ruleDef) { r.SQL = "SELECT n /* AS rocketmq_seq */ FROM s WHERE 'rocketmq_seq' = n" },
		"batchSize": func(r *ruleDef) {
			r.Actions[0] = map[string]any{"rocketmq": map[string]any{"topic": "t", "batchSize": 10}}
		},
		"lingerInterval": func(r *ruleDef) {
			r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"lingerInterval": "1s"}}
		},
		"dataTemplate": func(r *ruleDef) {
			r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"dataTemplate": "{{.n}}"}}
		},
		"dataField": func(r *ruleDef) {
			r.Actions[0] = map[string]any{"rocketmq": map[string]any{"topic": "t", "dataField": "n"}}
		},
		"fields": func(r *ruleDef) {
			r.Actions[0] = map[string]any{"rocketmq": map[string]any{"topic": "t", "fields": []any{"n"}}}
		},
		// A graph rule's node names are its author's: not checked.
		"graph": func(r *ruleDef) { r.Graph = []byte(`{"nodes":{"2_filter":{"type":"operator","nodeType":"window"}}}`) },
		// eKuiper reads action options in any capitalisation.
		"SendSingle": func(r *ruleDef) {
			r.Actions[0] = map[string]any{"rocketmq": map[string]any{"topic": "t", "SendSingle": true}}
		},
		"ENABLECACHE": func(r *ruleDef) {
			r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"ENABLECACHE": true}}
		},
		// A wrapped sink that returns before its rows are durable.
		"after.file": func(r *ruleDef) {
			r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"after": map[string]any{"file": map[string]any{"path": "x"}}}}
		},
		"after.mqtt.qos": func(r *ruleDef) {
			r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"after": map[string]any{"mqtt": map[string]any{"topic": "x"}}}}
		},
		"after.mqtt.qos ": func(r *ruleDef) {
			r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"after": map[string]any{"mqtt": map[string]any{"topic": "x", "qos": 0}}}}
		},
		// "ack" is read as the sink reads it: "0" is false for both, "F" too.
		"no action acks ": func(r *ruleDef) {
			r.Actions = []map[string]any{{"rocketmq": map[string]any{"topic": "t", "ack": "0"}}, {"rocketmq": map[string]any{"ack": "F"}}}
		},
	} {
		r := good()
		edit(&r)
		_, err := checkRule(r, "")
		var re *RuleError
		if !errors.As(err, &re) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(strings.TrimSpace(want))) {
			t.Errorf("%s: %v, want a *RuleError naming it", want, err)
		}
	}
	r := good()
	r.Actions[0] = map[string]any{"rocketmq": map[string]any{"topic": "t", "fields": []any{"n", "rocketmq_seq"}, "lingerInterval": 0}}
	if n, err := checkRule(r, ""); err != nil || n != 2 {
		t.Errorf("fields with rocketmq_seq, lingerInterval 0: %d, %v", n, err)
	}
	for _, qos := range []any{1, 2, float64(1)} {
		r = good()
		r.Actions[2] = map[string]any{"rocketmq_ack": map[string]any{"after": map[string]any{"mqtt": map[string]any{"topic": "x", "qos": qos}}}}
		if n, err := checkRule(r, ""); err != nil || n != 2 {
			t.Errorf("rocketmq_ack after mqtt at qos %v: %d, %v", qos, n, err)
		}
	}
	r = good()
	r.SQL = "SELECT n FROM s GROUP BY COUNTWINDOW(10), TUMBLINGWINDOW(ss, 5)"
	r.Options.SendMetaToSink = true
	if _, err := checkRule(r, ""); err != nil {
		t.Errorf("COUNTWINDOW(10) with sendMetaToSink: %v", err)
	}
}

// TestCheckRuleHeldBack: where the broker holds a stream's next messages
// back while earlier ones are in flight (lite mode; a FIFO group in simple
// mode), COUNTWINDOW(n) and STATEWINDOW are refused: their rows are acked
// only when they emit, and the rows that would make them emit can be held
// back behind their own. Time windows are not; a normal group in simple
// mode takes both. A STATEWINDOW partitioned with OVER (PARTITION BY) is
// refused everywhere.
func TestCheckRuleHeldBack(t *testing.T) {
	lite, _, err := parseSource(map[string]any{"endpoints": "127.0.0.1:1", "datasource": "t", "consumer-group": "g"})
	if err != nil {
		t.Fatal(err)
	}
	simple, _, err := parseSource(map[string]any{"endpoints": "127.0.0.1:1", "datasource": "t", "consumer-group": "g", "mode": "simple"})
	if err != nil {
		t.Fatal(err)
	}
	if h := heldBack(simple, false); h != "" {
		t.Fatalf("a normal group in simple mode holds back: %q", h)
	}
	rule := func(window string) ruleDef {
		var r ruleDef
		r.ID = "r"
		r.SQL = "SELECT session, count(*) AS c, max(meta(rocketmq_seq)) AS rocketmq_seq FROM s GROUP BY session, " + window
		r.Options.DisableBufferFullDiscard = true
		r.Actions = []map[string]any{{"rocketmq": map[string]any{"topic": "t"}}}
		return r
	}
	for _, c := range []struct {
		held string
		want []string
	}{
		{heldBack(lite, false), []string{"lite", "TUMBLINGWINDOW", "SESSIONWINDOW", "dead-letter"}},
		{heldBack(simple, true), []string{"group g is a FIFO group", "TUMBLINGWINDOW"}},
	} {
		for w, name := range map[string]string{"COUNTWINDOW(5)": "COUNTWINDOW", "countwindow /* */ (5)": "COUNTWINDOW",
			"STATEWINDOW(kind = 'begin', kind = 'end')": "STATEWINDOW", "`statewindow`(had_changed(true, kind))": "STATEWINDOW"} {
			_, err := checkRule(rule(w), c.held)
			var re *RuleError
			if !errors.As(err, &re) {
				t.Errorf("%s, %s: %v, want a *RuleError", w, c.held, err)
				continue
			}
			for _, want := range append(c.want, name) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v, want it naming %q", w, err, want)
				}
			}
		}
		for _, w := range []string{"TUMBLINGWINDOW(ss, 10)", "SESSIONWINDOW(ss, 10, 2)"} {
			if _, err := checkRule(rule(w), c.held); err != nil {
				t.Errorf("%s, %s: %v", w, c.held, err)
			}
		}
	}
	for _, w := range []string{"COUNTWINDOW(5)", "STATEWINDOW(kind = 'begin', kind = 'end')", "STATEWINDOW(had_changed(true, kind))"} {
		if _, err := checkRule(rule(w), heldBack(simple, false)); err != nil {
			t.Errorf("%s in simple mode through a normal group: %v", w, err)
		}
	}
	// A partitioned state window emits each partition on its own, and its
	// result would ack the other partitions' open rows: refused everywhere.
	for _, w := range []string{"STATEWINDOW(kind = 'begin', kind = 'end') OVER (PARTITION BY session)",
		"statewindow(had_changed(true, kind)) over /* */ ( partition -- x\n by session)"} {
		_, err := checkRule(rule(w), heldBack(simple, false))
		var re *RuleError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "PARTITION BY") {
			t.Errorf("%s: %v, want a *RuleError naming PARTITION BY", w, err)
		}
	}
	// An analytic function's OVER (PARTITION BY) holds no rows.
	r := rule("STATEWINDOW(kind = 'begin', kind = 'end')")
	r.SQL = strings.Replace(r.SQL, "SELECT session,", "SELECT session, lag(kind) OVER (PARTITION BY session) AS prev,", 1)
	if _, err := checkRule(r, heldBack(simple, false)); err != nil {
		t.Errorf("lag() OVER (PARTITION BY) beside a STATEWINDOW: %v", err)
	}
}

// TestSplitRows: a JSON stream's payload is one row per object, one per
// element of an array of objects; anything else is malformed.
func TestSplitRows(t *testing.T) {
	for in, want := range map[string]int{`{"a":1}`: 1, ` [{"a":1},{"a":2}] `: 2, `[]`: 1, `{"a":`: -1,
		`[1,2]`: -1, `hello`: -1, ``: -1} {
		rows, ok := splitRows([]byte(in), true)
		if got := len(rows); (want < 0 && ok) || (want >= 0 && (!ok || got != want)) {
			t.Errorf("%q: %d rows, ok %v; want %d", in, got, ok, want)
		}
	}
	// eKuiper's decoder (fastjson) refuses more than 300 levels of nesting,
	// which encoding/json accepts: such a row was handed over, dropped by
	// eKuiper and acked by progress.
	deep := strings.Repeat(`{"a":`, 301) + "1" + strings.Repeat("}", 301)
	if _, ok := splitRows([]byte(deep), true); ok {
		t.Error("a row nested 301 levels deep passes as decodable")
	}
	if _, ok := splitRows([]byte("["+deep+"]"), true); ok {
		t.Error("an array element nested 301 levels deep passes as decodable")
	}
	if rows, ok := splitRows([]byte(strings.Repeat(`{"a":`, 299)+"1"+strings.Repeat("}", 299)), true); !ok || len(rows) != 1 {
		t.Error("a row nested 299 levels deep is refused")
	}
	if rows, ok := splitRows([]byte("a,b"), false); !ok || len(rows) != 1 {
		t.Errorf("another format: %d rows, ok %v", len(rows), ok)
	}
}

// TestRowSeq: rocketmq_seq is read from a column or from the meta map
// sendMetaToSink adds, whatever named map type eKuiper gives it.
func TestRowSeq(t *testing.T) {
	type metadata map[string]any
	for _, row := range []map[string]any{
		{MetaSeq: int64(7)}, {MetaSeq: 7.0}, {metaKey: metadata{MetaSeq: int64(7)}}, {metaKey: map[string]any{MetaSeq: 7}},
	} {
		if s, ok := rowSeq(row); !ok || s != 7 {
			t.Errorf("%v: %d, %v", row, s, ok)
		}
	}
	if _, ok := rowSeq(map[string]any{"n": 1}); ok {
		t.Error("a row without a seq has one")
	}
}

// TestDrained: the idle check's reading of a rule's metrics. A filter that
// dropped rows is drained once every node processed what it received and
// received what its upstream sent; a row between two nodes, a node still
// working, a buffered row, a row the source ingested but did not send, or a
// window in the rule is not.
func TestDrained(t *testing.T) {
	topo := topoDef{Sources: []string{"source_s"}, Edges: map[string][]string{
		"source_s": {"op_2_decoder"}, "op_2_decoder": {"op_3_filter"}, "op_3_filter": {"op_rocketmq_0_0_transform"},
		"op_rocketmq_0_0_transform": {"sink_rocketmq_0"}}}
	status := func() map[string]any {
		st := map[string]any{"status": "running", "source_s_0_records_out_total": 10.0, "source_s_0_buffer_length": 0.0}
		for node, c := range map[string][3]float64{"op_2_decoder_0": {10, 10, 10}, "op_3_filter_0": {10, 3, 10},
			"op_rocketmq_0_0_transform_0": {3, 3, 3}, "sink_rocketmq_0_0": {3, 3, 3}} {
			st[node+"_records_in_total"], st[node+"_records_out_total"], st[node+"_messages_processed_total"] = c[0], c[1], c[2]
			st[node+"_buffer_length"] = 0.0
		}
		return st
	}
	if ok, why := drained(topo, status(), 10); !ok {
		t.Fatalf("a drained filter rule: %s", why)
	}
	for what, edit := range map[string]func(map[string]any) int64{
		"ingested, not sent":   func(map[string]any) int64 { return 11 },
		"between two nodes":    func(st map[string]any) int64 { st["op_3_filter_0_records_out_total"] = 4.0; return 10 },
		"a node still working": func(st map[string]any) int64 { st["sink_rocketmq_0_0_records_in_total"] = 4.0; return 10 },
		"a buffered row":       func(st map[string]any) int64 { st["op_3_filter_0_buffer_length"] = 1.0; return 10 },
		"a metric missing":     func(st map[string]any) int64 { delete(st, "op_3_filter_0_messages_processed_total"); return 10 },
	} {
		st := status()
		n := edit(st)
		if ok, _ := drained(topo, st, n); ok {
			t.Errorf("%s: drained", what)
		}
	}
	windowed := topoDef{Sources: topo.Sources, Edges: map[string][]string{"source_s": {"op_2_window"}, "op_2_window": {"sink_rocketmq_0"}}}
	if ok, _ := drained(windowed, status(), 10); ok {
		t.Error("a rule with a window: drained")
	}
}

// TestCheckTopo: the running rule's topology must match the checked
// definition, and hold no node that keeps rows out of the idle check's
// sight (a batching node, a rate limiter, a dedup trigger, a join); a
// stream whose name says "window" or "join" is not taken for one.
func TestCheckTopo(t *testing.T) {
	var def ruleDef
	def.ID, def.SQL = "r", "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM window_events WHERE n > 1"
	def.Actions = []map[string]any{{"rocketmq": map[string]any{"topic": "t"}}, {"log": map[string]any{}}}
	topo := func(extra ...string) topoDef {
		chain := append([]string{"source_window_events", "op_2_decoder", "op_3_filter"}, extra...)
		chain = append(chain, "op_4_project", "op_rocketmq_0_0_transform", "sink_rocketmq_0")
		e := map[string][]string{}
		for i := 0; i+1 < len(chain); i++ {
			e[chain[i]] = []string{chain[i+1]}
		}
		e["op_4_project"] = append(e["op_4_project"], "op_log_1_0_transform")
		e["op_log_1_0_transform"] = []string{"sink_log_1"}
		return topoDef{Sources: []string{"source_window_events"}, Edges: e}
	}
	if err := checkTopo(def, topo()); err != nil {
		t.Fatalf("the checked rule: %v", err)
	}
	for _, n := range topo().nodes() {
		if holdsRows(n, []string{"source_window_events"}) {
			t.Errorf("%s taken for a node that holds rows", n)
		}
	}
	for what, tp := range map[string]topoDef{
		"op_rocketmq_0_0_batch": func() topoDef {
			tp := topo()
			tp.Edges["op_4_project"][0] = "op_rocketmq_0_0_batch"
			tp.Edges["op_rocketmq_0_0_batch"] = []string{"op_rocketmq_0_0_transform"}
			return tp
		}(),
		"op_1_ratelimit":     topo("op_1_ratelimit"),
		"op_5_dedup_trigger": topo("op_5_dedup_trigger"),
		"op_5_join":          topo("op_5_join"),
		"op_5_window":        topo("op_5_window"),
		"sink_rocketmq_ack_2": func() topoDef {
			tp := topo()
			tp.Edges["op_4_project"] = append(tp.Edges["op_4_project"], "sink_rocketmq_ack_2")
			return tp
		}(),
		"1 sinks": func() topoDef {
			tp := topo()
			tp.Edges["op_4_project"] = tp.Edges["op_4_project"][:1]
			delete(tp.Edges, "op_log_1_0_transform")
			return tp
		}(),
	} {
		if err := checkTopo(def, tp); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: %v, want a refusal naming it", what, err)
		}
	}
	w := def
	w.SQL += " GROUP BY TUMBLINGWINDOW(ss, 1)"
	if err := checkTopo(w, topo("op_5_window")); err != nil {
		t.Errorf("a checked window: %v", err)
	}
}

// TestLedgerFailureWithoutSeq: a failed call whose rows carry no
// rocketmq_seq leaves every row ingested so far to come back: neither the
// idle check nor a later delivery acks them.
func TestLedgerFailureWithoutSeq(t *testing.T) {
	ctx := t.Context()
	a := &fakeAcker{}
	l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
	if err := l.attach(new(int), a, 1); err != nil {
		t.Fatal(err)
	}
	h := func(id string) rmqflow.ReceiptHandle { return rmqflow.ReceiptHandle{MessageID: id} }
	l.add(h("a"), 1, false)
	l.add(h("b"), 1, false)
	part := &ackPart{led: l, name: "s"}
	l.join("s")
	boom := errors.New("boom")
	if err := part.settle(ctx, []map[string]any{{"n": 1}}, boom); !errors.Is(err, boom) {
		t.Fatalf("settle: %v", err)
	}
	if n, err := l.settleIdle(ctx, 2); n != 0 || err != nil {
		t.Fatalf("idle settle after the failure: %d, %v", n, err)
	}
	if st := a.state(); st != "acked [] left [a b] released []" {
		t.Fatalf("after a failure without seq: %s", st)
	}
}

// TestLedgerForeignSeq: a delivered seq above any this run gave out (a row
// of an earlier run) acks nothing, fails the call, and the run acks nothing
// afterwards: its messages come back.
func TestLedgerForeignSeq(t *testing.T) {
	ctx := t.Context()
	a := &fakeAcker{}
	l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
	if err := l.attach(new(int), a, 1); err != nil {
		t.Fatal(err)
	}
	h := func(id string) rmqflow.ReceiptHandle { return rmqflow.ReceiptHandle{MessageID: id} }
	l.add(h("a"), 1, false)
	l.add(h("b"), 1, false)
	l.join("s")
	if err := l.delivered(ctx, "s", 7); !errors.Is(err, ErrForeignSeq) {
		t.Fatalf("seq 7 of 2: %v, want ErrForeignSeq", err)
	}
	l.add(h("c"), 1, false)
	if err := l.delivered(ctx, "s", 3); !errors.Is(err, ErrForeignSeq) {
		t.Fatalf("after the foreign seq: %v, want ErrForeignSeq", err)
	}
	if n, _ := l.settleIdle(ctx, 3); n != 0 {
		t.Fatalf("idle settle acked %d", n)
	}
	if st := a.state(); st != "acked [] left [a b c] released []" {
		t.Fatalf("after a foreign seq: %s", st)
	}
	// A seq below the run's first: a row of an earlier run, whose seqs
	// started lower (each run starts above the ones before).
	l1, l2 := ledgerOf(ledgerKey{"foreign", 1}), ledgerOf(ledgerKey{"foreign", 2})
	defer forget(l1)
	defer forget(l2)
	a2 := &fakeAcker{}
	if err := l2.attach(new(int), a2, 1); err != nil {
		t.Fatal(err)
	}
	old := l1.add(h("x"), 1, false)[0]
	l2.add(h("y"), 1, false)
	l2.join("s")
	if err := l2.delivered(ctx, "s", old); !errors.Is(err, ErrForeignSeq) {
		t.Fatalf("a seq of the earlier run: %v, want ErrForeignSeq", err)
	}
	if st := a2.state(); st != "acked [] left [y] released []" {
		t.Fatalf("after a seq of the earlier run: %s", st)
	}
}

// TestConfirmRule: the source starts only when the running topology matches
// the checked definition and the stored definition, read again after it, is
// still the one checked (eKuiper starts an updated rule before storing its
// new definition).
func TestConfirmRule(t *testing.T) {
	var def ruleDef
	def.ID, def.SQL = "r", "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM s"
	def.Options.DisableBufferFullDiscard = true
	def.Actions = []map[string]any{{"rocketmq": map[string]any{"topic": "t"}}}
	good := `{"sources":["source_s"],"edges":{"source_s":["op_2_decoder"],"op_2_decoder":["op_3_project"],
		"op_3_project":["op_rocketmq_0_0_transform"],"op_rocketmq_0_0_transform":["sink_rocketmq_0"]}}`
	updated := `{"sources":["source_s"],"edges":{"source_s":["op_2_decoder"],"op_2_decoder":["op_3_project"],
		"op_3_project":["op_rocketmq_0_0_batch"],"op_rocketmq_0_0_batch":["op_rocketmq_0_0_transform"],"op_rocketmq_0_0_transform":["sink_rocketmq_0"]}}`
	defJSON := func(sql string) string {
		b, _ := json.Marshal(map[string]any{"id": "r", "sql": sql, "actions": def.Actions,
			"options": map[string]any{"disableBufferFullDiscard": true}})
		return string(b)
	}
	for what, c := range map[string]struct {
		topo, stored string
		want         string
	}{
		"consistent":           {good, defJSON(def.SQL), ""},
		"topology of a newer":  {updated, defJSON(def.SQL), "op_rocketmq_0_0_batch"},
		"stored after a check": {good, defJSON(def.SQL + " WHERE n > 1"), "changed"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/rules/r/topo":
				_, _ = io.WriteString(w, c.topo)
			case "/rules/r":
				_, _ = io.WriteString(w, c.stored)
			default:
				http.NotFound(w, r)
			}
		}))
		t.Setenv("RMQFLOW_SQL_RULE_API", srv.URL)
		err := confirmRule(t.Context(), def)
		srv.Close()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", what, err, c.want)
		}
	}
}

// TestWatchRule: a read that finds the checked definition confirms the run
// (its ledger acks from then on); when the stored definition of a running
// rule stops being the one checked (an update stored after the run's
// check), the run's ledger acks nothing more and the rule is restarted.
func TestWatchRule(t *testing.T) {
	var def ruleDef
	def.ID, def.SQL = "r", "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM s"
	def.Actions = []map[string]any{{"rocketmq": map[string]any{"topic": "t"}}}
	var mu sync.Mutex
	sql, restarted := def.SQL, make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/rules/r":
			mu.Lock()
			b, _ := json.Marshal(map[string]any{"id": "r", "sql": sql, "actions": def.Actions})
			mu.Unlock()
			_, _ = w.Write(b)
		case r.Method == http.MethodPost && r.URL.Path == "/rules/r/restart":
			restarted <- struct{}{}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("RMQFLOW_SQL_RULE_API", srv.URL)
	a := &fakeAcker{}
	l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
	if err := l.attach(new(int), a, 1); err != nil {
		t.Fatal(err)
	}
	l.add(rmqflow.ReceiptHandle{MessageID: "a"}, 1, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchRule(t.Context(), mockContext.NewMockContext("r", "op"), def, l, []time.Duration{20 * time.Millisecond})
	}()
	time.Sleep(100 * time.Millisecond)
	l.mu.Lock()
	early, confirmed := l.poisoned, l.confirmed
	l.mu.Unlock()
	if early != nil {
		t.Fatal("poisoned while the definition was the checked one")
	}
	if !confirmed {
		t.Fatal("not confirmed by a read that found the checked definition")
	}
	mu.Lock()
	sql = "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM s GROUP BY HOPPINGWINDOW(ss, 10, 5)"
	mu.Unlock()
	select {
	case <-restarted:
	case <-time.After(5 * time.Second):
		t.Fatal("the rule was not restarted")
	}
	<-done
	l.join("s")
	if err := l.delivered(t.Context(), "s", 1); err == nil {
		t.Fatal("a delivery after the definition changed: no error")
	}
	if st := a.state(); st != "acked [] left [a] released []" {
		t.Fatalf("after the definition changed: %s", st)
	}
}

// TestLedgerHeldUntilConfirmed: a run acks nothing before its definition is
// confirmed (watchRule's first re-read): the messages its sinks delivered
// and the idle check settled are held, acked together at confirmation; a
// run poisoned before it acks none of them (they are left to come back),
// and one that stops gives them back.
func TestLedgerHeldUntilConfirmed(t *testing.T) {
	ctx := t.Context()
	h := func(id string) rmqflow.ReceiptHandle { return rmqflow.ReceiptHandle{MessageID: id} }
	run := func(a *fakeAcker) *ledger {
		l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
		if err := l.attach(new(int), a, 1); err != nil {
			t.Fatal(err)
		}
		l.add(h("a"), 1, false) // 1
		l.add(h("b"), 1, false) // 2
		l.add(h("c"), 1, false) // 3
		l.join("s")
		if err := l.delivered(ctx, "s", 1); err != nil {
			t.Fatal(err)
		}
		if n, err := l.settleIdle(ctx, 2); n != 0 || err != nil {
			t.Fatalf("idle settle before confirmation: %d, %v", n, err)
		}
		if st := a.state(); st != "acked [] left [] released []" {
			t.Fatalf("before confirmation: %s", st)
		}
		if l.pending() != 1 {
			t.Fatalf("%d pending, want 1 (c): held messages are settled, not pending", l.pending())
		}
		return l
	}

	a := &fakeAcker{}
	l := run(a)
	if n, err := l.confirm(ctx); n != 2 || err != nil {
		t.Fatalf("confirm: %d, %v; want 2 acked", n, err)
	}
	if st := a.state(); st != "acked [a b] left [] released []" {
		t.Fatalf("at confirmation: %s", st)
	}
	if err := l.delivered(ctx, "s", 3); err != nil {
		t.Fatal(err)
	}
	if st := a.state(); st != "acked [a b c] left [] released []" {
		t.Fatalf("a delivery after confirmation: %s", st)
	}

	a = &fakeAcker{}
	l = run(a)
	l.poison(errors.New("changed"))
	if n, err := l.confirm(ctx); n != 0 || err == nil {
		t.Fatalf("confirm after poison: %d, %v; want 0 and the poison", n, err)
	}
	if st := a.state(); st != "acked [] left [c a b] released []" {
		t.Fatalf("poisoned before confirmation: %s", st)
	}

	a = &fakeAcker{}
	l = run(a)
	if err := l.delivered(ctx, "s", 7); !errors.Is(err, ErrForeignSeq) {
		t.Fatalf("seq 7 of 3: %v, want ErrForeignSeq", err)
	}
	if st := a.state(); st != "acked [] left [c a b] released []" {
		t.Fatalf("a foreign seq before confirmation: %s", st)
	}

	a = &fakeAcker{}
	l = run(a)
	src := l.source
	if err := l.detach(ctx, src); err != nil {
		t.Fatal(err)
	}
	if st := a.state(); st != "acked [] left [] released [c a b]" {
		t.Fatalf("stopped before confirmation: %s", st)
	}
	if n, _ := l.confirm(ctx); n != 0 {
		t.Fatalf("confirm after detach acked %d", n)
	}
}

// TestSinkRefusesRowsWithoutSeqBeforeSending: an acking sink whose rows
// carry no rocketmq_seq fails the call before it sends anything (it sent
// the rows and then failed, so each retry of the call sent them again).
func TestSinkRefusesRowsWithoutSeqBeforeSending(t *testing.T) {
	fake, err := rmqfake.New(rmqfake.Addr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Stop()
	if err := fake.CreateTopic("out", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	s, err := rmqflow.NewSink(t.Context(), rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr()}, Topic: "out"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
	acker := &fakeAcker{}
	if err := l.attach(new(int), acker, 1); err != nil {
		t.Fatal(err)
	}
	l.join("s")
	k := &sink{s: s, ack: &ackPart{led: l, name: "s"}}
	mctx := mockContext.NewMockContext("r", "op")
	l.add(rmqflow.ReceiptHandle{MessageID: "a"}, 1, false)
	if err := k.write(mctx, []map[string]any{{"n": 1}, {"n": 2}}); !errors.Is(err, errNoSeq) {
		t.Fatalf("rows without %s: %v, want errNoSeq", MetaSeq, err)
	}
	if sent := fake.Stats().Topics["out"].Sent; sent != 0 {
		t.Fatalf("the refused call stored %d messages", sent)
	}
	// The refusal is a failure to the ledger: the idle check acks nothing,
	// the message is left to come back.
	if n, err := l.settleIdle(t.Context(), 1); n != 0 || err != nil {
		t.Fatalf("idle settle after the refusal: %d, %v", n, err)
	}
	// A row with its seq goes out (the check is not a refusal of all rows).
	seq := l.add(rmqflow.ReceiptHandle{MessageID: "b"}, 1, false)[0]
	if err := k.write(mctx, []map[string]any{{"n": 1, MetaSeq: seq}}); err != nil {
		t.Fatalf("a row with its seq: %v", err)
	}
	if sent := fake.Stats().Topics["out"].Sent; sent != 1 {
		t.Fatalf("%d messages stored for one row, want 1", sent)
	}
	if st := acker.state(); !strings.Contains(st, "left [a]") {
		t.Fatalf("after the refusal: %s, want a left to come back", st)
	}
}
