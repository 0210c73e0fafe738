package rmqkuiper

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestParseSourceValve: max-delivery-attempt and on-valve default to 16
// and the dead-letter queue (nothing acked); ack is taken only when asked
// for, and bad values are refused naming the key.
func TestParseSourceValve(t *testing.T) {
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"endpoints": "h:1", "datasource": "t", "consumer-group": "g"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	c, unknown, err := parseSource(base(nil))
	if err != nil || len(unknown) > 0 {
		t.Fatal(err, unknown)
	}
	if c.maxAttempt != rmqflow.DefaultMaxDeliveryAttempt || c.onValve != rmqflow.ValveDeadLetterQueue {
		t.Fatalf("defaults: max-delivery-attempt %d, on-valve %v", c.maxAttempt, c.onValve)
	}
	c, unknown, err = parseSource(base(map[string]any{"max-delivery-attempt": 5, "on-valve": "ack"}))
	if err != nil || len(unknown) > 0 {
		t.Fatal(err, unknown)
	}
	if c.maxAttempt != 5 || c.onValve != rmqflow.ValveAck {
		t.Fatalf("set: max-delivery-attempt %d, on-valve %v", c.maxAttempt, c.onValve)
	}
	if c, _, err = parseSource(base(map[string]any{"on-valve": "dead-letter-queue"})); err != nil || c.onValve != rmqflow.ValveDeadLetterQueue {
		t.Fatalf("on-valve dead-letter-queue: %v %v", c.onValve, err)
	}
	if c, unknown, err = parseSource(base(map[string]any{"dead-letter-topic": "parked"})); err != nil || len(unknown) > 0 || c.deadLetterTopic != "parked" {
		t.Fatalf("dead-letter-topic: %q %v %v", c.deadLetterTopic, unknown, err)
	}
	for _, bad := range []struct {
		props map[string]any
		key   string
		why   string
	}{
		{map[string]any{"max-delivery-attempt": -1}, "max-delivery-attempt", ""},
		{map[string]any{"on-valve": "drop"}, "on-valve", ""},
		{map[string]any{"dead-letter-topic": "parked", "on-valve": "ack"}, "dead-letter-topic", "on-valve ack"},
		{map[string]any{"dead-letter-topic": "parked", "ack-mode": "ingest"}, "dead-letter-topic", "only with ack-mode sink"},
		{map[string]any{"dead-letter-topic": "t"}, "dead-letter-topic", "the stream's own datasource"},
	} {
		if _, _, err := parseSource(base(bad.props)); err == nil || !strings.Contains(err.Error(), bad.key) || !strings.Contains(err.Error(), bad.why) {
			t.Errorf("%v: %v, want an error naming %s (%s)", bad.props, err, bad.key, bad.why)
		}
	}
}

// TestValveLimit: the valve fires at max-delivery-attempt own deliveries,
// lowered to the group's limit, and to half of it (rounded up) for a
// message of a lite topic or a FIFO group; a lite message's own count is
// its returns + 1 whatever the broker's attempt, an unordered one's the
// larger of the two.
func TestValveLimit(t *testing.T) {
	r := rmqflow.NewReturnTracker(10)
	v := &valve{maxAttempt: 16, groupMax: 4, returns: r}
	lite := rmqflow.ReceiptHandle{Group: "g", MessageID: "a", LiteTopic: "l", DeliveryAttempt: 4}
	plain := rmqflow.ReceiptHandle{Group: "g", MessageID: "b", DeliveryAttempt: 3}
	if l := v.limit(lite); l != 2 {
		t.Errorf("lite limit %d, want 2 (half of the group's 4)", l)
	}
	if l := v.limit(plain); l != 4 {
		t.Errorf("plain limit %d, want the group's 4", l)
	}
	if v.fired(lite) {
		t.Error("a lite message fired on the broker's attempt (it grows with its lite topic's head)")
	}
	v.returned(lite)
	if !v.fired(lite) || v.own(lite) != 2 {
		t.Errorf("after one return of its own: own %d, fired %v; want 2, true", v.own(lite), v.fired(lite))
	}
	if v.own(plain) != 3 || v.fired(plain) {
		t.Errorf("plain: own %d, fired %v; want the broker's 3, false", v.own(plain), v.fired(plain))
	}
	v.fifo = true
	if l := v.limit(plain); l != 2 {
		t.Errorf("limit in a FIFO group %d, want 2", l)
	}
	if v := (&valve{maxAttempt: 3, returns: r}); v.limit(lite) != 3 {
		t.Errorf("limit with the group's unknown %d, want max-delivery-attempt 3", v.limit(lite))
	}
}

// TestLedgerChargesOwnFailures: a failed sink call charges the messages it
// gives back with a failure of their own (the acker's failedOwn decides
// what becomes of each: valve.go), but a dead-lettered copy is only left;
// a give-back that is no sink's failure (a poisoned run, a call without
// seq) charges nobody.
func TestLedgerChargesOwnFailures(t *testing.T) {
	ctx := t.Context()
	a := &fakeAcker{}
	l := &ledger{key: ledgerKey{"r", 1}, marks: map[string]int64{}, now: time.Now}
	if err := l.attach(new(int), a, 1); err != nil {
		t.Fatal(err)
	}
	h := func(id string) rmqflow.ReceiptHandle { return rmqflow.ReceiptHandle{MessageID: id} }
	l.add(h("a"), 1, false) // 1
	l.add(h("b"), 1, true)  // 2: a dead-lettered copy
	l.add(h("c"), 1, false) // 3
	l.add(h("d"), 1, false) // 4
	if n := l.failedOwn(ctx, 3); n != 3 {
		t.Fatalf("failedOwn(3) gave back %d, want 3", n)
	}
	if st := a.state(); st != "acked [] left [b] released []" || strings.Join(a.own, " ") != "a c" {
		t.Fatalf("after a failed call up to 3: %s, charged %v; want b left, a and c charged", st, a.own)
	}
	if n := l.failed(4); n != 1 {
		t.Fatalf("failed(4) gave back %d, want 1", n)
	}
	if st := a.state(); st != "acked [] left [b d] released []" || strings.Join(a.own, " ") != "a c" {
		t.Fatalf("after a give-back without a failure: %s, charged %v", st, a.own)
	}
}

// TestGroupQuestionKeepsFilter: the session that asks the broker about a
// simple-mode stream's group (askGroup, when the source opens) announces the
// stream's filter-expression, as the source's own session does, not every
// message (TAG "*") for the group (a first version dropped it). On rmqfake.
func TestGroupQuestionKeepsFilter(t *testing.T) {
	fake := rmqfake.NewForTest(t)
	must(t, fake.CreateTopic("gq", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("gq-g"))
	var (
		mu   sync.Mutex
		subs []string // the subscriptions announced, as "type expression"
	)
	fake.Intercept("Telemetry", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Request.(*v2.TelemetryCommand).GetSettings().GetSubscription().GetSubscriptions() {
			subs = append(subs, fmt.Sprintf("%v %s", e.GetExpression().GetType(), e.GetExpression().GetExpression()))
		}
		return rmqfake.Verdict{}
	})
	conf, _, err := parseSource(map[string]any{"endpoints": fake.Addr(), "datasource": "gq", "consumer-group": "gq-g",
		"mode": "simple", "filter-type": "sql", "filter-expression": "region = 'eu'"})
	must(t, err)
	s := &source{conf: conf, log: &testLogger{}}
	if _, err := s.askGroup(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(subs) == 0 || slices.ContainsFunc(subs, func(s string) bool { return s != "SQL region = 'eu'" }) {
		t.Errorf("subscriptions announced %q: want only the stream's filter, SQL region = 'eu'", subs)
	}
}
