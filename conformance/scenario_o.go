package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// DeferredHeadAndSuccessors (o): five messages of a lite topic are received
// in one batch; the head is deferred (ChangeInvisibleDuration 10 s) and the
// successors of the same batch are then, a few milliseconds later, deferred
// by the same 10 s ("same"), released with 0 ("zero"), deferred by 13 s
// ("later"), or acked ("acked"). In every case no message of the lite topic
// is delivered until the latest invisibility of the batch's unacked messages
// ends (released successors do not come back while the head is invisible,
// and the head does not come back alone before deferred successors); then
// the whole batch comes back in one receive, in order, head first, each with
// attempt 2 — the acked successors too: a lite ack commits the lite topic's
// offset only up to the first unacked message, so acking past a deferred
// head does not take.
func DeferredHeadAndSuccessors(t *testing.T, e *Env) {
	const s = "o"
	topic, group := rmqtest.LiteTopic(s), rmqtest.LiteGroup(s)
	c := e.LiteConsumer(t, s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("o")
	same, zero, later, acked := run+"-same", run+"-zero", run+"-later", run+"-acked"
	for _, lt := range []string{same, zero, later, acked} {
		for i := 0; i < 5; i++ {
			SendLite(t, p, topic, lt, fmt.Sprint(i))
		}
	}
	got := Collect(rmqtest.Context(t, 30*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 20)
	byLite := map[string][]*client.ReceivedMessage{}
	for _, m := range got {
		byLite[m.LiteTopic] = append(byLite[m.LiteTopic], m)
	}
	for _, lt := range []string{same, zero, later, acked} {
		if b := fmt.Sprint(bodies(byLite[lt])); b != "[0 1 2 3 4]" {
			t.Fatalf("lite topic %s delivered %s, want [0 1 2 3 4] in one batch", lt, b)
		}
	}
	change := func(m *client.ReceivedMessage, d time.Duration) {
		t.Helper()
		if _, err := c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{
			Group: group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic, InvisibleDuration: d,
		}); err != nil {
			t.Fatalf("change invisible of %s/%s to %v: %v", m.LiteTopic, m.Body, d, err)
		}
	}
	t0 := time.Now()
	change(byLite[same][0], MinInvisible)
	change(byLite[zero][0], MinInvisible)
	change(byLite[later][0], MinInvisible)
	change(byLite[acked][0], MinInvisible)
	for _, m := range byLite[same][1:] {
		change(m, MinInvisible)
	}
	for _, m := range byLite[zero][1:] {
		change(m, 0)
	}
	for _, m := range byLite[later][1:] {
		change(m, MinInvisible+3*time.Second)
	}
	for _, m := range byLite[acked][1:] {
		if err := AckOne(t, c, group, m); err != nil {
			t.Fatalf("ack %s/%s: %v", m.LiteTopic, m.Body, err)
		}
	}
	t.Logf("changes done %v after the head's", time.Since(t0).Round(time.Millisecond))
	type arrival struct {
		Body    string
		Attempt int32
		At      string
		Receive int
	}
	back := map[string][]arrival{}
	ctx := rmqtest.Context(t, 35*time.Second)
	req := LiteReq(s, 30*time.Second)
	match := OfRun(run)
	receives, n := 0, 0
	for n < 20 && ctx.Err() == nil {
		if dl, _ := ctx.Deadline(); time.Until(dl) < poll+500*time.Millisecond {
			break
		}
		msgs, err := c.Receive(ctx, req)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		receives++
		for _, m := range msgs {
			if !match(m) {
				ackStray(t, c, group, m)
				continue
			}
			back[m.LiteTopic] = append(back[m.LiteTopic], arrival{string(m.Body), m.DeliveryAttempt, time.Since(t0).Round(10 * time.Millisecond).String(), receives})
			n++
			if err := AckOne(t, c, group, m); err != nil {
				t.Errorf("ack %s/%s: %v", m.LiteTopic, m.Body, err)
			}
		}
	}
	earliest := map[string]time.Duration{same: MinInvisible, zero: MinInvisible, later: MinInvisible + 3*time.Second, acked: MinInvisible}
	for _, lt := range []string{same, zero, later, acked} {
		a := back[lt]
		t.Logf("%s: %+v", lt, a)
		var bs []string
		for _, x := range a {
			bs = append(bs, x.Body)
			if x.Attempt != 2 {
				t.Errorf("%s/%s came back with attempt %d, want 2 (every offset of the batch was popped before)", lt, x.Body, x.Attempt)
			}
			if x.Receive != a[0].Receive {
				t.Errorf("%s came back over several receives %+v, want one", lt, a)
			}
			if at, _ := time.ParseDuration(x.At); at < earliest[lt]-time.Second {
				t.Errorf("%s/%s came back %v after the head was deferred, want no message of the lite topic before %v (the latest invisibility in its batch)", lt, x.Body, at, earliest[lt])
			}
		}
		if fmt.Sprint(bs) != "[0 1 2 3 4]" {
			t.Errorf("%s came back as %v, want [0 1 2 3 4]: the head first, the rest in order", lt, bs)
		}
	}
}
