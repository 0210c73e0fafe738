package rmqflow_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// fairRun is what one runner run observed.
type fairRun struct {
	hotDoneWhenColdDone int             // hot messages handled when the last cold one was
	coldLatency         []time.Duration // born → handled, per cold message
	maxAttempt          int32
	defers              int // deferrals the policy asked for
	dlq                 int
	handled             int
}

// runHotCold floods one hot lite topic with hot messages, adds cold messages
// over many cold lite topics, and runs a Runner with a slow handler over
// them, with or without a FairShare throttle. It returns once every message
// was handled once.
func runHotCold(t *testing.T, topic, group string, throttle bool) fairRun {
	const hot, coldTopics, perCold, work = 300, 20, 3, 15 * time.Millisecond
	run := rmqtest.Unique("fair")
	total := hot + coldTopics*perCold

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection: conn(t), Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 30 * time.Second, AwaitDuration: 5 * time.Second,
	}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		out     fairRun
		seen    = map[string]bool{}
		hotDone int
		cold    int
		all     = make(chan struct{})
	)
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if !strings.HasPrefix(m.Meta.LiteTopic, run) {
			return rmqflow.Ack(), nil // an earlier run's leftover
		}
		time.Sleep(work) // the slow "model call" this test stands for
		mu.Lock()
		defer mu.Unlock()
		out.maxAttempt = max(out.maxAttempt, m.Meta.DeliveryAttempt)
		if m.Meta.DeadLettered() {
			out.dlq++
		}
		if seen[m.Meta.MessageID] {
			return rmqflow.Ack(), nil
		}
		seen[m.Meta.MessageID] = true
		out.handled++
		if strings.HasPrefix(m.Meta.LiteTopic, run+"-hot") {
			hotDone++
		} else {
			cold++
			out.coldLatency = append(out.coldLatency, time.Since(m.Meta.BornTime))
			if cold == coldTopics*perCold {
				out.hotDoneWhenColdDone = hotDone
			}
		}
		if out.handled == total {
			close(all)
		}
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if throttle {
		policy, err := rmqflow.FairShare[string](rmqflow.FairShareConfig{Window: 5 * time.Second, MinCount: 5, Defer: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		counted := rmqflow.ThrottlePolicyFunc[string](func(m *rmqflow.AckableMessage[string]) rmqflow.Decision {
			d := policy.Decide(m)
			if d.Kind() == rmqflow.DecisionDefer {
				mu.Lock()
				out.defers++
				mu.Unlock()
			}
			return d
		})
		th, err := rmqflow.NewThrottle(src.Acker(), counted, rmqflow.ThrottleConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r.SetThrottle(th)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// The hot lite topic floods first; cold messages arrive while its
	// backlog is being worked off. (A backlog that exists before a wildcard
	// consumer subscribes is dispatched to it only after a delay, so the
	// flood is produced while the runner runs.)
	produce(t, topic, run+"-hot", hot, 1)
	produce(t, topic, run+"-cold", coldTopics*perCold, coldTopics)
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		t.Errorf("not every message was handled within 2 minutes")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("runner: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

func p(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

// TestFairShareKeepsColdLiteTopicsFlowing: with one hot lite topic flooding
// and many cold ones arriving meanwhile, a FairShare throttle lets every cold
// message through while most of the hot backlog still waits; nothing reaches
// the DLQ and no message comes near the broker's retry limit because of
// throttling. Latencies are logged for comparison, not asserted (timing
// belongs in benchmarks).
func TestFairShareKeepsColdLiteTopicsFlowing(t *testing.T) {
	rmqtest.Endpoint(t) // fails (or, for local iteration, skips) before the runs
	var fair, unfair fairRun
	// The group returns once both parallel runs have finished.
	t.Run("runs", func(t *testing.T) {
		t.Run("throttled", func(t *testing.T) {
			t.Parallel()
			fair = runHotCold(t, "rmqflow-lite-fair", "rmqflow-lite-fair-g", true)
		})
		t.Run("unthrottled", func(t *testing.T) {
			t.Parallel()
			unfair = runHotCold(t, "rmqflow-lite-unfair", "rmqflow-lite-unfair-g", false)
		})
	})
	if fair.handled == 0 || unfair.handled == 0 {
		t.Fatal("a run handled nothing")
	}
	t.Logf("cold p50/p99 latency: throttled %v/%v, unthrottled %v/%v; hot handled when the last cold was: throttled %d, unthrottled %d of 300",
		p(fair.coldLatency, .5), p(fair.coldLatency, .99), p(unfair.coldLatency, .5), p(unfair.coldLatency, .99),
		fair.hotDoneWhenColdDone, unfair.hotDoneWhenColdDone)
	t.Logf("throttled run: %d deferrals, max delivery attempt %d", fair.defers, fair.maxAttempt)
	if fair.defers == 0 {
		t.Error("the FairShare policy never deferred the hot lite topic")
	}
	if fair.hotDoneWhenColdDone >= 150 {
		t.Errorf("throttled: %d of 300 hot messages were handled before the last cold one; want the cold ones first", fair.hotDoneWhenColdDone)
	}
	if fair.dlq != 0 || unfair.dlq != 0 {
		t.Errorf("messages delivered from the DLQ: throttled %d, unthrottled %d", fair.dlq, unfair.dlq)
	}
	if fair.maxAttempt >= rmqflow.DefaultMaxDeliveryAttempt {
		t.Errorf("throttling drove a message to attempt %d", fair.maxAttempt)
	}
}

// TestRunnerConfigMaxHeld: MaxHeld defaults to max(Concurrency × 4, 4096),
// keeps a value set, and refuses a negative one with an *OptionError naming
// it.
func TestRunnerConfigMaxHeld(t *testing.T) {
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	h := func(context.Context, *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		return rmqflow.Ack(), nil
	}
	for _, c := range []struct {
		cfg  rmqflow.RunnerConfig
		want int
	}{
		{rmqflow.RunnerConfig{}, rmqflow.DefaultRunnerMaxHeld},
		{rmqflow.RunnerConfig{Concurrency: 2048}, 8192},
		{rmqflow.RunnerConfig{MaxHeld: 10}, 10},
	} {
		r, err := rmqflow.NewRunner(src, h, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := rmqflow.RunnerMaxHeld(r); got != c.want {
			t.Errorf("%+v: MaxHeld %d, want %d", c.cfg, got, c.want)
		}
	}
	_, err = rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{MaxHeld: -1})
	var oe *rmqflow.OptionError
	if !errors.As(err, &oe) || oe.Option != "MaxHeld" {
		t.Fatalf("MaxHeld -1: %v, want an *OptionError for MaxHeld", err)
	}
}
