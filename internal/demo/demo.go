// Package demo is the scenario behind `rmqflow demo`: one LITE main topic with
// many sessions (lite topics), one hot session flooding, a pipeline of
// source → keyed hand-off by lite topic → fair-share throttle → slow "model
// call" → ack, run with the throttle off and then on, and a report of what
// the cold sessions saw in each run.
package demo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow"
)

// Config describes one demo.
type Config struct {
	// Conn reaches the broker.
	Conn rmqflow.Connection
	// Topic and Group: a LITE main topic and its wildcard group.
	Topic, Group string
	// Sessions is the number of cold sessions; default 24.
	Sessions int
	// PerSession is the messages each cold session sends; default 8.
	PerSession int
	// Hot is the messages the hot session floods with; 0: no hot session
	// (the CLI's default is 400). Negative is an error.
	Hot int
	// Workers is the number of keyed worker shards; default 4.
	Workers int
	// ModelCall is the time one "model call" takes; default 15 ms.
	ModelCall time.Duration
	// Progress, when set, gets a live status line now and then.
	Progress func(Status)
}

func (c Config) withDefaults() Config {
	if c.Sessions == 0 {
		c.Sessions = 24
	}
	if c.PerSession == 0 {
		c.PerSession = 8
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.ModelCall == 0 {
		c.ModelCall = 15 * time.Millisecond
	}
	return c
}

// Status is a progress snapshot.
type Status struct {
	Run      string // "throttle off" or "throttle on"
	Received int64
	Acked    int64
	Deferred int64
	Total    int
	Elapsed  time.Duration
}

// TopicStats is what one lite topic saw in one run.
type TopicStats struct {
	LiteTopic string
	Hot       bool
	Received  int
	Acked     int
	Deferred  int
	// Latencies are born → acked, one per message.
	Latencies []time.Duration
}

// P returns the q-quantile latency (0 when there is none).
func (s TopicStats) P(q float64) time.Duration { return quantile(s.Latencies, q) }

// Result is one run.
type Result struct {
	// Baseline: the run without the hot session (throttle off), the cold
	// sessions' latency to compare the two others with.
	Baseline  bool
	Throttled bool
	Elapsed   time.Duration
	Topics    []TopicStats // hot first, then cold by name
}

// Cold returns all cold-session latencies together.
func (r Result) Cold() []time.Duration {
	var out []time.Duration
	for _, t := range r.Topics {
		if !t.Hot {
			out = append(out, t.Latencies...)
		}
	}
	return out
}

// Hot returns the hot session's stats.
func (r Result) Hot() TopicStats {
	for _, t := range r.Topics {
		if t.Hot {
			return t
		}
	}
	return TopicStats{}
}

// Run runs the scenario without and with the throttle, after a baseline
// run without the hot session when there is one (Config.Hot > 0).
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Hot < 0 {
		return nil, fmt.Errorf("demo: hot session of %d messages: want 0 (none) or more", cfg.Hot)
	}
	cfg = cfg.withDefaults()
	var out []Result
	if cfg.Hot > 0 {
		base := cfg
		base.Hot = 0
		r, err := runOnce(ctx, base, false)
		if err != nil {
			return out, err
		}
		r.Baseline = true
		out = append(out, r)
	}
	for _, throttled := range []bool{false, true} {
		r, err := runOnce(ctx, cfg, throttled)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Title names a run: "no hot session (baseline)", "throttle off" or
// "throttle on (fair share)".
func (r Result) Title() string {
	switch {
	case r.Baseline:
		return "no hot session (baseline)"
	case r.Throttled:
		return "throttle on (fair share)"
	}
	return "throttle off"
}

type tracker struct {
	mu     sync.Mutex
	topics map[string]*TopicStats
	seen   map[string]bool
	acked  atomic.Int64
	recv   atomic.Int64
	defers atomic.Int64
	done   chan struct{}
	total  int
}

func (t *tracker) topic(lite string, hot bool) *TopicStats {
	s := t.topics[lite]
	if s == nil {
		s = &TopicStats{LiteTopic: lite, Hot: hot}
		t.topics[lite] = s
	}
	return s
}

func runOnce(ctx context.Context, cfg Config, throttled bool) (Result, error) {
	name := "throttle off"
	if cfg.Hot == 0 && !throttled {
		name = "no hot session"
	}
	if throttled {
		name = "throttle on"
	}
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1_000_000_000)
	hotTopic := run + "-hot"
	total := cfg.Hot + cfg.Sessions*cfg.PerSession
	tr := &tracker{topics: map[string]*TopicStats{}, seen: map[string]bool{}, done: make(chan struct{}), total: total}

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: cfg.Conn,
		Lite: []rmqflow.LiteBinding{{Topic: cfg.Topic, Group: cfg.Group}}, FetchConcurrency: 2,
		AwaitDuration: 5 * time.Second, InvisibleDuration: 30 * time.Second}, rmqflow.BytesDecoder())
	if err != nil {
		return Result{}, err
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(ctx)
		return Result{}, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	acker := src.Acker()
	var th *rmqflow.Throttle[[]byte]
	if throttled {
		fair, err := rmqflow.FairShare[[]byte](rmqflow.FairShareConfig{Window: 3 * time.Second, MinCount: 8, Defer: 3 * time.Second})
		if err != nil {
			return Result{}, err
		}
		if th, err = rmqflow.NewThrottle(acker, fair, rmqflow.ThrottleConfig{}); err != nil {
			return Result{}, err
		}
	}

	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	shards := make([]chan *rmqflow.AckableMessage[[]byte], cfg.Workers)
	var wg sync.WaitGroup
	for i := range shards {
		shards[i] = make(chan *rmqflow.AckableMessage[[]byte], 8)
		wg.Add(1)
		go func(in <-chan *rmqflow.AckableMessage[[]byte]) {
			defer wg.Done()
			for m := range in {
				work(runCtx, cfg, tr, th, acker, m, run)
			}
		}(shards[i])
	}
	// Produce: the hot session floods first, cold sessions trickle in.
	prodErr := make(chan error, 1)
	go func() { prodErr <- produce(runCtx, cfg, run, hotTopic) }()
	// Source → keyed hand-off by lite topic.
	go func() {
		for {
			m, err := src.Next(runCtx)
			if err != nil {
				for _, s := range shards {
					close(s)
				}
				return
			}
			tr.recv.Add(1)
			h := fnv.New32a()
			h.Write([]byte(m.Meta.LiteTopic))
			select {
			case shards[h.Sum32()%uint32(len(shards))] <- m:
			case <-runCtx.Done():
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var result error
wait:
	for {
		select {
		case <-tr.done:
			break wait
		case err := <-prodErr:
			if err != nil {
				result = err
				break wait
			}
			prodErr = nil
		case <-tick.C:
			if cfg.Progress != nil {
				cfg.Progress(Status{Run: name, Received: tr.recv.Load(), Acked: tr.acked.Load(), Deferred: tr.defers.Load(), Total: total, Elapsed: time.Since(start)})
			}
		case <-ctx.Done():
			result = ctx.Err()
			break wait
		}
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if cfg.Progress != nil {
		cfg.Progress(Status{Run: name, Received: tr.recv.Load(), Acked: tr.acked.Load(), Deferred: tr.defers.Load(), Total: total, Elapsed: elapsed})
	}
	res := Result{Throttled: throttled, Elapsed: elapsed}
	tr.mu.Lock()
	for _, s := range tr.topics {
		res.Topics = append(res.Topics, *s)
	}
	tr.mu.Unlock()
	sort.Slice(res.Topics, func(i, j int) bool {
		if res.Topics[i].Hot != res.Topics[j].Hot {
			return res.Topics[i].Hot
		}
		return res.Topics[i].LiteTopic < res.Topics[j].LiteTopic
	})
	return res, result
}

// work is one shard's handling of one message: throttle (when on), the
// model call, the ack.
func work(ctx context.Context, cfg Config, tr *tracker, th *rmqflow.Throttle[[]byte], acker *rmqflow.Acker, m *rmqflow.AckableMessage[[]byte], run string) {
	if !strings.HasPrefix(m.Meta.LiteTopic, run+"-") {
		_ = acker.Ack(ctx, m.Handle) // left over by an earlier run
		return
	}
	hot := m.Meta.LiteTopic == run+"-hot"
	if th != nil {
		admitted, err := th.Admit(ctx, m)
		if err == nil && !admitted {
			tr.defers.Add(1)
			tr.mu.Lock()
			s := tr.topic(m.Meta.LiteTopic, hot)
			s.Received++
			s.Deferred++
			tr.mu.Unlock()
			return
		}
	}
	select { // the slow "model call"
	case <-time.After(cfg.ModelCall):
	case <-ctx.Done():
		return
	}
	if err := acker.Ack(ctx, m.Handle); err != nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := tr.topic(m.Meta.LiteTopic, hot)
	s.Received++
	if tr.seen[m.Meta.MessageID] {
		return
	}
	tr.seen[m.Meta.MessageID] = true
	s.Acked++
	s.Latencies = append(s.Latencies, time.Since(m.Meta.BornTime))
	if tr.acked.Add(1) == int64(tr.total) {
		close(tr.done)
	}
}

// produce sends the hot flood, then the cold sessions' messages in rounds.
func produce(ctx context.Context, cfg Config, run, hotTopic string) error {
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: cfg.Conn, Topic: cfg.Topic, Concurrency: 8})
	if err != nil {
		return err
	}
	defer sink.Close(context.WithoutCancel(ctx))
	var fs []*rmqflow.SendFuture
	for i := 0; i < cfg.Hot; i++ {
		fs = append(fs, sink.Write(ctx, rmqflow.Record{LiteTopic: hotTopic, Body: []byte("hot")}))
	}
	for round := 0; round < cfg.PerSession; round++ {
		for s := 0; s < cfg.Sessions; s++ {
			fs = append(fs, sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-s%02d", run, s), Body: []byte("cold")}))
		}
		select {
		case <-time.After(50 * time.Millisecond): // cold sessions trickle in
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
	}
	return nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1)+0.5)]
}

// Quantile is the q-quantile of ds.
func Quantile(ds []time.Duration, q float64) time.Duration { return quantile(ds, q) }

// WriteTable prints the per-lite-topic table of both runs.
func WriteTable(w io.Writer, results []Result) {
	for _, r := range results {
		fmt.Fprintf(w, "\n%s — %v\n", r.Title(), r.Elapsed.Round(10*time.Millisecond))
		fmt.Fprintf(w, "%-22s %9s %7s %9s %9s %9s\n", "lite topic", "received", "acked", "deferred", "p50", "p99")
		for _, t := range r.Topics {
			name := t.LiteTopic
			if i := strings.Index(name, "-"); i >= 0 {
				name = name[i+1:]
			}
			if t.Hot {
				name += " (hot)"
			}
			fmt.Fprintf(w, "%-22s %9d %7d %9d %9v %9v\n", name, t.Received, t.Acked, t.Deferred,
				t.P(0.5).Round(time.Millisecond), t.P(0.99).Round(time.Millisecond))
		}
		cold := r.Cold()
		fmt.Fprintf(w, "%-22s %9s %7d %9s %9v %9v\n", "all cold sessions", "", len(cold), "",
			quantile(cold, 0.5).Round(time.Millisecond), quantile(cold, 0.99).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\ncold sessions' p99:")
	for i, r := range results {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %v", sep, r.Title(), quantile(r.Cold(), 0.99).Round(time.Millisecond))
	}
	fmt.Fprintln(w)
}
