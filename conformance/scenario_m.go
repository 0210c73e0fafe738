package conformance

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// BacklogBeforeSubscription (m): messages sent to a lite topic while no
// consumer of the wildcard group is connected reach a consumer that connects
// later, but not at once: the broker finds such backlogs in a periodic full
// dispatch (liteEventFullDispatchDelayTimeForWildcardGroup, 10 s by default),
// whereas messages sent while the consumer is connected arrive at once
// (scenario a).
func BacklogBeforeSubscription(t *testing.T, e *Env) {
	const s = "m"
	topic := rmqtest.LiteTopic(s)
	p := e.Producer(t, topic)
	run := rmqtest.Unique("m")
	SendLite(t, p, topic, run, "x")
	c := e.LiteConsumer(t, s)
	t0 := time.Now()
	got := Collect(rmqtest.Context(t, 40*time.Second), t, c, LiteReq(s, 30*time.Second), OfRun(run), 1)
	waited := time.Since(t0)
	if len(got) != 1 {
		t.Fatalf("backlog not delivered within 40 s")
	}
	t.Logf("backlog delivered %v after the consumer connected", waited.Round(100*time.Millisecond))
	if waited < 3*time.Second {
		t.Errorf("backlog delivered after %v: want the full-dispatch delay (several seconds)", waited)
	}
	if err := AckOne(t, c, rmqtest.LiteGroup(s), got[0]); err != nil {
		t.Error(err)
	}
}
