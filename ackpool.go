package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// Defaults of AckPoolConfig.
const (
	DefaultAckMaxBatch    = 64
	DefaultAckLinger      = time.Duration(0) // no linger: batches form while MaxInFlight RPCs are out
	DefaultAckMaxAttempts = 3
	DefaultAckMaxInFlight = 4
	// DefaultAckIdleTimeout is AckPoolConfig.IdleTimeout's default.
	DefaultAckIdleTimeout = time.Minute
	// DefaultAckMaxQueues is AckPoolConfig.MaxQueues's default.
	DefaultAckMaxQueues = 1024
	// MaxAckMaxBatch and MaxAckMaxInFlight bound AckPoolConfig's MaxBatch
	// and MaxInFlight: a pool queues MaxBatch×4 acks per group and topic.
	MaxAckMaxBatch    = 1024
	MaxAckMaxInFlight = 256
)

// CredentialsResolver returns the credentials for an access point a handle
// names. It lets one pool ack handles from several clusters without any
// credential travelling with the handles.
type CredentialsResolver func(endpoints string) (client.Credentials, error)

// AckPoolConfig configures an AckPool.
type AckPoolConfig struct {
	// Connection supplies TLS, timeout, logging, metrics and, unless
	// Credentials is set, the credentials for every endpoint. Its Endpoints
	// are the access points the pool acks to unless AllowedEndpoints is set.
	Connection
	// Name identifies the pool. Two AcquireAckPool calls share a pool only
	// when their Name and every other setting that changes what goes on the
	// wire are equal. Required when Credentials is set: a resolver's identity
	// cannot be compared, so the name stands for it — give each tenant (each
	// set of credentials) its own name.
	Name string
	// Credentials resolves credentials per access point: it is called with
	// the AllowedEndpoints entry (or Connection.Endpoints), as configured,
	// that a handle's endpoints belong to. Nil means Connection.Credentials
	// for all. Requires Name.
	Credentials CredentialsResolver
	// AllowedEndpoints lists the access points ("host:port" or
	// "host:port;host:port" each, one per cluster) the pool acks to, for a
	// pool that serves several clusters. Empty means Connection.Endpoints
	// alone. One of the two must be set. A handle naming any other address
	// (or, with a Credentials resolver, addresses of two entries) fails with
	// ErrEndpointNotAllowed, before any RPC and without creating a client: a
	// pool never signs a request for a host it was not configured for, nor
	// with another entry's credentials. With a resolver, no address may be
	// in two entries (an *OptionError).
	AllowedEndpoints []string
	// MaxBatch caps the entries of one AckMessage RPC. Default 64, at most
	// MaxAckMaxBatch.
	MaxBatch int
	// Linger is how long an ack waits for others to share its RPC even
	// when an RPC slot is free. Default 0: an ack leaves at once while
	// fewer than MaxInFlight RPCs are out, and acks queue up (and then
	// share one RPC) only while all are out, so batches form under load
	// and an idle ack costs one RPC's latency. A positive Linger trades
	// that latency for fewer RPCs at low rates.
	Linger time.Duration
	// MaxAttempts bounds the tries of one ack RPC that fails as a whole with a
	// retriable error (throttling, timeouts, transport). Default 3.
	MaxAttempts int
	// MaxInFlight caps the AckMessage RPCs of one group and topic on the
	// wire at once. Default 4, at most MaxAckMaxInFlight. While all are out, the next batch fills in
	// the queue and leaves when one is answered; every ack still gets its
	// own entry's result, in whatever order the RPCs complete.
	MaxInFlight int
	// IdleTimeout is how long an ack queue (one per endpoints, namespace,
	// group and topic) and a client (one per endpoints and namespace) may go
	// unused before the pool closes them; the next ack or change that needs
	// one opens it again. Handles come from anywhere (another process may
	// encode them), so without it every topic, group and namespace a handle
	// ever named would keep a goroutine, a queue and possibly a connection
	// for the life of the pool. Closing a queue first sends what it holds; an
	// ack submitted while it closes goes to its successor. More than 16 idle
	// clients are closed at once, the longest idle first. Default 1 min;
	// Forever: nothing closes for idleness (MaxQueues still applies).
	IdleTimeout time.Duration
	// MaxQueues caps the ack queues (one per endpoints, namespace, group and
	// topic) a pool keeps open; each holds a goroutine and room for
	// MaxBatch × 4 acks. Opening one more closes the least recently used,
	// after it has sent what it holds. Default 1,024.
	MaxQueues int
}

func (c AckPoolConfig) withDefaults() AckPoolConfig {
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultAckMaxBatch
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultAckMaxAttempts
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultAckMaxInFlight
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultAckIdleTimeout
	}
	if c.MaxQueues == 0 {
		c.MaxQueues = DefaultAckMaxQueues
	}
	return c
}

// Validate reports what AcquireAckPool would refuse in c, without
// acquiring a pool.
func (c AckPoolConfig) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.Endpoints != "" {
		if err := c.Connection.validate(); err != nil {
			return err
		}
	}
	_, err := c.allowed()
	return err
}

func (c AckPoolConfig) validate() error {
	switch {
	case c.MaxBatch < 0 || c.MaxBatch > MaxAckMaxBatch:
		return optionError("MaxBatch", fmt.Sprintf("must be 0 (default) to %d", MaxAckMaxBatch))
	case c.Linger < 0:
		return optionError("Linger", "must not be negative")
	case c.MaxAttempts < 0:
		return optionError("MaxAttempts", "must not be negative")
	case c.MaxInFlight < 0 || c.MaxInFlight > MaxAckMaxInFlight:
		return optionError("MaxInFlight", fmt.Sprintf("must be 0 (default) to %d", MaxAckMaxInFlight))
	case c.IdleTimeout < 0:
		return optionError("IdleTimeout", "must not be negative (Forever: never close idle queues and clients)")
	case c.MaxQueues < 0:
		return optionError("MaxQueues", "must not be negative")
	case c.RequestTimeout < 0:
		return optionError("RequestTimeout", "must not be negative")
	case c.Connection.Credentials.AccessKey == "" && c.Connection.Credentials.AccessSecret != "":
		return optionError("Credentials", "AccessSecret is set but AccessKey is empty")
	case c.Credentials != nil && strings.TrimSpace(c.Name) == "":
		return optionError("Name", "required when Credentials is set: it tells pools with different credentials apart")
	}
	return nil
}

// allowEntry is one access point a pool acks to (an AllowedEndpoints entry,
// or Connection.Endpoints): one cluster.
type allowEntry struct {
	raw   string          // as configured (trimmed): what a CredentialsResolver is asked for
	addrs map[string]bool // its addresses, in Address.String form
}

// allowed returns the access points the pool acks to.
func (c AckPoolConfig) allowed() ([]allowEntry, error) {
	lists := c.AllowedEndpoints
	if len(lists) == 0 {
		if c.Endpoints == "" {
			return nil, optionError("AllowedEndpoints", "set Connection.Endpoints or AllowedEndpoints: a pool acks only to endpoints it was configured for")
		}
		lists = []string{c.Endpoints}
	}
	out := make([]allowEntry, 0, len(lists))
	owner := map[string]string{} // address -> the entry that has it
	for _, l := range lists {
		eps, err := client.ParseEndpoints(l)
		if err != nil {
			return nil, optionError("AllowedEndpoints", err.Error())
		}
		e := allowEntry{raw: strings.TrimSpace(l), addrs: map[string]bool{}}
		for _, a := range eps {
			addr := a.String()
			// With a resolver an address's entry decides its credentials:
			// in two entries, it would get whichever came first.
			if o, ok := owner[addr]; ok && o != e.raw && c.Credentials != nil {
				return nil, optionError("AllowedEndpoints", fmt.Sprintf("%s is in two entries (%q and %q): with a Credentials resolver each address must belong to one entry, whose credentials it is acked with", addr, o, e.raw))
			}
			owner[addr] = e.raw
			e.addrs[addr] = true
		}
		out = append(out, e)
	}
	return out, nil
}

// allowKey renders entries for a pool's key.
func allowKey(entries []allowEntry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		addrs := slices.Sorted(maps.Keys(e.addrs))
		parts[i] = e.raw + "=" + strings.Join(addrs, ";")
	}
	slices.Sort(parts)
	return strings.Join(parts, "|")
}

var (
	// ErrPoolReleased is returned by acks on a pool whose last reference was
	// released.
	ErrPoolReleased = errors.New("rmqflow: ack pool released")
	// ErrAckNotSent is wrapped, with the context's error, by an ack whose
	// context ended before the ack went out (waiting for room in the batch
	// queue, for a lease renewal of the same delivery to finish, or in the
	// queue). Nothing was sent: ack again, or let the message come back when
	// its invisibility ends (a lease of the delivery has ended all the same).
	ErrAckNotSent = errors.New("rmqflow: ack not sent")
	// ErrAckOutcomeUnknown is wrapped, with the context's error, by an ack
	// whose RPC was sent but whose answer did not come before its context (or
	// the pool's Release) ended. The broker may or may not have acked: the
	// message may be delivered again, and a redelivery is the only sign.
	ErrAckOutcomeUnknown = errors.New("rmqflow: ack sent, outcome unknown")
	// ErrEndpointNotAllowed is returned for a handle naming an address the
	// pool was not configured for (AckPoolConfig.AllowedEndpoints): nothing
	// is sent.
	ErrEndpointNotAllowed = errors.New("rmqflow: the handle names an endpoint this ack pool is not configured for")
)

func notSent(err error) error { return fmt.Errorf("%w: %w", ErrAckNotSent, err) }

func outcomeUnknown(err error) error { return fmt.Errorf("%w: %w", ErrAckOutcomeUnknown, err) }

// AckPool is one holder's reference to a process-wide pool that acks and
// changes the invisibility of messages by ReceiptHandle. AcquireAckPool with
// an equal configuration shares the underlying pool; each call returns its
// own *AckPool, whose Release drops that holder's reference once (a second
// Release is a no-op), and the last Release closes the shared pool. Each
// handle is routed by its endpoints and namespace to one lazily created ack
// client, and acks for one group and topic are coalesced into multi-entry
// AckMessage RPCs; every caller still gets the result of its own entry.
// Queues and clients that go unused for IdleTimeout are closed (see
// AckPoolConfig.IdleTimeout and MaxQueues), so handles naming ever new
// topics, groups or namespaces do not make a pool grow.
//
// A pool ends the lease (see LeaseConfig) of every delivery it acks or whose
// invisibility it changes, and acks with the lease's newest receipt handle,
// whichever holder or Acker the call comes through.
//
// Ack clients never join a consumer group's dispatch: they ack without a
// session, and open a producer session (no group) the first time they change
// an invisible duration, which the broker requires (docs/broker-semantics.md,
// scenario j).
type AckPool struct {
	s        *ackPool
	metrics  *metrics // the shared pool's
	released atomic.Bool
}

// ackPool is the shared pool behind the holders.
type ackPool struct {
	key     string
	cfg     AckPoolConfig
	allowed []allowEntry
	// allowedSeen holds endpoint strings found allowed (up to
	// maxAllowedSeen), so that allow parses each only once; copied on
	// write under mu.
	allowedSeen atomic.Pointer[map[string]allowedAs]
	metrics     *metrics
	stats       poolStats
	// rpcCtx bounds the ack RPCs; a Release whose ctx ends cancels it.
	rpcCtx    context.Context
	cancelRPC context.CancelFunc

	mu       sync.Mutex
	refs     int
	closed   bool
	clients  map[string]*ackClient // endpoints|namespace -> client
	batchers map[batchKey]*batcher
	tables   map[*leaseTable]struct{} // the lease tables of sources on this pool
	reaping  bool                     // reapClients runs
	kick     chan struct{}            // wakes reapClients: a client went idle
	done     chan struct{}            // closed by the last release
	wg       sync.WaitGroup           // batchers and reapClients
}

var (
	poolsMu sync.Mutex
	pools   = map[string]*ackPool{}
)

// AcquireAckPool returns a holder of the process-wide pool for cfg, creating
// the pool on first use. Release the holder when done. It fails with an
// *OptionError when Credentials is set without Name, when neither
// Connection.Endpoints nor AllowedEndpoints is set, or on an invalid value.
func AcquireAckPool(cfg AckPoolConfig) (*AckPool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	allowed, err := cfg.allowed()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// The key covers what changes the wire: the name (standing for the
	// resolver) and whether there is one, the connection (secret and token
	// as a digest), the TLS config's identity (two *tls.Config values are
	// never merged), and the allowlist.
	key := fmt.Sprintf("%q|%t|%s|%p|%q|%d|%v|%d|%d|%v|%d", cfg.Name, cfg.Credentials != nil, cfg.Connection.key(), cfg.TLS, allowKey(allowed),
		cfg.MaxBatch, cfg.Linger, cfg.MaxAttempts, cfg.MaxInFlight, cfg.IdleTimeout, cfg.MaxQueues)
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if p, ok := pools[key]; ok {
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
		return &AckPool{s: p, metrics: p.metrics}, nil
	}
	p := &ackPool{key: key, cfg: cfg, refs: 1, metrics: newMetrics(cfg.Meter), allowed: allowed,
		clients: map[string]*ackClient{}, batchers: map[batchKey]*batcher{}, tables: map[*leaseTable]struct{}{},
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.rpcCtx, p.cancelRPC = context.WithCancel(context.Background())
	pools[key] = p
	return &AckPool{s: p, metrics: p.metrics}, nil
}

// Release drops this holder's reference; a second Release of the same
// holder does nothing. The last reference flushes the acks already queued
// and stops the pool. ctx bounds that: when it ends first, the acks still on
// the wire are abandoned and complete with an error wrapping
// ErrAckOutcomeUnknown, and Release returns an error wrapping ctx.Err().
// Acks submitted after the last Release fail with ErrPoolReleased.
func (p *AckPool) Release(ctx context.Context) error {
	if !p.released.CompareAndSwap(false, true) {
		return nil
	}
	return p.s.release(ctx)
}

func (p *ackPool) release(ctx context.Context) error {
	poolsMu.Lock()
	p.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		p.closed = true
		delete(pools, p.key)
		close(p.done)
	}
	batchers := slices.Collect(maps.Values(p.batchers))
	p.mu.Unlock()
	poolsMu.Unlock()
	if !last {
		return nil
	}
	for _, b := range batchers {
		b.close(ErrPoolReleased)
	}
	flushed := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(flushed)
	}()
	var err error
	select {
	case <-flushed:
	case <-ctx.Done():
		err = fmt.Errorf("rmqflow: ack pool released before its queued acks completed (their outcome is unknown): %w", ctx.Err())
		p.cancelRPC()
		<-flushed // the batchers end at once: their RPCs are cancelled
	}
	p.cancelRPC()
	// The batchers and reapClients have ended: nothing else touches the
	// clients.
	p.mu.Lock()
	clients := slices.Collect(maps.Values(p.clients))
	p.mu.Unlock()
	for _, c := range clients {
		_ = c.c.Close(ctx)
	}
	return err
}

// Ack acks h and waits for its result, with the newest receipt handle of its
// delivery when a source of this pool leases it (the lease ends). A nil error
// means the broker accepted the ack. Errors:
//   - errors.Is(err, client.ErrInvalidReceiptHandle): the handle had expired;
//     the message will be (or was) delivered again. Count it and move on.
//   - ErrAckNotSent (with ctx's error): ctx ended before the ack was sent.
//   - ErrAckOutcomeUnknown (with ctx's error): ctx ended while the ack was
//     on the wire.
//   - ErrBadHandle, ErrEndpointNotAllowed, ErrPoolReleased: nothing was sent.
//
// Ack returns by ctx's deadline.
func (p *AckPool) Ack(ctx context.Context, h ReceiptHandle) error {
	return p.AckAsync(ctx, h).wait(ctx)
}

// AckFuture is the pending result of AckAsync.
type AckFuture struct {
	done  chan struct{}
	err   error
	state atomic.Int32 // ackQueued, ackSending or ackAbandoned
	after func()       // called once the result is known
}

const (
	ackQueued int32 = iota
	ackSending
	ackAbandoned
)

func newFuture(after func()) *AckFuture {
	return &AckFuture{done: make(chan struct{}), after: after}
}

// Done is closed when the result is known.
func (f *AckFuture) Done() <-chan struct{} { return f.done }

// Err returns the result; valid after Done is closed. Its errors are those
// of AckPool.Ack.
func (f *AckFuture) Err() error { return f.err }

func (f *AckFuture) complete(err error) {
	f.err = err
	if f.done != nil { // nil for the futures of Acker.ackThen, which nobody waits on
		close(f.done)
	}
	if f.after != nil {
		f.after()
	}
}

// wait returns the result, or when ctx ends first ErrAckNotSent (the ack is
// withdrawn if it is still queued) or ErrAckOutcomeUnknown.
func (f *AckFuture) wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
	}
	select {
	case <-f.done:
		return f.err
	default:
	}
	if f.state.CompareAndSwap(ackQueued, ackAbandoned) {
		return notSent(ctx.Err())
	}
	return outcomeUnknown(ctx.Err())
}

// AckAsync queues an ack of h and returns its future, which completes with
// what Ack would return. It returns at once unless the pool's queue for h's
// group and topic is full (MaxBatch × 4 acks waiting while MaxInFlight RPCs
// are out), and waits for room no longer than ctx allows. ctx also bounds
// the wait for a renewal of the same message on the wire and the time the
// ack may wait in the queue: an ack whose ctx ends before it is sent is
// withdrawn (ErrAckNotSent). Once sent, the ack completes whatever ctx does.
func (p *AckPool) AckAsync(ctx context.Context, h ReceiptHandle) *AckFuture {
	return p.s.ackAsync(ctx, h, nil)
}

func (p *ackPool) ackAsync(ctx context.Context, h ReceiptHandle, after func()) *AckFuture {
	f := newFuture(after)
	p.submitAck(ctx, h, f)
	return f
}

// submitAck is ackAsync for a future the caller made: it completes f, at
// once or when the ack's answer comes.
func (p *ackPool) submitAck(ctx context.Context, h ReceiptHandle, f *AckFuture) {
	if err := p.check(h); err != nil {
		f.complete(err)
		return
	}
	if err := ctx.Err(); err != nil {
		f.complete(notSent(err))
		return
	}
	if l := p.leaseOf(h); l != nil {
		nh, ok := l.tryEnd(h)
		if !ok {
			// A renewal of this message is on the wire: wait for its new
			// handle without holding up the caller.
			go func() {
				nh, err := l.end(ctx, h)
				if err != nil {
					f.complete(err)
					return
				}
				p.enqueue(ctx, nh, f)
			}()
			return
		}
		h = nh
	}
	p.enqueue(ctx, h, f)
}

// enqueue hands the ack of h to its batcher, waiting for room no longer than
// ctx allows.
func (p *ackPool) enqueue(ctx context.Context, h ReceiptHandle, f *AckFuture) {
	for {
		b, err := p.batcher(h)
		if err != nil {
			f.complete(err)
			return
		}
		err = b.submit(ctx, ackReq{ctx: ctx, h: h, f: f})
		if errors.Is(err, errQueueClosed) {
			continue // the queue closed (idle, MaxQueues) while this waited for room: its successor takes the ack
		}
		if err != nil {
			f.complete(err)
		}
		return
	}
}

// check validates h and that the pool may send for its endpoints.
func (p *ackPool) check(h ReceiptHandle) error {
	if err := h.Validate(); err != nil {
		return err
	}
	_, err := p.allow(h.Endpoints)
	return err
}

// allowedAs is what a handle's endpoints string stands for in a pool.
type allowedAs struct {
	entry string // the access point (allowEntry.raw) all its addresses belong to
	canon string // its addresses, normalised, sorted and deduplicated: the client's key
}

// allow finds the one access point the pool was configured with that has
// every address of endpoints (a handle's): a handle naming addresses of two
// clusters is refused, since one set of credentials would reach both.
func (p *ackPool) allow(endpoints string) (allowedAs, error) {
	if seen := p.allowedSeen.Load(); seen != nil {
		if as, ok := (*seen)[endpoints]; ok {
			return as, nil
		}
	}
	eps, err := client.ParseEndpoints(endpoints)
	if err != nil {
		return allowedAs{}, fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	addrs := make([]string, len(eps))
	for i, a := range eps {
		addrs[i] = a.String()
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	var as allowedAs
	for _, e := range p.allowed {
		if !slices.ContainsFunc(addrs, func(a string) bool { return !e.addrs[a] }) {
			as = allowedAs{entry: e.raw, canon: strings.Join(addrs, ";")}
			break
		}
	}
	if as.entry == "" {
		for _, a := range addrs {
			if !slices.ContainsFunc(p.allowed, func(e allowEntry) bool { return e.addrs[a] }) {
				return allowedAs{}, fmt.Errorf("%w: %s", ErrEndpointNotAllowed, a)
			}
		}
		if p.cfg.Credentials != nil {
			// Each entry has credentials of its own: none may reach another's
			// addresses.
			return allowedAs{}, fmt.Errorf("%w: %s names addresses of more than one configured access point", ErrEndpointNotAllowed, endpoints)
		}
		// One identity for every entry: the addresses may mix.
		as = allowedAs{canon: strings.Join(addrs, ";")}
	}
	// Remember the string: every handle of a source carries the same one,
	// and parsing it for each ack took 4 of the 6 allocations of the
	// check (BenchmarkAckPoolCheck). Only allowed strings are kept, and
	// only a few.
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.allowedSeen.Load()
	if old == nil || len(*old) < maxAllowedSeen {
		seen := make(map[string]allowedAs, 1)
		if old != nil {
			seen = maps.Clone(*old)
		}
		seen[endpoints] = as
		p.allowedSeen.Store(&seen)
	}
	return as, nil
}

// maxAllowedSeen bounds the endpoint strings a pool remembers as allowed.
const maxAllowedSeen = 64

// endLease ends the lease of h's delivery, if a source of this pool holds
// one, and returns its newest handle; it waits (bounded by ctx) for a renewal
// of the delivery on the wire.
func (p *ackPool) endLease(ctx context.Context, h ReceiptHandle) (ReceiptHandle, error) {
	l := p.leaseOf(h)
	if l == nil {
		return h, nil
	}
	return l.end(ctx, h)
}

// leaseOf finds the lease of h's delivery: through the handle's owner, or
// any lease table of this pool.
func (p *ackPool) leaseOf(h ReceiptHandle) *lease {
	if t, ok := h.owner.(*leaseTable); ok {
		if l := t.lookup(h); l != nil {
			return l
		}
	}
	p.mu.Lock()
	tables := make([]*leaseTable, 0, len(p.tables))
	for t := range p.tables {
		tables = append(tables, t)
	}
	p.mu.Unlock()
	for _, t := range tables {
		if l := t.lookup(h); l != nil {
			return l
		}
	}
	return nil
}

func (p *ackPool) addTable(t *leaseTable) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tables[t] = struct{}{}
}

func (p *ackPool) removeTable(t *leaseTable) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tables, t)
}

// ChangeInvisibleDuration makes the delivery invisible for d from now (0:
// visible again at once) and returns the handle with the broker's new
// receipt handle. It ends the delivery's lease, if any, and uses its newest
// handle. A negative d is an error and nothing is sent. ctx bounds the call.
func (p *AckPool) ChangeInvisibleDuration(ctx context.Context, h ReceiptHandle, d time.Duration) (ReceiptHandle, error) {
	return p.s.changeInvisible(ctx, h, d)
}

func (p *ackPool) changeInvisible(ctx context.Context, h ReceiptHandle, d time.Duration) (ReceiptHandle, error) {
	if d < 0 {
		return h, optionError("invisible duration", fmt.Sprintf("%v is negative; 0 makes the message visible at once", d))
	}
	if err := p.check(h); err != nil {
		return h, err
	}
	if err := ctx.Err(); err != nil {
		return h, notSent(err)
	}
	h, err := p.endLease(ctx, h)
	if err != nil {
		return h, err
	}
	return p.changeInvisibleRaw(ctx, h, d)
}

// leave ends the lease of h's delivery, if any, without any RPC.
func (p *ackPool) leave(h ReceiptHandle) {
	if l := p.leaseOf(h); l != nil {
		l.leave()
	}
}

// changeInvisibleRaw sends ChangeInvisibleDuration for h as it is.
func (p *ackPool) changeInvisibleRaw(ctx context.Context, h ReceiptHandle, d time.Duration) (ReceiptHandle, error) {
	ac, err := p.client(h.Endpoints, h.Namespace)
	if err != nil {
		return h, err
	}
	defer p.unref(ac)
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

// forwardToDeadLetterQueue moves the delivery h names to its group's
// dead-letter queue on the broker (%DLQ%<group>): the proxy stores a copy
// there and acks h. It ends the delivery's lease, if any, and uses its
// newest handle. attempt and maxAttempts are informative (the 5.5.0 proxy
// ignores them). ctx bounds the call.
func (p *ackPool) forwardToDeadLetterQueue(ctx context.Context, h ReceiptHandle, attempt, maxAttempts int32) error {
	if err := p.check(h); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return notSent(err)
	}
	h, err := p.endLease(ctx, h)
	if err != nil {
		return err
	}
	ac, err := p.client(h.Endpoints, h.Namespace)
	if err != nil {
		return err
	}
	defer p.unref(ac)
	if err := ac.ensureSession(ctx, h.Topic); err != nil {
		return err
	}
	return ac.c.ForwardToDeadLetterQueue(ctx, client.DeadLetterRequest{
		Group: h.Group, Topic: h.Topic, MessageID: h.MessageID, ReceiptHandle: h.Handle,
		LiteTopic: h.LiteTopic, DeliveryAttempt: attempt, MaxDeliveryAttempts: maxAttempts,
	})
}

// AckPoolStats counts what a pool did since it was created.
type AckPoolStats struct {
	// Acks is the number of acks completed by an RPC (any outcome).
	Acks int64
	// AckRPCs is the number of AckMessage RPCs sent, retries included. It
	// counts an RPC when it leaves, Acks when it is answered: with several
	// RPCs on the wire (MaxInFlight) AckRPCs runs ahead of their acks.
	AckRPCs int64
	// InvalidHandles is the number of acks the broker refused as expired.
	InvalidHandles int64
	// ChangeInvisible is the number of ChangeInvisibleDuration RPCs.
	ChangeInvisible int64
}

type poolStats struct {
	acks, rpcs, invalid, cid atomic.Int64
	queues                   atomic.Int64 // batchers opened (tests)
}

// Stats returns the counters of the shared pool.
func (p *AckPool) Stats() AckPoolStats {
	s := &p.s.stats
	return AckPoolStats{Acks: s.acks.Load(), AckRPCs: s.rpcs.Load(),
		InvalidHandles: s.invalid.Load(), ChangeInvisible: s.cid.Load()}
}

// ackClient is one connection of the pool.
type ackClient struct {
	c           *client.Client
	key         string // in the pool's clients
	sessionOnce sync.Mutex
	session     bool

	// guarded by the pool's mu
	users     int       // batchers and calls using it; at 0 it is idle
	idleSince time.Time // when users last fell to 0
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

// client returns the client for a handle's endpoints and namespace: one per
// normalised set of addresses (so spellings of one address share it) and
// namespace, with the credentials of the access point they belong to. The
// caller uses it until it calls unref.
func (p *ackPool) client(endpoints, namespace string) (*ackClient, error) {
	as, err := p.allow(endpoints)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolReleased
	}
	return p.clientLocked(as, namespace)
}

// clientLocked is client with p.mu held and the pool open.
func (p *ackPool) clientLocked(as allowedAs, namespace string) (*ackClient, error) {
	k := as.canon + "|" + namespace
	if c, ok := p.clients[k]; ok {
		c.users++
		return c, nil
	}
	cc := p.cfg.clientConfig()
	cc.Endpoints, cc.Namespace = as.canon, namespace
	if p.cfg.Credentials != nil {
		cr, err := p.cfg.Credentials(as.entry)
		if err != nil {
			return nil, fmt.Errorf("rmqflow: credentials for %s: %w", as.entry, err)
		}
		cc.Credentials = cr
	}
	c, err := client.New(cc)
	if err != nil {
		return nil, err
	}
	ac := &ackClient{c: c, key: k, users: 1}
	p.clients[k] = ac
	return ac, nil
}

// unref ends a use of ac that client began. An unused client is closed once
// it has been idle for IdleTimeout, or at once when more than
// maxIdleAckClients are idle (the longest idle first).
func (p *ackPool) unref(ac *ackClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ac.users--
	if ac.users > 0 || p.closed {
		return
	}
	ac.idleSince = time.Now()
	if p.cfg.IdleTimeout == Forever {
		return
	}
	if !p.reaping {
		p.reaping = true
		p.wg.Add(1) // p is open: the last release has not begun to wait
		go func() {
			defer p.wg.Done()
			p.reapClients()
		}()
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// maxIdleAckClients bounds the idle clients a pool keeps open until their
// IdleTimeout: handles may name any number of namespaces.
const maxIdleAckClients = 16

// reapClients closes idle clients once IdleTimeout has passed (or at once
// beyond maxIdleAckClients); it returns when no client is idle, or at the
// last release.
func (p *ackPool) reapClients() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var (
			gone []*ackClient
			next time.Duration
		)
		p.mu.Lock()
		if p.closed {
			p.reaping = false
			p.mu.Unlock()
			return
		}
		now := time.Now()
		var idle []*ackClient
		for _, c := range p.clients {
			if c.users == 0 {
				idle = append(idle, c)
			}
		}
		// Longest idle first.
		slices.SortFunc(idle, func(a, b *ackClient) int { return a.idleSince.Compare(b.idleSince) })
		for i, c := range idle {
			left := p.cfg.IdleTimeout - now.Sub(c.idleSince)
			if left > 0 && len(idle)-i <= maxIdleAckClients {
				if next == 0 || left < next {
					next = left
				}
				continue
			}
			delete(p.clients, c.key)
			gone = append(gone, c)
		}
		if next == 0 {
			p.reaping = false
		}
		p.mu.Unlock()
		for _, c := range gone {
			ctx, cancel := context.WithTimeout(p.rpcCtx, p.closeTimeout())
			_ = c.c.Close(ctx)
			cancel()
		}
		if next == 0 {
			return
		}
		timer.Reset(next)
		select {
		case <-timer.C:
		case <-p.kick:
		case <-p.done:
		}
	}
}

// closeTimeout bounds the close of a client the pool no longer needs.
func (p *ackPool) closeTimeout() time.Duration {
	if p.cfg.RequestTimeout > 0 {
		return p.cfg.RequestTimeout
	}
	return client.DefaultRequestTimeout
}

type batchKey struct{ endpoints, namespace, group, topic string }

// batcher returns the open batcher of h's group and topic, registered for
// one submit (which the caller must make), opening it (and its client) if
// need be; opening one beyond MaxQueues closes the least recently used.
func (p *ackPool) batcher(h ReceiptHandle) (*batcher, error) {
	as, err := p.allow(h.Endpoints)
	if err != nil {
		return nil, err
	}
	k := batchKey{as.canon, h.Namespace, h.Group, h.Topic}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolReleased
	}
	if b, ok := p.batchers[k]; ok {
		b.register()
		return b, nil
	}
	ac, err := p.clientLocked(as, h.Namespace)
	if err != nil {
		return nil, err
	}
	if len(p.batchers) >= p.cfg.MaxQueues {
		var lru *batcher
		for _, b := range p.batchers {
			if lru == nil || b.lastUse.Load() < lru.lastUse.Load() {
				lru = b
			}
		}
		// It sends what it holds and ends; a submit it has registered
		// either gets in first or goes to its successor.
		delete(p.batchers, lru.key)
		lru.close(errQueueClosed)
	}
	b := newBatcher(k, ac.c, p)
	p.stats.queues.Add(1)
	p.batchers[k] = b
	b.register()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		b.run()
		p.unref(ac)
	}()
	return b, nil
}

// closeIfIdle closes b when no ack has come for IdleTimeout, and takes it out
// of the pool so that the next ack of its group and topic opens another. It
// returns 0 when b is closed (now or before), otherwise how long until it may
// be idle.
func (p *ackPool) closeIfIdle(b *batcher) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		b.close(ErrPoolReleased)
		return 0
	}
	if p.batchers[b.key] != b {
		b.close(errQueueClosed) // already taken out (MaxQueues) and closed
		return 0
	}
	if left := p.cfg.IdleTimeout - time.Since(time.Unix(0, b.lastUse.Load())); left > 0 {
		return left
	}
	delete(p.batchers, b.key)
	b.close(errQueueClosed)
	return 0
}
