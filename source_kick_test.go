package rmqflow_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/brokeradmin"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The real broker's fixtures of the kick tests: a LITE main topic and two
// wildcard groups, one kicked and one left alone.
const (
	kickSrcTopic = "rmqflow-lite-kick-src"
	kickSrcGroup = "rmqflow-lite-kick-src-g"
	kickSrcAlone = "rmqflow-lite-kick-src-off-g"
)

// kickTarget is a broker with a lite main topic, two wildcard groups and a
// way to trigger a lite dispatch (rmqfake with the broker's dispatch
// defaults, or the real broker's remoting port).
type kickTarget struct {
	name          string
	conn          rmqflow.Connection
	topic         string
	kicked, alone string
	trigger       func(ctx context.Context, group, clientID string) error
}

func kickTargets(t *testing.T, f func(t *testing.T, tg kickTarget)) {
	// The two targets run side by side, so the goroutine check is the
	// parent's (it runs once both are over): a check of each would count
	// the other's goroutines as its own leaks.
	rmqtest.CheckGoroutines(t)
	for _, name := range []string{"rmqfake", "real"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if name == "real" {
				f(t, kickTarget{name: "rocketmq", conn: conn(t), topic: kickSrcTopic, kicked: kickSrcGroup, alone: kickSrcAlone,
					trigger: brokeradmin.LiteDispatchKick(rmqtest.BrokerAddr())})
				return
			}
			s := rmqfake.NewForTest(t) // the broker's dispatch: 5 s after a join, on a 10 s scan
			if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
				t.Fatal(err)
			}
			for _, g := range []string{"kicked", "alone"} {
				if err := s.CreateGroup(g, rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
					t.Fatal(err)
				}
			}
			f(t, kickTarget{name: "rmqfake", conn: rmqflow.Connection{Endpoints: s.Addr()}, topic: "main", kicked: "kicked", alone: "alone",
				trigger: func(_ context.Context, group, _ string) error { return s.TriggerLiteDispatch(group, "") }})
		})
	}
}

// firstOf starts a lite source on tg.topic/group and returns how long after
// Start began its first message of run came (-1: none within limit).
func firstOf(t *testing.T, tg kickTarget, group, run string, limit time.Duration, tweak func(*rmqflow.SourceConfig)) time.Duration {
	t.Helper()
	cfg := rmqflow.SourceConfig{Connection: tg.conn, Lite: []rmqflow.LiteBinding{{Topic: tg.topic, Group: group}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 30 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := src.Next(ctx)
		if err != nil {
			t.Errorf("%s: no message of this run within %v: %v", group, limit, err)
			return -1
		}
		_ = src.Acker().Ack(ctx, m.Handle)
		if strings.HasPrefix(m.Meta.LiteTopic, run) {
			return time.Since(t0)
		}
	}
}

func sendBacklog(t *testing.T, conn rmqflow.Connection, topic, run string, n int) {
	t.Helper()
	ctx := rmqtest.Context(t, 30*time.Second)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	for i := range n {
		if _, errs := sink.Send(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", run, i), Body: []byte("x")}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
}

// A Source with SourceConfig.LiteDispatchKick that joins a group with a
// backlog gets its first message within 2 s of Start (issue 25, point 3);
// one beside it without the kick waits for the broker's first dispatch of a
// new client, 5 s at least. The kicks stop with the first message.
func TestSourceLiteDispatchKick(t *testing.T) {
	kickTargets(t, func(t *testing.T, tg kickTarget) {
		run := rmqtest.Unique("kick")
		sendBacklog(t, tg.conn, tg.topic, run, 3)
		var calls atomic.Int64
		var mu sync.Mutex
		var groups, ids []string
		var kicked, alone time.Duration
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			kicked = firstOf(t, tg, tg.kicked, run, 20*time.Second, func(c *rmqflow.SourceConfig) {
				c.LiteDispatchKick = func(ctx context.Context, group, clientID string) error {
					calls.Add(1)
					mu.Lock()
					groups, ids = append(groups, group), append(ids, clientID)
					mu.Unlock()
					return tg.trigger(ctx, group, clientID)
				}
			})
		}()
		go func() {
			defer wg.Done()
			alone = firstOf(t, tg, tg.alone, run, 20*time.Second, nil)
		}()
		wg.Wait() // both sources closed: their kicks have ended
		t.Logf("%s: first message %v after Start with LiteDispatchKick (%d calls), %v without", tg.name, kicked.Round(time.Millisecond), calls.Load(), alone.Round(time.Millisecond))
		if kicked < 0 || kicked > 2*time.Second {
			t.Errorf("with LiteDispatchKick: first message %v after Start, want 2 s at most", kicked)
		}
		if alone >= 0 && alone < 5*time.Second {
			t.Errorf("without: first message %v after Start, want the broker's 5 s at least", alone)
		}
		// One call at the join, one per 250 ms until the message, and one
		// that may be under way when it comes.
		if n, most := calls.Load(), int64(kicked/rmqflow.LiteDispatchKickEvery)+2; n < 1 || n > most {
			t.Errorf("%d LiteDispatchKick calls for a first message after %v, want 1 to %d", n, kicked, most)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range groups {
			if groups[i] != tg.kicked || ids[i] == "" {
				t.Errorf("call %d: group %q client id %q, want %q and the source's client id", i, groups[i], ids[i], tg.kicked)
			}
		}
	})
}

// A LiteDispatchKick that fails is logged once at WARN, counted, retried
// every 250 ms for 5 s at most, and changes nothing else: the broker's own
// dispatch brings the backlog. On rmqfake with the broker's defaults.
func TestSourceLiteDispatchKickFails(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t)
	if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	tg := kickTarget{conn: rmqflow.Connection{Endpoints: s.Addr()}, topic: "main"}
	run := rmqtest.Unique("kickfail")
	sendBacklog(t, tg.conn, "main", run, 1)
	var logs bytes.Buffer
	var lmu sync.Mutex
	tg.conn.Logger = slog.New(slog.NewTextHandler(kickWriter(func(p []byte) (int, error) {
		lmu.Lock()
		defer lmu.Unlock()
		return logs.Write(p)
	}), nil))
	reader := sdkmetric.NewManualReader()
	var calls atomic.Int64
	refused := errors.New("no route to the broker port")
	first := firstOf(t, tg, "g", run, 30*time.Second, func(c *rmqflow.SourceConfig) {
		c.Meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
		c.LiteDispatchKick = func(ctx context.Context, _, _ string) error {
			calls.Add(1)
			return refused
		}
	})
	if first >= 0 && first < 5*time.Second {
		t.Errorf("first message %v after Start with a failing kick, want the broker's own dispatch (5 s at least)", first)
	}
	most := int64(rmqflow.LiteDispatchKickFor/rmqflow.LiteDispatchKickEvery) + 1
	if n := calls.Load(); n < most-4 || n > most {
		t.Errorf("%d calls of a failing kick, want about %d (every 250 ms for 5 s)", n, most)
	}
	lmu.Lock()
	warns := strings.Count(logs.String(), "level=WARN msg=\"rmqflow: LiteDispatchKick failed")
	hasErr := strings.Contains(logs.String(), refused.Error())
	lmu.Unlock()
	if warns != 1 || !hasErr {
		t.Errorf("%d WARN lines about the failing kick (with its error: %v), want 1", warns, hasErr)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var failed int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != rmqflow.MetricLiteDispatchKicks {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := p.Attributes.Value("outcome"); v.AsString() == "failed" {
					failed += p.Value
				}
			}
		}
	}
	if failed != calls.Load() {
		t.Errorf("%s{outcome=failed} = %d, want %d", rmqflow.MetricLiteDispatchKicks, failed, calls.Load())
	}
}

type kickWriter func([]byte) (int, error)

func (f kickWriter) Write(p []byte) (int, error) { return f(p) }

// TestLiteSourceKicksAtStartAndAfterARejoin: on the source's clock, a
// LiteDispatchKick run starts at Start (the first call at once) and ends
// 5 s later without a message, with at most 21 calls; the re-join after
// LiteRejoinAfter (30 s) starts another at once; nothing is called between.
func TestLiteSourceKicksAtStartAndAfterARejoin(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	var mu sync.Mutex
	var at []time.Duration
	called := make(chan struct{}, 1)
	var r *rejoinRig
	ready := make(chan struct{})
	r = newRejoinRig(t, ctx, func(c *rmqflow.SourceConfig) {
		c.LiteRejoinAfter = 30 * time.Second
		c.LiteDispatchKick = func(_ context.Context, group, clientID string) error {
			<-ready // r is set
			mu.Lock()
			at = append(at, r.mc.Now().Sub(r.t0))
			mu.Unlock()
			select {
			case called <- struct{}{}:
			default:
			}
			return nil
		}
	})
	close(ready)
	// await blocks until a call at or after from has been recorded.
	await := func(from time.Duration) {
		t.Helper()
		for {
			mu.Lock()
			n := len(at)
			last := time.Duration(-1)
			if n > 0 {
				last = at[n-1]
			}
			mu.Unlock()
			if last >= from {
				return
			}
			select {
			case <-called:
			case <-time.After(10 * time.Second):
				t.Fatalf("no LiteDispatchKick call at %v or later; calls at %v", from, at)
			}
		}
	}
	await(0)
	r.advanceTo(t, 30*time.Second)
	if got := r.removes(t); len(got) != 1 || got[0] != "30s" {
		t.Fatalf("re-joins at %v, want one at 30s", got)
	}
	await(30 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	var first, second int
	for _, d := range at {
		switch {
		case d <= rmqflow.LiteDispatchKickFor:
			first++
		case d == 30*time.Second:
			second++
		default:
			t.Errorf("a call at %v: want calls within 5 s of the start and at the re-join (30 s) only; all: %v", d, at)
		}
	}
	if at[0] != 0 || first > 21 || second != 1 {
		t.Errorf("calls at %v: want the first at 0, at most 21 in the first 5 s, one at 30 s", at)
	}
}
