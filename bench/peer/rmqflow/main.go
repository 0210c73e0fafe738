// Command rmqflow is rmqflow's own contender in the benchmark, in four
// variants (--variant; bench/README.md says why each is configured so):
//
//   - loop: a Source (FetchConcurrency = --concurrency) read with Next, each
//     message acked with Acker.AckAsync, whose pool coalesces acks into
//     multi-entry RPCs; with --handler-delay, --concurrency goroutines call
//     Next and sleep before acking.
//   - runner: rmqflow.Runner (Concurrency = --concurrency workers) whose
//     handler sleeps --handler-delay and returns rmqflow.Ack().
//   - runner-pipelined: the same Runner with RunnerConfig.PipelineAcks (a
//     lite topic's next message starts before its predecessor's ack was
//     answered).
//   - runner-throttle: the same Runner with SetThrottle(NewThrottle(FairShare
//     with its defaults)).
//
// Both modes. --fetch overrides the FetchConcurrency, --max-held the runner
// variants' RunnerConfig.MaxHeld (0: its default); --lite-dispatch-broker
// sets SourceConfig.LiteDispatchKick to brokeradmin.LiteDispatchKick of that
// address (lite mode; the harness's peer option kick=on). It prints one JSON line on
// stdout (see bench/README.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
	"github.com/rmqflow/rmqflow/brokeradmin"
)

var fetchFlag, loopWorkers, maxHeld int
var kickBroker string

func main() {
	both := []string{"normal", "lite"}
	peerkit.Main(peerkit.Peer{Name: "rmqflow",
		Variants: []peerkit.Variant{
			{Name: "loop", Modes: both, Consume: loop},
			{Name: "runner", Modes: both, Consume: func(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
				return runner(ctx, f, t, false, false)
			}},
			{Name: "runner-pipelined", Modes: both, Consume: func(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
				return runner(ctx, f, t, false, true)
			}},
			{Name: "runner-throttle", Modes: both, Consume: func(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
				return runner(ctx, f, t, true, false)
			}},
		},
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&fetchFlag, "fetch", 0, "rmqflow: SourceConfig.FetchConcurrency (0: the variant's default, see bench/README.md)")
			fs.IntVar(&loopWorkers, "loop-workers", 0, "rmqflow loop: goroutines calling Next (0: 1, or --concurrency with --handler-delay)")
			fs.StringVar(&kickBroker, "lite-dispatch-broker", "", "rmqflow, lite mode: the broker's own remoting `host:port` for SourceConfig.LiteDispatchKick (brokeradmin.LiteDispatchKick; empty: no kick)")
			fs.IntVar(&maxHeld, "max-held", 0, "rmqflow runner*: RunnerConfig.MaxHeld (0: the Runner's default, max(4 × --concurrency, rmqflow.DefaultRunnerMaxHeld))")
		},
	})
}

// fetchConcurrency is the Source's FetchConcurrency for f: --fetch, else
// --concurrency for every variant (bench/README.md: the A/B behind it).
func fetchConcurrency(f peerkit.Flags) int {
	if fetchFlag > 0 {
		return fetchFlag
	}
	return f.Concurrency
}

func newSource(f peerkit.Flags, m *meter) (*rmqflow.Source[[]byte], error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := rmqflow.SourceConfig{
		Connection:       rmqflow.Connection{Endpoints: f.Endpoint, Logger: log, Meter: m},
		FetchConcurrency: fetchConcurrency(f), MaxMessageNum: f.Batch,
		AwaitDuration: f.Await, InvisibleDuration: f.Invisible,
	}
	if f.Lite() {
		cfg.Lite = []rmqflow.LiteBinding{{Topic: f.Topic, Group: f.Group}}
		if kickBroker != "" {
			cfg.LiteDispatchKick = brokeradmin.LiteDispatchKick(kickBroker)
		}
	} else {
		if kickBroker != "" {
			return nil, errors.New("--lite-dispatch-broker applies to lite mode")
		}
		cfg.Mode, cfg.Topic, cfg.Group = rmqflow.ModeSimple, f.Topic, f.Group
	}
	return rmqflow.NewSource(cfg, rmqflow.BytesDecoder())
}

func delivery(f peerkit.Flags, m *rmqflow.AckableMessage[[]byte]) peerkit.Delivery {
	return peerkit.Delivery{ID: m.Meta.MessageID, Mine: f.Mine(m.Meta.Keys, m.Meta.LiteTopic),
		LiteTopic: m.Meta.LiteTopic, Born: m.Meta.BornTime, Received: m.Meta.ReceivedAt}
}

func closeSource(src *rmqflow.Source[[]byte]) {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = src.Close(cctx)
}

// loop: Next, then AckAsync; a goroutine per ack waits for its future to
// tell the tracker when the ack returned.
func loop(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker) error {
	if maxHeld != 0 {
		return errors.New("--max-held applies to the runner variants, not loop")
	}
	src, err := newSource(f, &meter{t: t})
	if err != nil {
		return err
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(context.Background())
		return err
	}
	defer closeSource(src)
	acker := src.Acker()
	counters(t, acker)
	workers := 1 // Next never blocks on an ack: one loop keeps up
	if f.HandlerDelay > 0 {
		workers = f.Concurrency // each sleeps in its slot
	}
	if loopWorkers > 0 {
		workers = loopWorkers
	}
	var wg, acks sync.WaitGroup
	var failed error
	var once sync.Once
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := src.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { failed = err })
					}
					return
				}
				d := delivery(f, m)
				t.Seen(d.ID, d.Mine)
				f.Delay(ctx)
				fut := acker.AckAsync(ctx, m.Handle)
				acks.Add(1)
				go func() {
					defer acks.Done()
					<-fut.Done()
					if err := fut.Err(); err != nil {
						if ctx.Err() == nil {
							t.AckFailed(1)
							fmt.Fprintf(os.Stderr, "rmqflow: ack %s: %v\n", m.Handle.String(), err)
						}
						return
					}
					t.Ack(d)
				}()
			}
		}()
	}
	wg.Wait()
	acks.Wait()
	return failed
}

// counters makes the tracker read the ack pool's ack RPCs and its
// ChangeInvisibleDuration RPCs (deferrals, lease renewals; the Source's
// renewals of queued messages come through the meter).
func counters(t *peerkit.Tracker, acker *rmqflow.Acker) {
	t.AckRPCSource(func() int64 { return acker.Stats().AckRPCs })
	t.ChangeRPCSource(func() int64 { return acker.Stats().ChangeInvisible })
}

// runner: rmqflow.Runner with a handler returning Ack(); the acks' returns
// are seen through the ack.results metric (see fifo).
func runner(ctx context.Context, f peerkit.Flags, t *peerkit.Tracker, throttled, pipelined bool) error {
	q := &fifo{}
	m := &meter{t: t, acked: func(ok bool) {
		if !ok {
			t.AckFailed(1)
			fmt.Fprintln(os.Stderr, "rmqflow: an ack failed (its message stays uncredited until acked again)")
			return
		}
		if d, found := q.result(true); found {
			t.Ack(d)
		}
	}}
	src, err := newSource(f, m)
	if err != nil {
		return err
	}
	acker := src.Acker()
	counters(t, acker)
	h := func(ctx context.Context, msg *rmqflow.AckableMessage[[]byte]) (rmqflow.Decision, error) {
		d := delivery(f, msg)
		t.Seen(d.ID, d.Mine)
		f.Delay(ctx)
		q.push(d)
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: f.Concurrency, PipelineAcks: pipelined, MaxHeld: maxHeld})
	if err != nil {
		_ = src.Close(context.Background())
		return err
	}
	if throttled {
		p, err := rmqflow.FairShare[[]byte](rmqflow.FairShareConfig{})
		if err != nil {
			_ = src.Close(context.Background())
			return err
		}
		th, err := rmqflow.NewThrottle(acker, p, rmqflow.ThrottleConfig{})
		if err != nil {
			_ = src.Close(context.Background())
			return err
		}
		r.SetThrottle(th)
	}
	err = r.Run(ctx)
	fmt.Fprintf(os.Stderr, "rmqflow: deferrals (rmqflow.throttle.defers by reason):%s\n", m.deferrals())
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
