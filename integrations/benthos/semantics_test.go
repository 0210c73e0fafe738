package rmqbenthos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestNackRedeliversOnlyThatMessage: eight messages, each in a lite topic of
// its own, reach the output in one batch; the output fails one of them (a
// Benthos batch error naming it). That one is deferred on the broker (one
// ChangeInvisibleDuration of nack_backoff) and comes back; the other seven
// are acked and never seen again. Once straight from the input's batches,
// once through a broker input that batches them into one (Benthos then maps
// the error back onto the input's reads, each as a whole: there the input
// reads one message at a time).
func TestNackRedeliversOnlyThatMessage(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			s := fake(t)
			ctx := rmqtest.Context(t, time.Minute)
			prefix := rmqtest.Unique("bnk")
			var mu sync.Mutex
			deferrals := map[string]int{} // lite topic -> deferrals shorter than the invisible duration
			s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
				req := c.Request.(*v2.ChangeInvisibleDurationRequest)
				if req.GetInvisibleDuration().AsDuration() < 30*time.Second {
					mu.Lock()
					deferrals[req.GetLiteTopic()]++
					mu.Unlock()
				}
				return rmqfake.Verdict{}
			})
			var recs []rmqflow.Record
			for i := 0; i < 8; i++ {
				recs = append(recs, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", prefix, i), Body: []byte(fmt.Sprintf("b%d", i))})
			}
			send(t, ctx, s.Addr(), reqTopic, recs...)
			rocketmq := func(pad string, size int) string {
				return strings.ReplaceAll(fmt.Sprintf(`rocketmq:
  endpoints: ${EP}
  lite:
    - topic: `+reqTopic+`
      group: `+reqGroup+`
  batch_size: %d
  nack_backoff: 1s
  invisible_duration: 60s`, size), "\n", "\n"+pad)
			}
			in := rocketmq("", 8)
			if batched {
				// Benthos resolves each read batch of a batching broker's
				// inputs as a whole (transaction.Tracked): batch_size 1
				// keeps the results per message (docs/benthos.md).
				in = "broker:\n  inputs:\n    - " + rocketmq("      ", 1) + "\n  batching:\n    count: 8\n    period: 10s\n"
			}
			var (
				seen      = map[string][]string{} // body -> delivery attempts seen
				sizes     []int
				redeliver = make(chan struct{})
			)
			bad := "b3"
			runInput(t, in, map[string]string{"EP": s.Addr()}, func(ctx context.Context, batch service.MessageBatch) error {
				mu.Lock()
				defer mu.Unlock()
				sizes = append(sizes, len(batch))
				var berr *service.BatchError
				for i, m := range batch {
					b, _ := m.AsBytes()
					attempt, _ := m.MetaGet("rocketmq_delivery_attempt")
					seen[string(b)] = append(seen[string(b)], attempt)
					switch {
					case string(b) != bad:
					case len(seen[bad]) == 1:
						if berr == nil {
							berr = service.NewBatchError(batch, errors.New("one message failed"))
						}
						berr.Failed(i, errors.New("the output refused it"))
					case len(seen[bad]) == 2:
						close(redeliver)
					}
				}
				if berr != nil {
					return berr
				}
				return nil
			})
			select {
			case <-redeliver:
			case <-ctx.Done():
				t.Fatal("the failed message never came back")
			}
			waitFor(t, 10*time.Second, "all eight acked", func() bool {
				c := s.Stats().Groups[reqGroup]
				return c.Acked >= 8 && c.InFlight == 0
			})
			mu.Lock()
			defer mu.Unlock()
			t.Logf("batch sizes %v, seen %v", sizes, seen)
			for i := 0; i < 8; i++ {
				b := fmt.Sprintf("b%d", i)
				want := 1
				if b == bad {
					want = 2
				}
				if len(seen[b]) != want {
					t.Errorf("%s delivered %d times, want %d", b, len(seen[b]), want)
				}
			}
			for lite, n := range deferrals {
				if lite != prefix+"-3" || n != 1 {
					t.Errorf("deferrals: %v, want one, of %s-3", deferrals, prefix)
					break
				}
			}
			if len(deferrals) != 1 {
				t.Errorf("deferrals: %v, want one, of %s-3", deferrals, prefix)
			}
			if batched && sizes[0] != 8 {
				t.Errorf("the broker input's first batch had %d messages, want 8", sizes[0])
			}
		})
	}
}

// TestAckProcessorLeavesErroredMessages: rocketmq_ack does not ack a message
// an earlier processor flagged with an error (the spec's own example, an
// http call then rocketmq_ack, acked a message whose model call failed: the
// work was lost); it passes on with its error, and comes back. The other
// message of the batch is acked.
func TestAckProcessorLeavesErroredMessages(t *testing.T) {
	s := fake(t)
	ctx := rmqtest.Context(t, time.Minute)
	prefix := rmqtest.Unique("berr")
	send(t, ctx, s.Addr(), reqTopic, rmqflow.Record{LiteTopic: prefix + "-a", Body: []byte("good")},
		rmqflow.Record{LiteTopic: prefix + "-b", Body: []byte("bad")})
	var mu sync.Mutex
	errored := map[string]bool{}
	runPipeline(t, `rocketmq:
  endpoints: ${EP}
  lite:
    - topic: `+reqTopic+`
      group: `+reqGroup+`
  ack_mode: manual
  invisible_duration: 60s`, []string{`mapping: 'root = if content() == "bad" { throw("the model call failed") } else { content() }'`,
		`rocketmq_ack:
  endpoints: ${EP}`}, map[string]string{"EP": s.Addr()}, func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			body, _ := m.AsBytes()
			errored[string(body)] = m.GetError() != nil
		}
		return nil
	})
	waitFor(t, 30*time.Second, "both messages through the pipeline", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errored) == 2
	})
	waitFor(t, 10*time.Second, "the good message acked", func() bool { return s.Stats().Groups[reqGroup].Acked >= 1 })
	mu.Lock()
	defer mu.Unlock()
	if !errored["bad"] || errored["good"] {
		t.Fatalf("errors after the processors: %v, want bad flagged and good not", errored)
	}
	g := s.Stats().Groups[reqGroup]
	if g.Acked != 1 || g.InFlight != 1 {
		t.Fatalf("group %+v: want the good message acked and the failed one still in flight", g.Counts)
	}
}

// TestDeferThenAckSticks: rocketmq_ack with action defer writes the new
// receipt handle the deferral gave the message, so a later rocketmq_ack in the
// pipeline acks it for good (with the old handle the broker answered OK but
// kept the message in flight: it came back).
func TestDeferThenAckSticks(t *testing.T) {
	s := rmqfake.NewForTest(t)
	if err := s.CreateTopic("t", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("g"); err != nil {
		t.Fatal(err)
	}
	ctx := rmqtest.Context(t, time.Minute)
	send(t, ctx, s.Addr(), "t", rmqflow.Record{Body: []byte("m")})
	var mu sync.Mutex
	var errs []error
	done := make(chan struct{}, 1)
	runPipeline(t, `rocketmq:
  endpoints: ${EP}
  mode: simple
  topic: t
  group: g
  ack_mode: manual
  invisible_duration: 60s`, []string{"rocketmq_ack:\n  endpoints: ${EP}\n  action: defer\n  defer_duration: 30s", "rocketmq_ack:\n  endpoints: ${EP}"},
		map[string]string{"EP": s.Addr()}, func(_ context.Context, batch service.MessageBatch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range batch {
				errs = append(errs, m.GetError())
			}
			done <- struct{}{}
			return nil
		})
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the message never went through the pipeline")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || errs[0] != nil {
		t.Fatalf("errors after the processors: %v", errs)
	}
	if g := s.Stats().Groups["g"]; g.Acked != 1 || g.InFlight != 0 || g.Backlog != 0 {
		t.Fatalf("group %+v: want the message acked for good", g.Counts)
	}
}

// TestInputBadGroupBacksOff: an input whose group the broker does not know
// fails in Connect, which Benthos retries with its backoff, rather than
// starting, failing and reconnecting at once in a loop (hundreds of sessions
// a second before).
func TestInputBadGroupBacksOff(t *testing.T) {
	s := fake(t)
	var opened atomic.Int64
	s.Intercept("Telemetry", func(rmqfake.Call) rmqfake.Verdict {
		opened.Add(1)
		return rmqfake.Verdict{}
	})
	b := service.NewStreamBuilder()
	b.SetEnvVarLookupFunc(envLookup(map[string]string{"EP": s.Addr()}))
	if err := b.AddInputYAML(`rocketmq:
  endpoints: ${EP}
  lite:
    - topic: ` + reqTopic + `
      group: no-such-group`); err != nil {
		t.Fatal(err)
	}
	if err := b.AddBatchConsumerFunc(func(context.Context, service.MessageBatch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLoggerYAML("level: OFF"); err != nil {
		t.Fatal(err)
	}
	stop := start(t, b)
	waitFor(t, 10*time.Second, "a first attempt", func() bool { return opened.Load() > 0 })
	first := time.Now()
	waitFor(t, 10*time.Second, "3 s of attempts", func() bool { return time.Since(first) >= 3*time.Second })
	stop()
	if n := opened.Load(); n > 20 {
		t.Fatalf("%d session attempts in about 3 s: the input reconnects without backoff", n)
	}
}
