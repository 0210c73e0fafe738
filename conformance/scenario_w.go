package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// The fixtures of scenario w: a LITE main topic read by two wildcard groups,
// one whose clients' event sets hold CapW lite topics (the group attribute
// lite.sub.client.max.event.cnt, fixture word event-cap) and one with the
// broker's default, 100.
const (
	CapTopic  = "rmqflow-lite-cap"
	CapGroup  = "rmqflow-lite-cap-g"
	CapAll    = "rmqflow-lite-cap-all-g"
	CapW      = 10
	capWTopic = 30 // lite topics, one message each: three sets' worth
)

// EventSetCap (w): a wildcard client pops only the lite topics in its own
// event set, which holds at most the group's lite.sub.client.max.event.cnt
// (here 10). One client of each group joins; 30 lite topics then get one
// message each before either polls. The capped client gets 10 of them at
// once and the rest only with full dispatches: the one its join scheduled
// (5 to 15 s after the join; the refusals schedule nothing while it is
// pending) and the one each full set schedules, a scan (10 s) later, so in
// bursts of at most 10 about 10 s apart. The client of the group without a
// cap gets all 30 at once. docs/broker-semantics.md, "Lite dispatch in the
// 5.5.0 broker".
func EventSetCap(t *testing.T, e *Env) {
	p := e.Producer(t, CapTopic)
	run := rmqtest.Unique("w")
	join := func(group string) *client.Client {
		c := e.Client(t)
		_, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
			Type: client.LiteSimpleConsumer, Group: group, Subscriptions: []client.Subscription{{Topic: CapTopic}}, LiteWildcard: true,
		})
		if err != nil {
			t.Fatalf("lite consumer session of %s: %v", group, err)
		}
		return c
	}
	joined := time.Now()
	c10, call := join(CapGroup), join(CapAll)
	for i := range capWTopic {
		SendLite(t, p, CapTopic, fmt.Sprintf("%s-%02d", run, i), "x")
	}
	sent := time.Now()

	ctx, cancel := context.WithDeadline(context.Background(), joined.Add(40*time.Second))
	defer cancel()
	capped, all := make(chan []time.Duration, 1), make(chan []time.Duration, 1)
	go func() { capped <- arrivals(ctx, t, c10, CapGroup, run, sent) }()
	go func() { all <- arrivals(ctx, t, call, CapAll, run, sent) }()
	got10, gotAll := <-capped, <-all

	const prompt = 3 * time.Second
	count := func(ds []time.Duration, within time.Duration) int {
		n := 0
		for _, d := range ds {
			if d <= within {
				n++
			}
		}
		return n
	}
	t.Logf("sends took %v; capped group: %s", sent.Sub(joined).Round(10*time.Millisecond), bursts(got10))
	t.Logf("group without a cap: %d within %v, %s", count(gotAll, prompt), prompt, bursts(gotAll))
	if len(gotAll) != capWTopic || count(gotAll, prompt) != capWTopic {
		t.Errorf("group without a cap: %d of %d messages, %d within %v of the sends; want all at once", len(gotAll), capWTopic, count(gotAll, prompt), prompt)
	}
	if len(got10) != capWTopic {
		t.Fatalf("capped group: %d of %d messages within 40 s of the join", len(got10), capWTopic)
	}
	if n := count(got10, prompt); n < 1 || n > CapW+2 {
		t.Errorf("capped group: %d messages within %v of the sends, want at most the cap, %d (+2)", n, prompt, CapW)
	}
	// The rest: not before the join's full dispatch (5 s after the join),
	// in bursts of at most the cap, each after the scan that follows the
	// previous one.
	var later []time.Duration
	for _, d := range got10 {
		if d > prompt {
			later = append(later, d)
		}
	}
	if len(later) > 0 {
		if first := sent.Sub(joined) + later[0]; first < 4500*time.Millisecond {
			t.Errorf("capped group: the first message past the cap came %v after the join, want the join's full dispatch (5 s at least)", first.Round(10*time.Millisecond))
		}
	}
	bs := split(later)
	for i, b := range bs {
		if len(b) > CapW+2 {
			t.Errorf("capped group: a burst of %d messages after the sends, want at most the cap, %d (+2)", len(b), CapW)
		}
		if i > 0 {
			if gap := b[0] - bs[i-1][0]; gap < 8*time.Second || gap > 15*time.Second {
				t.Errorf("capped group: a full dispatch %v after the previous one, want the next scan (10 s)", gap.Round(10*time.Millisecond))
			}
		}
	}
}

// arrivals polls group g with c until it has received the capWTopic
// messages of run (acking each batch at once) or ctx ends, and returns
// when each came, counted from sent, in order.
func arrivals(ctx context.Context, t *testing.T, c *client.Client, g, run string, sent time.Time) []time.Duration {
	var out []time.Duration
	req := client.ReceiveRequest{Group: g, Topic: CapTopic, Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: poll}
	for len(out) < capWTopic {
		if dl, _ := ctx.Deadline(); time.Until(dl) < poll+500*time.Millisecond {
			break
		}
		msgs, err := c.Receive(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("receive %s: %v", g, err)
			}
			break
		}
		at := time.Since(sent)
		var es []client.AckEntry
		for _, m := range msgs {
			if strings.HasPrefix(m.LiteTopic, run) {
				out = append(out, at)
			}
			es = append(es, Entry(m))
		}
		if len(es) > 0 {
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := c.Ack(actx, g, CapTopic, es)
			cancel()
			if err != nil {
				t.Errorf("ack %s: %v", g, err)
				break
			}
			for _, r := range res {
				if r.Err != nil {
					t.Errorf("ack %s: %v", g, r.Err)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// split groups arrival times into bursts: a gap of more than 2 s starts
// the next.
func split(ds []time.Duration) [][]time.Duration {
	var out [][]time.Duration
	for i, d := range ds {
		if i == 0 || d-ds[i-1] > 2*time.Second {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], d)
	}
	return out
}

// bursts describes arrival times as "n at t" per burst.
func bursts(ds []time.Duration) string {
	var parts []string
	for _, b := range split(ds) {
		parts = append(parts, fmt.Sprintf("%d at %v", len(b), b[0].Round(100*time.Millisecond)))
	}
	return fmt.Sprintf("%d messages: %s", len(ds), strings.Join(parts, ", "))
}
