package rmqflow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestReturnTracker: a message's own delivery count is its returns + 1,
// whatever the broker's attempt of an ordered message; an unordered one
// takes the broker's attempt when larger. Counts are kept per group and
// message id, forgotten on Forget, and the oldest beyond the capacity.
func TestReturnTracker(t *testing.T) {
	r := rmqflow.NewReturnTracker(10)
	lite := rmqflow.ReceiptHandle{Group: "g", LiteTopic: "l", MessageID: "a", DeliveryAttempt: 9}
	plain := rmqflow.ReceiptHandle{Group: "g", MessageID: "b", DeliveryAttempt: 3}
	if n := r.Deliveries(lite, true); n != 1 {
		t.Errorf("lite message on broker attempt 9, no return: %d deliveries, want 1", n)
	}
	if n := r.Deliveries(plain, false); n != 3 {
		t.Errorf("plain message on broker attempt 3: %d, want 3", n)
	}
	r.Add(lite)
	r.Add(lite)
	if n := r.Deliveries(lite, true); n != 3 || r.Returns(lite) != 2 {
		t.Errorf("after two returns: %d deliveries, %d returns; want 3, 2", n, r.Returns(lite))
	}
	other := lite
	other.Group = "other"
	if r.Returns(other) != 0 {
		t.Error("another group's message of the same id shares the count")
	}
	r.Forget(lite)
	if r.Returns(lite) != 0 {
		t.Error("Forget kept the count")
	}
	for i := range 25 {
		r.Add(rmqflow.ReceiptHandle{Group: "g", MessageID: fmt.Sprint(i)})
	}
	if r.Returns(rmqflow.ReceiptHandle{Group: "g", MessageID: "24"}) != 1 || r.Returns(rmqflow.ReceiptHandle{Group: "g", MessageID: "0"}) != 0 {
		t.Error("a tracker of capacity 10 did not forget the oldest of 25 messages")
	}
	if none := rmqflow.NewReturnTracker(-1); func() int { none.Add(lite); return none.Returns(lite) }() != 0 {
		t.Error("a tracker of negative capacity remembered a message")
	}
}

// TestDeliveryLimit: max-delivery-attempt (16 by default), lowered to the
// group's limit, and for an ordered message to half of it, rounded up.
func TestDeliveryLimit(t *testing.T) {
	for _, c := range []struct {
		max, group int32
		ordered    bool
		want       int32
	}{
		{0, 0, true, rmqflow.DefaultMaxDeliveryAttempt},
		{5, 0, true, 5},
		{0, 4, false, 4},
		{0, 4, true, 2},
		{0, 5, true, 3},
		{1, 4, true, 1},
		{0, 40, false, rmqflow.DefaultMaxDeliveryAttempt},
	} {
		if got := rmqflow.DeliveryLimit(c.max, c.group, c.ordered); got != c.want {
			t.Errorf("DeliveryLimit(%d, %d, %v) = %d, want %d", c.max, c.group, c.ordered, got, c.want)
		}
	}
}

// TestReadGroupSettings: the group's retry limit + 1 and whether it is FIFO,
// as the broker answers a consumer session of it, lite or not.
func TestReadGroupSettings(t *testing.T) {
	fake := rmqfake.NewForTest(t)
	must(t, fake.CreateTopic("rg", rmqfake.TopicLite))
	must(t, fake.CreateGroup("rg-g", rmqfake.LiteBind("rg"), rmqfake.Wildcard(), rmqfake.RetryMax(3)))
	must(t, fake.CreateTopic("rg-fifo", rmqfake.TopicFIFO))
	must(t, fake.CreateGroup("rg-fifo-g", rmqfake.FIFO(), rmqfake.RetryMax(7)))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	g, err := rmqflow.ReadGroupSettings(ctx, conn, rmqflow.GroupQuery{Group: "rg-g", Topic: "rg", Lite: true})
	if err != nil || g != (rmqflow.GroupSettings{MaxDeliveryAttempts: 4}) {
		t.Errorf("lite group: %+v, %v; want 4 deliveries, not FIFO", g, err)
	}
	g, err = rmqflow.ReadGroupSettings(ctx, conn, rmqflow.GroupQuery{Group: "rg-fifo-g", Topic: "rg-fifo"})
	if err != nil || g != (rmqflow.GroupSettings{MaxDeliveryAttempts: 8, FIFO: true}) {
		t.Errorf("FIFO group: %+v, %v; want 8 deliveries, FIFO", g, err)
	}
	if _, err := rmqflow.ReadGroupSettings(ctx, rmqflow.Connection{}, rmqflow.GroupQuery{Group: "rg-g", Topic: "rg", Lite: true}); err == nil {
		t.Error("no endpoints: no error")
	}
}

// TestReadGroupSettingsFilter: the session ReadGroupSettings opens announces
// the group's filter it was given (GroupQuery.Filter), as the group's own
// sources do, not every message (TAG "*") for the group, which a first
// version announced whatever the sources filter on.
func TestReadGroupSettingsFilter(t *testing.T) {
	fake := rmqfake.NewForTest(t)
	must(t, fake.CreateTopic("rgf", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("rgf-g"))
	subs := announced(fake)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	for _, f := range []client.Filter{client.SQLFilter("region = 'eu'"), client.TagFilter("a||b")} {
		if _, err := rmqflow.ReadGroupSettings(ctx, conn, rmqflow.GroupQuery{Group: "rgf-g", Topic: "rgf", Filter: f}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("rgf-g rgf %v %s", v2.FilterType(f.Type), f.Expression)
		if got := subs(); len(got) == 0 || got[len(got)-1] != want {
			t.Errorf("subscriptions announced %q: want the last %q", got, want)
		}
	}
}

// announced records the subscriptions the clients of fake announce in their
// settings, as "group topic type expression", and returns what it recorded
// so far.
func announced(fake *rmqfake.Server) func() []string {
	var (
		mu   sync.Mutex
		subs []string
	)
	fake.Intercept("Telemetry", func(c rmqfake.Call) rmqfake.Verdict {
		sub := c.Request.(*v2.TelemetryCommand).GetSettings().GetSubscription()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range sub.GetSubscriptions() {
			subs = append(subs, fmt.Sprintf("%s %s %v %s", sub.GetGroup().GetName(), e.GetTopic().GetName(),
				e.GetExpression().GetType(), e.GetExpression().GetExpression()))
		}
		return rmqfake.Verdict{}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), subs...)
	}
}
