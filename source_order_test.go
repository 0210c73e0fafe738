package rmqflow_test

import (
	"context"
	"fmt"
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

// TestSourceRenewalFailureKeepsOrder: a queued message whose renewal at
// emission fails is not emitted (it comes back when its invisibility ends);
// the messages queued behind it in its lite topic (or FIFO message group)
// must not be emitted ahead of it either. TestModelRunner found this in CI:
// "l0-4 started before l0-3 (earlier in its lite topic) was decided". The
// emission renewal of l0-3 failed (an injected fault), l0-4's succeeded, and
// the runner handled l0-4 while l0-3 was still to come back.
func TestSourceRenewalFailureKeepsOrder(t *testing.T) {
	for _, mode := range []string{"lite", "fifo"} {
		t.Run(mode, func(t *testing.T) {
			ctx := rmqtest.Context(t, time.Minute)
			meter := newRecMeter()
			mc := rmqfake.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			s := rmqfake.NewForTest(t, rmqfake.WithClock(mc), rmqfake.FastLiteDispatch())
			cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), Meter: meter},
				InvisibleDuration: 10 * time.Second, RenewalAheadTime: time.Second, AwaitDuration: 5 * time.Second, MaxMessageNum: 16}
			var records []rmqflow.Record
			for _, key := range []string{"a", "b"} {
				for i := range 3 {
					r := rmqflow.Record{Body: []byte(fmt.Sprintf("%s%d", key, i))}
					if mode == "lite" {
						r.LiteTopic = key
					} else {
						r.MessageGroup = key
					}
					records = append(records, r)
				}
			}
			if mode == "lite" {
				must(t, s.CreateTopic("main", rmqfake.TopicLite))
				must(t, s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()))
				cfg.Lite = []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}
			} else {
				must(t, s.CreateTopic("main", rmqfake.TopicFIFO, rmqfake.Queues(1)))
				must(t, s.CreateGroup("g", rmqfake.FIFO()))
				cfg.Mode, cfg.Topic, cfg.Group = rmqflow.ModeSimple, "main", "g"
			}
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "main"})
			must(t, err)
			for _, r := range records {
				if _, err := sink.Write(ctx, r).Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			must(t, sink.Close(ctx))

			// The emission renewal of a0 (the first renewal of key a) fails.
			var failed atomic.Bool
			s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
				req := c.Request.(*v2.ChangeInvisibleDurationRequest)
				key := req.GetLiteTopic()
				if mode == "fifo" {
					key = "" // the request names no group; a0 is the first renewal of all
				}
				if (key == "a" || key == "") && failed.CompareAndSwap(false, true) {
					return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "refused once")}
				}
				return rmqfake.Verdict{}
			})

			src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
			must(t, err)
			tc := attachClock(src, mc, 500*time.Millisecond)
			must(t, src.Start(ctx))
			defer src.Close(context.Background())
			tc.waitArmed(t)
			waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 6 })
			// T0+6 s: 4 s of invisibility left, less than half of 10 s (so
			// Next renews at emission) and more than RenewalAheadTime (so the
			// queue's renewer has not).
			tc.steps(t, 12)

			order := map[string][]string{}
			next := func() *rmqflow.AckableMessage[string] {
				t.Helper()
				m, err := src.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				key := m.Meta.LiteTopic + m.Meta.MessageGroup
				order[key] = append(order[key], m.Value)
				return m
			}
			// Everything queued is emitted but a0 and (the fix) a1 and a2
			// behind it: b's three.
			for range 3 {
				m := next()
				if len(order["a"]) > 0 {
					t.Fatalf("emitted %v of key a after the renewal of a0 failed: out of order (a0 comes back later)", order["a"])
				}
				must(t, src.Acker().Ack(ctx, m.Handle))
			}
			if !failed.Load() {
				// a0 was queued behind b's three: taking it now is refused,
				// and it goes with a1 and a2, so nothing is left to emit.
				short, cancel := context.WithTimeout(ctx, time.Second)
				m, err := src.Next(short)
				cancel()
				if err == nil {
					t.Fatalf("emitted %s of %s after the renewal of a0 failed, want nothing", m.Value, m.Meta.LiteTopic+m.Meta.MessageGroup)
				}
			}
			if !failed.Load() {
				t.Fatal("no renewal was refused: the test did not test")
			}
			if n := src.QueueLen(); n != 0 {
				t.Fatalf("%d messages still queued after b's three, want 0 (a1 and a2 left to come back behind a0)", n)
			}
			for reason, want := range map[string]int64{"renewal_failed": 1, "order": 2} {
				if got := meter.get(rmqflow.MetricReleased + "{reason=" + reason + "}"); got != want {
					t.Errorf("%s{reason=%s} = %d, want %d", rmqflow.MetricReleased, reason, got, want)
				}
			}
			// Past their invisibility they come back, a0 first.
			tc.steps(t, 10)
			for range 3 {
				m := next()
				must(t, src.Acker().Ack(ctx, m.Handle))
			}
			if got := fmt.Sprint(order["a"]); got != "[a0 a1 a2]" {
				t.Errorf("key a emitted as %s, want [a0 a1 a2]", got)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
