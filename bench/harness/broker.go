package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// target is where the runs go: a real broker (fixtures through
// scripts/rocketmq.sh apply, CPU from its JVMs) or an in-process rmqfake.
type target struct {
	repo     string
	endpoint string
	// brokerAddr is the broker's own remoting address (-broker-addr), for
	// peers with kick=on.
	brokerAddr string
	fake       *rmqfake.Server
	cpu        *cpuSampler // nil on the emulator
}

// fixture is one topic and the groups that read it.
type fixture struct {
	Topic  string
	Lite   bool
	Groups []string
}

// create makes the topics and groups (one JVM for all on a real broker).
func (t *target) create(fs []fixture, dir string) error {
	if t.fake != nil {
		for _, f := range fs {
			kind := rmqfake.TopicNormal
			opts := []rmqfake.TopicOption{rmqfake.Queues(8)}
			if f.Lite {
				kind, opts = rmqfake.TopicLite, nil
			}
			if err := t.fake.CreateTopic(f.Topic, kind, opts...); err != nil {
				return err
			}
			for _, g := range f.Groups {
				var err error
				if f.Lite {
					err = t.fake.CreateGroup(g, rmqfake.LiteBind(f.Topic), rmqfake.Wildcard())
				} else {
					err = t.fake.CreateGroup(g)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintln(&b, "# written by the bench harness for one bench run")
	for _, f := range fs {
		if f.Lite {
			fmt.Fprintf(&b, "topic %s lite\n", f.Topic)
			for _, g := range f.Groups {
				fmt.Fprintf(&b, "group %s bind=%s wildcard\n", g, f.Topic)
			}
			continue
		}
		fmt.Fprintf(&b, "topic %s normal queues=8\n", f.Topic)
		for _, g := range f.Groups {
			fmt.Fprintf(&b, "group %s\n", g)
		}
	}
	path := filepath.Join(dir, "fixtures.txt")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(t.repo, "scripts", "rocketmq.sh"), "apply", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("scripts/rocketmq.sh apply: %v\n%s", err, out)
	}
	return nil
}

// heapInUse is, on the emulator, the harness process's heap in use after a
// collection: rmqfake's memory, with the harness's own (small) beside it.
// 0 on a real broker.
func (t *target) heapInUse() int64 {
	if t.fake == nil {
		return 0
	}
	runtime.GC()
	runtime.GC() // (as rmqfake's BenchmarkScaleMemory: what the first one's finalizers freed)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// liteTopicsHolding counts, on the emulator, the lite topics of topic that
// hold a message.
func (t *target) liteTopicsHolding(topic string) int {
	n := 0
	for _, l := range t.fake.Stats().Topics[topic].LiteTopics {
		if l.Stored > 0 {
			n++
		}
	}
	return n
}

func (t *target) connection() rmqflow.Connection {
	return rmqflow.Connection{Endpoints: t.endpoint}
}

// backlogRequestTimeout bounds each send of a backlog (produceBacklog).
const backlogRequestTimeout = 30 * time.Second

// produceBacklog writes n messages of size bytes for run id to topic: lite
// messages over k lite topics "<id>-<i%k>", normal ones with the run id as a
// key. It returns the messages/s it produced at.
func (t *target) produceBacklog(ctx context.Context, topic, mode, id string, n, k, size int) (float64, error) {
	// Unordered, as the open loop's producer (runPaced): its rate is the
	// producer's share of the open scenario's capacity. No peer depends on
	// the order of a backlog.
	// The backlog is not what the harness measures: each send may take
	// backlogRequestTimeout (a broker just restarted, its JIT cold, on a
	// loaded machine answered sends after the default 3 s: 2026-12-03).
	conn := t.connection()
	conn.RequestTimeout = backlogRequestTimeout
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: topic, Concurrency: 32, Unordered: true})
	if err != nil {
		return 0, err
	}
	body := bytes.Repeat([]byte("x"), max(size, 1))
	start := time.Now()
	const window = 8192 // futures outstanding
	fs := make([]*rmqflow.SendFuture, 0, window)
	flush := func() error {
		for _, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				return err
			}
		}
		fs = fs[:0]
		return nil
	}
	for i := 0; i < n; i++ {
		rec := rmqflow.Record{Keys: []string{id}, Body: body}
		if mode == "lite" {
			rec.LiteTopic = fmt.Sprintf("%s-%d", id, i%max(k, 1))
		}
		fs = append(fs, sink.Write(ctx, rec))
		if len(fs) == window {
			if err := flush(); err != nil {
				_ = sink.Close(context.WithoutCancel(ctx))
				return 0, fmt.Errorf("producing to %s: %w", topic, err)
			}
		}
	}
	if err := flush(); err != nil {
		_ = sink.Close(context.WithoutCancel(ctx))
		return 0, fmt.Errorf("producing to %s: %w", topic, err)
	}
	if err := sink.Close(ctx); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// paced is an open-loop producer: it offers messages at a fixed rate
// whatever the consumer does. Hot shape: lite topic "<id>-hot" gets hotShare
// of the messages, the rest spread over k-1 cold lite topics.
type paced struct {
	sent, failed atomic.Int64
	lateMax      atomic.Int64 // the producer's worst lag behind its schedule (ns)
}

func (t *target) producePaced(ctx context.Context, topic, mode, id string, n, k, size int, rate float64, shape string) (*paced, <-chan error) {
	p := &paced{}
	done := make(chan error, 1)
	go func() {
		done <- t.runPaced(ctx, p, topic, mode, id, n, k, size, rate, shape)
	}()
	return p, done
}

func (t *target) runPaced(ctx context.Context, p *paced, topic, mode, id string, n, k, size int, rate float64, shape string) error {
	// Unordered: an ordered Sink sends a lite topic's records one per round
	// trip (the broker drops lite records that share a call: scenario k),
	// which held the hot topic below its 300 msg/s and all 100 lite topics to
	// about 3k msg/s on a loaded broker (2026-12-01: 13 of 16 open and hot
	// runs fell behind). The consumers measured here do not depend on the
	// order of the load.
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: t.connection(), Topic: topic, Concurrency: 32, Unordered: true})
	if err != nil {
		return err
	}
	defer sink.Close(context.WithoutCancel(ctx))
	body := bytes.Repeat([]byte("x"), max(size, 1))
	start := time.Now()
	var wg sync.WaitGroup
	cold := 0
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		} else if -d > time.Duration(p.lateMax.Load()) {
			p.lateMax.Store(int64(-d))
		}
		rec := rmqflow.Record{Keys: []string{id}, Body: body}
		if mode == "lite" {
			rec.LiteTopic = pacedLiteTopic(shape, id, i, k, &cold)
		}
		f := sink.Write(ctx, rec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Wait(ctx); err != nil {
				p.failed.Add(1)
				return
			}
			p.sent.Add(1)
		}()
	}
	wg.Wait()
	if f := p.failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d sends failed", f, n)
	}
	return nil
}

// pacedLiteTopic is the lite topic of the i-th paced message: "hot" sends
// 10 of every k-1+10 messages to "<id>-hot" (10× the rate of each of the k-1
// cold topics, which the others go round); "cold" is the same cold topics
// alone; anything else spreads over k topics.
func pacedLiteTopic(shape, id string, i, k int, cold *int) string {
	switch shape {
	case "hot":
		if i%(k-1+10) < 10 {
			return id + "-hot"
		}
		*cold++
		return fmt.Sprintf("%s-%d", id, (*cold-1)%(k-1))
	case "cold":
		return fmt.Sprintf("%s-%d", id, i%(k-1))
	default:
		return fmt.Sprintf("%s-%d", id, i%max(k, 1))
	}
}

// cpuSampler samples the broker's JVMs' CPU time (utime+stime from
// /proc/<pid>/stat) every interval, so that any window can be cut out of it.
type cpuSampler struct {
	mu       sync.Mutex
	samples  []cpuSample
	failedAt []time.Time // samples that could not be read (a JVM gone)
	pids     []int
	stop     chan struct{}
	stopped  chan struct{}
}

type cpuSample struct {
	at  time.Time
	cpu float64 // seconds, all JVMs
}

// clockTicks is USER_HZ; Linux reports /proc times in it (100 everywhere
// that matters; getconf confirms when present).
func clockTicks() float64 {
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v)
		}
	}
	return 100
}

// brokerPIDs asks scripts/rocketmq.sh for the JVMs.
func brokerPIDs(repo string) ([]int, error) {
	out, err := exec.Command(filepath.Join(repo, "scripts", "rocketmq.sh"), "pids").Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/rocketmq.sh pids: %w", err)
	}
	var pids []int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			if pid, err := strconv.Atoi(f[1]); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) != 3 {
		return nil, fmt.Errorf("want 3 broker JVMs (namesrv, broker, proxy) from scripts/rocketmq.sh pids, got %q", out)
	}
	return pids, nil
}

func procCPU(pid int, hz float64) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / hz, nil
}

// startCPUSampler samples pids; when one is gone (a JVM restarted), it asks
// repids for the current ones: the windows around the change are not
// measured, later ones are.
func startCPUSampler(pids []int, every time.Duration, repids func() ([]int, error)) (*cpuSampler, error) {
	hz := clockTicks()
	c := &cpuSampler{pids: pids, stop: make(chan struct{}), stopped: make(chan struct{})}
	sample := func() error {
		var total float64
		for _, pid := range pids {
			v, err := procCPU(pid, hz)
			if err != nil {
				c.mu.Lock()
				c.failedAt = append(c.failedAt, time.Now())
				c.samples = nil // CPU times of other processes do not continue these
				c.mu.Unlock()
				if repids != nil {
					if p, perr := repids(); perr == nil {
						pids = p
					}
				}
				return err
			}
			total += v
		}
		c.mu.Lock()
		c.samples = append(c.samples, cpuSample{time.Now(), total})
		c.mu.Unlock()
		return nil
	}
	if err := sample(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = sample()
			case <-c.stop:
				return
			}
		}
	}()
	return c, nil
}

func (c *cpuSampler) close() {
	close(c.stop)
	<-c.stopped
}

// between is the CPU seconds spent between a and b, interpolated linearly
// between the samples around each end; ok is false when the samples do not
// cover [a, b] or a sample failed inside it (a JVM gone).
func (c *cpuSampler) between(a, b time.Time) (cpu float64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.samples) == 0 || c.samples[0].at.After(a) || c.samples[len(c.samples)-1].at.Before(b) {
		return 0, false
	}
	for _, t := range c.failedAt {
		if !t.Before(a) && !t.After(b) {
			return 0, false
		}
	}
	return cpuAt(c.samples, b) - cpuAt(c.samples, a), true
}

// settle waits until the broker's CPU rate is steady (two consecutive
// periods within 10%, or 2% of a CPU, of each other; at most limit) and
// returns that rate: the baseline the next run is charged above, so that a
// run does not pay for what the broker still does for the run before it
// (flushing and dispatching a backlog, pop bookkeeping).
func (c *cpuSampler) settle(ctx context.Context, period, limit time.Duration) (rate float64, waited time.Duration) {
	start := time.Now()
	prev := -1.0
	for {
		t0 := time.Now()
		select {
		case <-time.After(period):
		case <-ctx.Done():
			return max(prev, 0), time.Since(start)
		}
		cpu, ok := c.between(t0, time.Now().Add(-50*time.Millisecond))
		r := cpu / time.Since(t0).Seconds()
		if ok && prev >= 0 && math.Abs(r-prev) <= max(0.1*prev, 0.02) {
			return min(r, prev), time.Since(start)
		}
		if ok {
			prev = r
		}
		if time.Since(start) >= limit {
			return max(prev, 0), time.Since(start)
		}
	}
}

func cpuAt(s []cpuSample, t time.Time) float64 {
	if len(s) == 0 {
		return 0
	}
	i := sort.Search(len(s), func(i int) bool { return !s[i].at.Before(t) })
	switch {
	case i == 0:
		return s[0].cpu
	case i == len(s):
		return s[len(s)-1].cpu
	}
	lo, hi := s[i-1], s[i]
	span := hi.at.Sub(lo.at)
	if span <= 0 {
		return hi.cpu
	}
	frac := float64(t.Sub(lo.at)) / float64(span)
	return lo.cpu + frac*(hi.cpu-lo.cpu)
}

// drain reads topic's lite backlog through group with a Source and AckAsync
// until n distinct messages were received, waits for their acks, and returns
// how long that took. It is the broker's untimed warm-up (bench.warmBroker),
// not a measurement.
func (t *target) drain(ctx context.Context, topic, group string, n int) (time.Duration, error) {
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: t.connection(), FetchConcurrency: 4,
		Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}}}, rmqflow.BytesDecoder())
	if err != nil {
		return 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = src.Close(cctx)
	}()
	start := time.Now()
	if err := src.Start(ctx); err != nil {
		return 0, err
	}
	acker := src.Acker()
	seen := make(map[string]bool, n)
	futs := make([]*rmqflow.AckFuture, 0, n)
	for len(seen) < n {
		m, err := src.Next(ctx)
		if err != nil {
			return 0, fmt.Errorf("%d of %d received: %w", len(seen), n, err)
		}
		seen[m.Meta.MessageID] = true
		futs = append(futs, acker.AckAsync(ctx, m.Handle))
	}
	for _, f := range futs {
		<-f.Done()
		if err := f.Err(); err != nil {
			return 0, fmt.Errorf("ack: %w", err)
		}
	}
	return time.Since(start), nil
}
