package rmqio

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
)

// Beam builds DoFn instances per bundle plan and never tears them down on
// portable runners (Teardown does not run there), while a RocketMQ consumer
// should outlive a bundle: it keeps renewing the messages it fetched between
// bundles. So the readers of one (configuration, shard) share one started
// source per worker process. A source is closed — giving back what it had
// fetched and not emitted — when its read ends (StopAfterIdle, a drain), when
// it fails, and when no bundle used it for IdleClose (its restriction went to
// another worker, or the job is gone).
var sources = struct {
	mu sync.Mutex
	m  map[string]*sharedSource
}{m: map[string]*sharedSource{}}

// DefaultIdleClose is how long a worker keeps a reader's source that no
// bundle uses.
const DefaultIdleClose = time.Minute

// idleTimer is a source's pending idle close.
type idleTimer interface{ Stop() bool }

// afterFunc arms an idle close: f runs after d. Tests replace it, to be the
// clock.
var afterFunc = func(d time.Duration, f func()) idleTimer { return time.AfterFunc(d, f) }

type sharedSource struct {
	key   string
	src   *rmqflow.Source[[]byte]
	mu    sync.Mutex // held by the one bundle reading from it
	idle  idleTimer
	after time.Duration
	// lastMessage is when the source last gave a message, started, or
	// served a read's first bundle: StopAfterIdle counts from it. Guarded
	// by mu.
	lastMessage time.Time
}

// sourceKey is the identity of a reader's source.
func sourceKey(cfg ReadConfig, shard int) string {
	b, _ := json.Marshal(cfg) // plain data: cannot fail
	return fmt.Sprintf("%d/%s", shard, b)
}

// acquireSource returns the started source of (cfg, shard), starting it on
// first use, and holds it for one bundle: call done when the bundle ends.
func acquireSource(ctx context.Context, cfg ReadConfig, shard int) (*sharedSource, error) {
	k := sourceKey(cfg, shard)
	sources.mu.Lock()
	s := sources.m[k]
	if s == nil {
		sc, err := cfg.sourceConfig()
		if err != nil {
			sources.mu.Unlock()
			return nil, err
		}
		src, err := rmqflow.NewSource(sc, rmqflow.BytesDecoder())
		if err != nil {
			sources.mu.Unlock()
			return nil, err
		}
		s = &sharedSource{key: k, src: src, after: cfg.IdleClose, lastMessage: time.Now()}
		if s.after == 0 {
			s.after = DefaultIdleClose
		}
		sources.m[k] = s
		s.mu.Lock() // started below, outside the registry's lock
		sources.mu.Unlock()
		if err := src.Start(ctx); err != nil {
			s.retireLocked()
			return nil, refused(cfg.Connection, cfg.Connection.Endpoints, fmt.Errorf("rmqio: starting the reader of shard %d: %w", shard, err))
		}
		return s, nil
	}
	sources.mu.Unlock()
	s.mu.Lock()
	if s.idle != nil {
		s.idle.Stop()
	}
	if !s.current() {
		// Retired while this bundle waited for it.
		s.mu.Unlock()
		return acquireSource(ctx, cfg, shard)
	}
	return s, nil
}

// current reports whether s is still the registered source of its key.
func (s *sharedSource) current() bool {
	sources.mu.Lock()
	defer sources.mu.Unlock()
	return sources.m[s.key] == s
}

// done ends a bundle's hold; the source closes if no bundle takes it within
// its idle time.
func (s *sharedSource) done() {
	s.idle = afterFunc(s.after, func() {
		if !s.mu.TryLock() {
			return // a bundle has it again
		}
		s.retireLocked()
	})
	s.mu.Unlock()
}

// retireLocked closes s (its caller holds s.mu) and forgets it: what it
// fetched and had not emitted goes back to the group at once.
func (s *sharedSource) retireLocked() {
	sources.mu.Lock()
	if sources.m[s.key] == s {
		delete(sources.m, s.key)
	}
	sources.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.src.Close(ctx)
	s.mu.Unlock()
}

// retireKey closes the source of key, if this worker has one, once no
// bundle holds it.
func retireKey(key string) {
	sources.mu.Lock()
	s := sources.m[key]
	sources.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.idle != nil {
		s.idle.Stop()
	}
	s.retireLocked()
}

// closeSources closes every shared source of this process (tests).
func closeSources(ctx context.Context) error {
	sources.mu.Lock()
	all := make([]*sharedSource, 0, len(sources.m))
	for k, s := range sources.m {
		all = append(all, s)
		delete(sources.m, k)
	}
	sources.mu.Unlock()
	var first error
	for _, s := range all {
		if err := s.src.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// closeShared closes everything this process shares between bundles — the
// readers' sources, Write's sinks, the ack pools and throttles — as the end
// of a worker process would (tests).
func closeShared(ctx context.Context) error {
	first := closeSources(ctx)
	sinks.Lock()
	for k, s := range sinks.m {
		if err := s.Close(ctx); err != nil && first == nil {
			first = err
		}
		delete(sinks.m, k)
	}
	sinks.Unlock()
	throttles.mu.Lock()
	clear(throttles.m)
	throttles.mu.Unlock()
	pools.Lock()
	for k, p := range pools.m {
		if err := p.Release(ctx); err != nil && first == nil {
			first = err
		}
		delete(pools.m, k)
	}
	pools.Unlock()
	return first
}
