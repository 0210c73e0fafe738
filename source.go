package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/backoff"
)

// Mode selects what a Source reads.
type Mode int

const (
	// ModeLite reads LITE main topics through wildcard lite groups. The
	// default.
	ModeLite Mode = iota
	// ModeSimple reads one normal topic with a TAG or SQL92 filter.
	ModeSimple
)

// LiteBinding is one LITE main topic and the wildcard group bound to it
// (group attributes lite.bind.topic=<Topic>, lite.sub.wildcard=true).
type LiteBinding struct {
	Topic string
	Group string
}

// SourceConfig configures a Source. Zero fields take the documented defaults.
type SourceConfig struct {
	Connection
	// Mode is ModeLite (default) or ModeSimple.
	Mode Mode
	// Lite lists the main topics to read in ModeLite; one or more.
	Lite []LiteBinding
	// Topic, Group and Filter are what ModeSimple reads. A zero Filter
	// matches everything (TAG "*").
	Topic  string
	Group  string
	Filter client.Filter
	// FetchConcurrency is the number of long-polling goroutines per binding
	// (fetch-concurrency). Default 1.
	FetchConcurrency int
	// AwaitDuration is the long-polling window of each ReceiveMessage
	// (await-duration); the broker clamps it to 5..20 s. Default 20 s.
	AwaitDuration time.Duration
	// InvisibleDuration is how long received messages stay invisible to the
	// group (invisible-duration). 10 s .. 12 h; default 60 s.
	InvisibleDuration time.Duration
	// MaxMessageNum is the batch size of each ReceiveMessage
	// (max-message-num), 1..32. Default 32. The queue holds
	// MaxMessageNum × FetchConcurrency messages per binding.
	MaxMessageNum int
	// RenewalAheadTime is how long before a queued message's invisibility
	// ends the source renews it (renewal-ahead-time). Default 5 s; must be
	// less than InvisibleDuration.
	RenewalAheadTime time.Duration
	// DisableQueueRenewal turns off the renewal of queue-resident messages
	// (on by default).
	DisableQueueRenewal bool
	// Leases, when enabled, keeps renewing emitted messages until they are
	// acked through this process (see LeaseConfig). Off by default.
	Leases LeaseConfig
	// ReleaseInvisibleDuration is the invisibility that Close gives messages
	// still in the queue, so that the group gets them back promptly. Zero
	// means 0 s: visible again at once.
	ReleaseInvisibleDuration time.Duration
}

func (c SourceConfig) withDefaults() SourceConfig {
	if c.FetchConcurrency == 0 {
		c.FetchConcurrency = DefaultFetchConcurrency
	}
	if c.AwaitDuration == 0 {
		c.AwaitDuration = DefaultAwaitDuration
	}
	if c.InvisibleDuration == 0 {
		c.InvisibleDuration = DefaultInvisibleDuration
	}
	if c.MaxMessageNum == 0 {
		c.MaxMessageNum = DefaultMaxMessageNum
	}
	if c.RenewalAheadTime == 0 {
		c.RenewalAheadTime = DefaultRenewalAheadTime
	}
	c.Leases = c.Leases.withDefaults()
	return c
}

func (c SourceConfig) validate() error {
	if err := c.Connection.validate(); err != nil {
		return err
	}
	switch c.Mode {
	case ModeLite:
		if len(c.Lite) == 0 {
			return optionError("Lite", "ModeLite needs at least one LiteBinding")
		}
		seen := map[string]bool{}
		for i, b := range c.Lite {
			if b.Topic == "" || b.Group == "" {
				return optionError("Lite", fmt.Sprintf("binding %d needs Topic and Group", i))
			}
			if seen[b.Group] {
				return optionError("Lite", "group "+b.Group+" is bound twice; a group binds one main topic")
			}
			seen[b.Group] = true
		}
	case ModeSimple:
		if c.Topic == "" {
			return optionError("Topic", "required in ModeSimple")
		}
		if c.Group == "" {
			return optionError("Group", "required in ModeSimple")
		}
	default:
		return optionError("Mode", fmt.Sprintf("unknown mode %d", c.Mode))
	}
	switch {
	case c.FetchConcurrency < 1:
		return optionError("FetchConcurrency", "must be at least 1")
	case c.AwaitDuration < 5*time.Second || c.AwaitDuration > 20*time.Second:
		return optionError("AwaitDuration", "must be within 5s..20s (the broker's long-polling window)")
	case c.InvisibleDuration < MinInvisibleDuration || c.InvisibleDuration > MaxInvisibleDuration:
		return optionError("InvisibleDuration", "must be within 10s..12h")
	case c.MaxMessageNum < 1 || c.MaxMessageNum > client.MaxBatchSize:
		return optionError("MaxMessageNum", "must be within 1..32")
	case c.RenewalAheadTime < 0 || c.RenewalAheadTime >= c.InvisibleDuration:
		return optionError("RenewalAheadTime", "must be positive and less than InvisibleDuration")
	case c.ReleaseInvisibleDuration < 0:
		return optionError("ReleaseInvisibleDuration", "must not be negative")
	}
	return c.Leases.validate()
}

// ErrSourceClosed is returned by Next once the source is closed (or drained
// and empty).
var ErrSourceClosed = errors.New("rmqflow: source closed")

// Source receives messages and never acks them: every message it emits
// carries a ReceiptHandle, and whoever finishes the work acks it (Acker,
// AckPool). Per binding it runs FetchConcurrency long-polling goroutines under
// one consumer identity and keeps what they fetch in a bounded queue; when the
// queue is full they stop receiving (backpressure). Queue-resident messages
// are renewed before their invisibility ends.
//
// Use Start, then Next (or Messages) from any number of goroutines, then Close
// (release what is queued) or Drain (emit what is queued, then stop).
type Source[T any] struct {
	cfg     SourceConfig
	dec     Decoder[T]
	log     loggerLike
	metrics *metrics

	binds  []*binding
	q      *queue
	pool   *AckPool
	acker  *Acker
	leases *leaseTable // nil unless Leases.Enabled
	clk    clock

	mu       sync.Mutex
	started  bool
	closed   bool
	stop     context.CancelFunc
	wg       sync.WaitGroup
	draining bool
}

// binding is one (main topic, group) pair with its own consumer identity.
type binding struct {
	topic, group string
	lite         bool
	filter       client.Filter
	c            *client.Client
}

// NewSource validates cfg and builds a source; nothing connects until Start.
func NewSource[T any](cfg SourceConfig, dec Decoder[T]) (*Source[T], error) {
	if dec == nil {
		return nil, optionError("Decoder", "required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Source[T]{cfg: cfg, dec: dec, log: cfg.logger(), clk: wallClock}
	s.metrics = newMetrics(cfg.Meter)
	perBinding := cfg.MaxMessageNum * cfg.FetchConcurrency
	if cfg.Mode == ModeLite {
		for _, b := range cfg.Lite {
			s.binds = append(s.binds, &binding{topic: b.Topic, group: b.Group, lite: true})
		}
	} else {
		s.binds = append(s.binds, &binding{topic: cfg.Topic, group: cfg.Group, filter: cfg.Filter})
	}
	s.q = newQueue(perBinding * len(s.binds))
	s.metrics.observeQueue(s.q.len)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: cfg.Connection})
	if err != nil {
		return nil, err
	}
	s.pool = pool
	s.acker = NewAcker(pool)
	if cfg.Leases.Enabled {
		s.leases = newLeaseTable(cfg.Leases, cfg.InvisibleDuration, cfg.RenewalAheadTime, pool.s, s.log, s.metrics)
		pool.s.addTable(s.leases) // any ack of a leased delivery through the pool ends its lease
	}
	return s, nil
}

// Start opens one consumer session per binding (a lite source keeps its
// wildcard subscription fresh) and starts the fetch and renewal goroutines.
// ctx bounds the start only; stop the source with Close or Drain. Close the
// source even when Start fails: it holds a reference to the ack pool.
func (s *Source[T]) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("rmqflow: source already started")
	}
	s.started = true
	s.mu.Unlock()
	for _, b := range s.binds {
		c, err := client.New(s.cfg.clientConfig())
		if err != nil {
			s.closeClients(ctx)
			return err
		}
		b.c = c
		sc := client.SessionConfig{Type: client.SimpleConsumer, Group: b.group,
			Subscriptions: []client.Subscription{{Topic: b.topic, Filter: b.filter}}, LongPollingTimeout: s.cfg.AwaitDuration}
		if b.lite {
			sc.Type, sc.LiteWildcard = client.LiteSimpleConsumer, true
		}
		if _, err := c.OpenSession(ctx, sc); err != nil {
			s.closeClients(ctx)
			return fmt.Errorf("rmqflow: source %s/%s: %w", b.topic, b.group, err)
		}
	}
	leases := s.leases
	runCtx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	for _, b := range s.binds {
		for i := 0; i < s.cfg.FetchConcurrency; i++ {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.fetch(runCtx, b)
			}()
		}
	}
	if !s.cfg.DisableQueueRenewal {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.renewQueued(runCtx)
		}()
	}
	if leases != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			leases.run(runCtx)
		}()
	}
	return nil
}

// Acker returns the Acker over this source's ack pool; it behaves as any
// NewAcker over a holder of that pool. It works from NewSource on; Close
// waits for the calls already made through it, and its acks keep working
// after Close for as long as another holder keeps the pool (AcquireAckPool
// with the same Connection).
func (s *Source[T]) Acker() *Acker { return s.acker }

// fetch is one long-polling goroutine of one binding.
func (s *Source[T]) fetch(ctx context.Context, b *binding) {
	bo := backoff.New(100*time.Millisecond, 30*time.Second)
	req := client.ReceiveRequest{
		Group: b.group, Topic: b.topic, Filter: b.filter, Lite: b.lite,
		BatchSize: s.cfg.MaxMessageNum, InvisibleDuration: s.cfg.InvisibleDuration,
		LongPollingTimeout: s.cfg.AwaitDuration,
	}
	for {
		// Reserve room first and ask for no more: a full queue stops
		// receiving.
		room := s.q.reserve(ctx, s.cfg.MaxMessageNum)
		if room == 0 {
			return
		}
		req.BatchSize = room
		t0, polledAt := time.Now(), s.clk.now()
		msgs, err := b.c.Receive(ctx, req)
		s.metrics.receiveLatency(ctx, time.Since(t0))
		s.q.put(s.entries(b, msgs, polledAt), room)
		s.metrics.fetched(ctx, len(msgs), b)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := bo.Next()
			s.log.Warn("rmqflow: receive failed; backing off", "topic", b.topic, "group", b.group, "backoff", d, "err", err)
			if !backoff.Sleep(ctx, d) {
				return
			}
			continue
		}
		bo.Reset()
	}
}

func (s *Source[T]) entries(b *binding, msgs []*client.ReceivedMessage, polledAt time.Time) []*entry {
	out := make([]*entry, len(msgs))
	for i, m := range msgs {
		inv := m.InvisibleDuration
		if inv == 0 {
			inv = s.cfg.InvisibleDuration
		}
		// The poll was sent at polledAt: the broker's clock started no earlier.
		out[i] = &entry{msg: m, bind: b, handle: m.ReceiptHandle, visibleAt: polledAt.Add(inv), receivedAt: s.clk.now()}
	}
	return out
}

// Next returns the next message, blocking until one is queued, ctx ends, or
// the source is closed (ErrSourceClosed). Safe for concurrent use.
func (s *Source[T]) Next(ctx context.Context) (*AckableMessage[T], error) {
	e, err := s.q.take(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock() // waits out a renewal of this entry in progress
	handle := e.handle
	e.mu.Unlock()
	m := &AckableMessage[T]{
		Meta: metadataOf(e.msg, e.receivedAt),
		Handle: ReceiptHandle{
			Endpoints: s.cfg.Endpoints, Namespace: s.cfg.Namespace, Group: e.bind.group,
			Topic: e.msg.Topic, LiteTopic: e.msg.LiteTopic, MessageID: e.msg.MessageID,
			Handle: handle, DeliveryAttempt: e.msg.DeliveryAttempt,
		},
	}
	m.Value, m.Err = s.dec.Decode(e.msg.Body, &m.Meta)
	if m.Err != nil {
		s.metrics.decodeFailed(ctx)
	}
	if s.leases != nil && m.Err == nil { // a message that failed to decode is not leased
		s.leases.add(m.Handle, e.visibleAt)
		m.Handle.owner = s.leases // encoding the handle hands the delivery off
	}
	s.metrics.emitted(ctx)
	return m, nil
}

// Messages iterates over Next until ctx ends or the source closes; a Next
// error other than ErrSourceClosed is yielded once, then the iteration ends.
func (s *Source[T]) Messages(ctx context.Context) iter.Seq2[*AckableMessage[T], error] {
	return func(yield func(*AckableMessage[T], error) bool) {
		for {
			m, err := s.Next(ctx)
			if errors.Is(err, ErrSourceClosed) {
				return
			}
			if !yield(m, err) || err != nil {
				return
			}
		}
	}
}

// QueueLen returns the number of messages fetched but not yet emitted.
func (s *Source[T]) QueueLen() int { return s.q.len() }

// Drain stops receiving; Next keeps returning the queued messages and then
// ErrSourceClosed. It returns at once; call Close when done.
func (s *Source[T]) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.closed || s.draining {
		return
	}
	s.draining = true
	s.stop()
	s.q.closeWhenEmpty()
}

// Close stops receiving, waits for the fetch goroutines, gives every message
// still queued back to the group (ChangeInvisibleDuration to
// ReleaseInvisibleDuration), stops lease renewal, and closes the consumer
// sessions. Messages already emitted stay valid: ack them through any Acker
// or AckPool. ctx bounds the release and the session shutdown.
func (s *Source[T]) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	if s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
	if !started {
		return s.releasePool(ctx)
	}
	s.wg.Wait()
	left := s.q.close()
	var errs []error
	if err := s.release(ctx, left); err != nil {
		errs = append(errs, err)
	}
	s.closeClients(ctx)
	if err := s.releasePool(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// releasePool waits, bounded by ctx, for the acks and changes already
// submitted through the source's Acker, then releases the source's reference
// to the ack pool.
func (s *Source[T]) releasePool(ctx context.Context) error {
	var errs []error
	if err := s.acker.pending.wait(ctx); err != nil {
		errs = append(errs, fmt.Errorf("rmqflow: acks still in progress at close: %w", err))
	}
	if s.leases != nil {
		s.pool.s.removeTable(s.leases)
	}
	if err := s.pool.Release(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// release gives queued messages back to the group.
func (s *Source[T]) release(ctx context.Context, left []*entry) error {
	var errs []error
	for _, e := range left {
		_, err := e.bind.c.ChangeInvisibleDuration(ctx, client.ChangeInvisibleRequest{
			Group: e.bind.group, Topic: e.msg.Topic, MessageID: e.msg.MessageID, ReceiptHandle: e.handle,
			LiteTopic: e.msg.LiteTopic, InvisibleDuration: s.cfg.ReleaseInvisibleDuration,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", e.msg.MessageID, err))
		}
	}
	if len(errs) > 0 {
		s.log.Warn("rmqflow: some queued messages were not released; they come back when their invisibility ends", "count", len(errs))
	}
	return errors.Join(errs...)
}

func (s *Source[T]) closeClients(ctx context.Context) {
	for _, b := range s.binds {
		if b.c != nil {
			_ = b.c.Close(ctx)
		}
	}
}

// renewQueued renews queue-resident messages RenewalAheadTime before their
// invisibility ends, swapping in the handle the broker returns.
func (s *Source[T]) renewQueued(ctx context.Context) {
	tick := make(chan struct{}, 1)
	for {
		stop := s.clk.afterFunc(s.renewTick(), func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			stop()
			return
		case <-tick:
		}
		due := s.q.due(s.clk.now().Add(s.cfg.RenewalAheadTime))
		for _, e := range due {
			s.renewEntry(ctx, e)
		}
	}
}

func (s *Source[T]) renewTick() time.Duration {
	d := s.cfg.RenewalAheadTime / 4
	return min(max(d, 50*time.Millisecond), time.Second)
}

func (s *Source[T]) renewEntry(ctx context.Context, e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.taken {
		return // emitted meanwhile: leases (if on) take over
	}
	t0 := s.clk.now()
	h, err := e.bind.c.ChangeInvisibleDuration(ctx, client.ChangeInvisibleRequest{
		Group: e.bind.group, Topic: e.msg.Topic, MessageID: e.msg.MessageID, ReceiptHandle: e.handle,
		LiteTopic: e.msg.LiteTopic, InvisibleDuration: s.cfg.InvisibleDuration,
	})
	s.metrics.renewed(ctx, "queue", err)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("rmqflow: renewing a queued message failed", "message_id", e.msg.MessageID, "err", err)
		}
		return
	}
	e.handle = h
	e.visibleAt = t0.Add(s.cfg.InvisibleDuration)
}

// clock is the source's time: the wall clock, or a test's manual clock (the
// queue's invisibility estimates, renewal ticks and ages follow it; RPC
// deadlines and backoffs stay in real time).
type clock struct {
	now       func() time.Time
	afterFunc func(d time.Duration, f func()) (stop func() bool)
}

var wallClock = clock{
	now:       time.Now,
	afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
}
