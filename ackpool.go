package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// Defaults of AckPoolConfig.
const (
	DefaultAckMaxBatch    = 64
	DefaultAckLinger      = 5 * time.Millisecond
	DefaultAckMaxAttempts = 3
)

// CredentialsResolver returns the credentials for an access point a handle
// names. It lets one pool ack handles from several clusters without any
// credential travelling with the handles.
type CredentialsResolver func(endpoints string) (client.Credentials, error)

// AckPoolConfig configures an AckPool.
type AckPoolConfig struct {
	// Connection supplies TLS, timeout, logging, metrics and, unless
	// Credentials is set, the credentials for every endpoint. Its Endpoints
	// may be empty: handles carry their own.
	Connection
	// Credentials resolves credentials per endpoint; nil means
	// Connection.Credentials for all.
	Credentials CredentialsResolver
	// MaxBatch caps the entries of one AckMessage RPC. Default 64.
	MaxBatch int
	// Linger is how long an ack waits for others to share its RPC.
	// Default 5 ms.
	Linger time.Duration
	// MaxAttempts bounds the tries of one ack RPC that fails as a whole with a
	// retriable error (throttling, timeouts, transport). Default 3.
	MaxAttempts int
}

func (c AckPoolConfig) withDefaults() AckPoolConfig {
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultAckMaxBatch
	}
	if c.Linger == 0 {
		c.Linger = DefaultAckLinger
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultAckMaxAttempts
	}
	return c
}

func (c AckPoolConfig) validate() error {
	switch {
	case c.MaxBatch < 0:
		return optionError("MaxBatch", "must not be negative")
	case c.Linger < 0:
		return optionError("Linger", "must not be negative")
	case c.MaxAttempts < 0:
		return optionError("MaxAttempts", "must not be negative")
	case c.RequestTimeout < 0:
		return optionError("RequestTimeout", "must not be negative")
	}
	return nil
}

// ErrPoolReleased is returned by acks on a pool whose last reference was
// released.
var ErrPoolReleased = errors.New("rmqflow: ack pool released")

// AckPool acks and changes the invisibility of messages by ReceiptHandle. It
// is process-wide and reference-counted: AcquireAckPool with an equal
// configuration returns the same pool, and the last Release closes it. Each
// handle is routed by its endpoints and namespace to one lazily created ack
// client, and acks for one group and topic are coalesced into multi-entry
// AckMessage RPCs; every caller still gets the result of its own entry.
//
// Ack clients never join a consumer group's dispatch: they ack without a
// session, and open a producer session (no group) the first time they change
// an invisible duration, which the broker requires (docs/broker-semantics.md,
// scenario j).
type AckPool struct {
	key     string
	cfg     AckPoolConfig
	metrics *metrics
	stats   poolStats

	mu       sync.Mutex
	refs     int
	closed   bool
	clients  map[string]*ackClient // endpoints|namespace -> client
	batchers map[batchKey]*batcher
	wg       sync.WaitGroup
}

var (
	poolsMu sync.Mutex
	pools   = map[string]*AckPool{}
)

// AcquireAckPool returns the process-wide pool for cfg, creating it on first
// use. Release it when done.
func AcquireAckPool(cfg AckPoolConfig) (*AckPool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Endpoints != "" {
		if err := cfg.Connection.validate(); err != nil {
			return nil, err
		}
	}
	cfg = cfg.withDefaults()
	key := fmt.Sprintf("%s|%d|%v|%d|%p", cfg.Connection.key(), cfg.MaxBatch, cfg.Linger, cfg.MaxAttempts, cfg.Credentials)
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if p, ok := pools[key]; ok {
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
		return p, nil
	}
	p := &AckPool{key: key, cfg: cfg, refs: 1, metrics: newMetrics(cfg.Meter),
		clients: map[string]*ackClient{}, batchers: map[batchKey]*batcher{}}
	pools[key] = p
	return p, nil
}

// Release drops one reference; the last one flushes pending acks (bounded by
// ctx), stops the batchers and closes the ack clients.
func (p *AckPool) Release(ctx context.Context) {
	poolsMu.Lock()
	p.mu.Lock()
	if p.refs == 0 {
		p.mu.Unlock()
		poolsMu.Unlock()
		return // released more often than acquired: nothing left to do
	}
	p.refs--
	last := p.refs == 0
	if last {
		p.closed = true
		delete(pools, p.key)
	}
	batchers := p.batchers
	clients := p.clients
	p.mu.Unlock()
	poolsMu.Unlock()
	if !last {
		return
	}
	for _, b := range batchers {
		b.close()
	}
	p.wg.Wait()
	for _, c := range clients {
		_ = c.c.Close(ctx)
	}
}

// Ack acks h and waits for its result. A nil error means the broker accepted
// the ack. An error satisfying errors.Is(err, client.ErrInvalidReceiptHandle)
// means the handle had expired: the message will be (or was) delivered
// again; count it and move on, it is not a pipeline failure.
func (p *AckPool) Ack(ctx context.Context, h ReceiptHandle) error {
	f := p.AckAsync(ctx, h)
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AckFuture is the pending result of AckAsync.
type AckFuture struct {
	done chan struct{}
	err  error
}

// Done is closed when the result is known.
func (f *AckFuture) Done() <-chan struct{} { return f.done }

// Err returns the result; valid after Done is closed.
func (f *AckFuture) Err() error { return f.err }

func (f *AckFuture) complete(err error) {
	f.err = err
	close(f.done)
}

// AckAsync queues an ack of h and returns at once. ctx is used only to
// create the ack client when this is the first handle for its endpoints.
func (p *AckPool) AckAsync(ctx context.Context, h ReceiptHandle) *AckFuture {
	f := &AckFuture{done: make(chan struct{})}
	if err := h.Validate(); err != nil {
		f.complete(err)
		return f
	}
	b, err := p.batcher(h)
	if err != nil {
		f.complete(err)
		return f
	}
	if !b.submit(ackReq{h: h, f: f}) {
		f.complete(ErrPoolReleased)
	}
	return f
}

// ChangeInvisibleDuration makes the delivery invisible for d from now and
// returns the handle with the broker's new receipt handle.
func (p *AckPool) ChangeInvisibleDuration(ctx context.Context, h ReceiptHandle, d time.Duration) (ReceiptHandle, error) {
	if err := h.Validate(); err != nil {
		return h, err
	}
	ac, err := p.client(h.Endpoints, h.Namespace)
	if err != nil {
		return h, err
	}
	if err := ac.ensureSession(ctx, h.Topic); err != nil {
		return h, err
	}
	p.stats.cid.Add(1)
	nh, err := ac.c.ChangeInvisibleDuration(ctx, client.ChangeInvisibleRequest{
		Group: h.Group, Topic: h.Topic, MessageID: h.MessageID, ReceiptHandle: h.Handle,
		LiteTopic: h.LiteTopic, InvisibleDuration: d,
	})
	if err != nil {
		return h, err
	}
	h.Handle = nh
	return h, nil
}

// AckPoolStats counts what a pool did since it was created.
type AckPoolStats struct {
	// Acks is the number of acks completed (any outcome).
	Acks int64
	// AckRPCs is the number of AckMessage RPCs sent, retries included.
	AckRPCs int64
	// InvalidHandles is the number of acks the broker refused as expired.
	InvalidHandles int64
	// ChangeInvisible is the number of ChangeInvisibleDuration RPCs.
	ChangeInvisible int64
}

type poolStats struct {
	acks, rpcs, invalid, cid atomic.Int64
}

// Stats returns the pool's counters.
func (p *AckPool) Stats() AckPoolStats {
	return AckPoolStats{Acks: p.stats.acks.Load(), AckRPCs: p.stats.rpcs.Load(),
		InvalidHandles: p.stats.invalid.Load(), ChangeInvisible: p.stats.cid.Load()}
}

// ackClient is one connection of the pool.
type ackClient struct {
	c           *client.Client
	sessionOnce sync.Mutex
	session     bool
}

// ensureSession opens the producer session ChangeInvisibleDuration needs. The
// proxy registers the client's channel only for a producer that names a
// topic, so it names the topic of the first handle; one channel serves every
// topic and group.
func (a *ackClient) ensureSession(ctx context.Context, topic string) error {
	a.sessionOnce.Lock()
	defer a.sessionOnce.Unlock()
	if a.session {
		return nil
	}
	if _, err := a.c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{topic}}); err != nil {
		return err
	}
	a.session = true
	return nil
}

func (p *AckPool) client(endpoints, namespace string) (*ackClient, error) {
	k := endpoints + "|" + namespace
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolReleased
	}
	if c, ok := p.clients[k]; ok {
		return c, nil
	}
	cc := p.cfg.clientConfig()
	cc.Endpoints, cc.Namespace = endpoints, namespace
	if p.cfg.Credentials != nil {
		cr, err := p.cfg.Credentials(endpoints)
		if err != nil {
			return nil, fmt.Errorf("rmqflow: credentials for %s: %w", endpoints, err)
		}
		cc.Credentials = cr
	}
	c, err := client.New(cc)
	if err != nil {
		return nil, err
	}
	ac := &ackClient{c: c}
	p.clients[k] = ac
	return ac, nil
}

type batchKey struct{ endpoints, namespace, group, topic string }

func (p *AckPool) batcher(h ReceiptHandle) (*batcher, error) {
	k := batchKey{h.Endpoints, h.Namespace, h.Group, h.Topic}
	p.mu.Lock()
	if b, ok := p.batchers[k]; ok {
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	ac, err := p.client(h.Endpoints, h.Namespace)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolReleased
	}
	if b, ok := p.batchers[k]; ok {
		return b, nil
	}
	b := &batcher{key: k, c: ac.c, cfg: p.cfg, metrics: p.metrics, stats: &p.stats, in: make(chan ackReq, p.cfg.MaxBatch*4)}
	p.batchers[k] = b
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		b.run()
	}()
	return b, nil
}
