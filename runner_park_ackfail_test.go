package rmqflow_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerParksOnceDespiteFailedAck: a message the dead-letter function
// parked (DeadLetterToSink returned nil) is parked once. When the ack that
// follows fails, the message comes back, and the runner acks it again
// rather than running it through the handler, the valves and the function a
// second time (a duplicate in the user's dead-letter topic from an ordinary
// transient ack failure, as a first version did). The test sees each step:
// the ack after the park failed, the message came back (acked by a receipt
// handle of a later delivery), the handler did not run again, and the
// parked topic holds one copy.
func TestRunnerParksOnceDespiteFailedAck(t *testing.T) {
	t.Parallel() // its own emulator; mostly waiting
	ctx := rmqtest.Context(t, time.Minute)
	rig := newParkRig(t, ctx, fakeLite(t))
	fake := rig.fake
	rig.write(t, ctx, "poison")
	var (
		mu       sync.Mutex
		failedOn []string // receipt handles of the AckMessage calls failed here
		tookOn   []string // and of those let through
		parked   int
		calls    int // handler runs
		atPark   int // handler runs when the message was parked
	)
	var failAcks atomic.Int32 // AckMessage calls still to fail
	fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		var hs []string
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			hs = append(hs, e.GetReceiptHandle())
		}
		mu.Lock()
		defer mu.Unlock()
		if failAcks.Add(-1) >= 0 {
			failedOn = append(failedOn, hs...)
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "test: ack lost")}
		}
		tookOn = append(tookOn, hs...)
		return rmqfake.Verdict{}
	})
	r := rig.failingRunner(t, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}},
		func(*rmqflow.AckableMessage[string]) {
			mu.Lock()
			calls++
			mu.Unlock()
		}, func() {
			mu.Lock()
			parked++
			if parked == 1 {
				atPark = calls
				failAcks.Store(3) // the ack that follows fails, retries included
			}
			mu.Unlock()
		})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	// The original is acked once: by the delivery after the failed ack.
	werr := fake.WaitFor(ctx, func(st rmqfake.Stats) bool { return st.Groups["g"].Acked >= 1 })
	stop()
	must(t, <-ran)
	must(t, werr)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handler runs %d (%d at the park), parks %d, acks failed on %d handles, taken on %d", calls, atPark, parked, len(failedOn), len(tookOn))
	if parked != 1 {
		t.Errorf("the message was parked %d times, want once (its ack failed once after parking)", parked)
	}
	if len(failedOn) == 0 {
		t.Fatal("no ack failed after the park: the test did not test a failed ack")
	}
	if len(tookOn) != 1 || slices.Contains(failedOn, tookOn[0]) {
		t.Errorf("acks taken on %q, failed on %q: want one ack taken, by the handle of a later delivery (the message came back)", tookOn, failedOn)
	}
	if calls != atPark {
		t.Errorf("the handler ran %d times, %d of them after the park: want none after (a parked message is only acked)", calls, calls-atPark)
	}
	if st := fake.Stats(); st.Topics["parked"].Sent != 1 || st.Groups["g"].Acked != 1 || st.Groups["g"].DeadLettered != 0 {
		t.Errorf("parked topic got %d copies, group g acked %d and dead-lettered %d: want 1, 1, 0",
			st.Topics["parked"].Sent, st.Groups["g"].Acked, st.Groups["g"].DeadLettered)
	}
}
