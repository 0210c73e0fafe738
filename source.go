package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// LiteBinding is one LITE main topic and the lite group bound to it (group
// attribute lite.bind.topic=<Topic>).
type LiteBinding struct {
	Topic string
	Group string
	// LiteTopics, when set, subscribes these lite topics of Topic alone,
	// through a group that is not a wildcard group: the source adds each one
	// (SyncLiteSubscription PARTIAL_ADD) when it starts and keeps the set in
	// its periodic COMPLETE_ADD, as the official lite push consumers do.
	// Empty: Group is a wildcard group (lite.sub.wildcard=true) and every
	// lite topic of Topic comes. A lite topic taken over by another client
	// of an exclusive group (lite.sub.model=Exclusive) stops coming
	// (docs/broker-semantics.md, scenario s).
	LiteTopics []string
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
	// (max-message-num), 1..32. Default 32. The queue holds up to
	// 2 × MaxMessageNum × FetchConcurrency messages per binding: a batch per
	// fetcher waiting to be taken while the next one is received.
	MaxMessageNum int
	// RenewalAheadTime is how long before a queued (or leased) message's
	// invisibility ends the source renews it (renewal-ahead-time). Default
	// 5 s; must be less than InvisibleDuration. When many messages' ends
	// are crowded together, a renewal starts earlier by what the renewals
	// of the messages ending before it take: twice the measured duration of
	// a renewal RPC (40 ms until one is measured) for each RenewalConcurrency
	// of them, up to half of InvisibleDuration in all. So 3,200 leases
	// received at once start about 21 s ahead, soonest end first, and the
	// last is answered well before its end (TestRunnerRenewsACrowdInTime;
	// at a flat 5 s, 1,352 of 3,200 were late).
	RenewalAheadTime time.Duration
	// DisableQueueRenewal turns off the renewal of queue-resident messages
	// (on by default).
	DisableQueueRenewal bool
	// RenewalConcurrency is the most renewals (ChangeInvisibleDuration
	// RPCs of queued and leased messages together) the source has on the
	// wire at once; each look at what is due renews it soonest expiry
	// first. Default 16 (DefaultRenewalConcurrency): at 40 ms per renewal,
	// 400 a second; a crowd that needs longer than RenewalAheadTime starts
	// earlier (see there). A renewal answered after the invisibility it
	// was to extend had ended is counted in rmqflow.renewals.late and
	// logged (WARN): raise this or RenewalAheadTime when that happens. It
	// does not bound the renewal Next makes at emission.
	RenewalConcurrency int
	// Leases, when enabled, keeps renewing emitted messages until they are
	// acked through this process (see LeaseConfig). Off by default.
	Leases LeaseConfig
	// ReleaseInvisibleDuration is the invisibility that Close gives messages
	// still in the queue, so that the group gets them back promptly. Zero
	// means 0 s: visible again at once.
	ReleaseInvisibleDuration time.Duration
	// MaxOutage bounds how long receiving may keep failing with transient
	// errors (transport failures, throttling, broker timeouts) before the
	// source ends: Next then returns a *ReceiveError wrapping the last
	// cause. The outage of a binding starts at its first failed receive
	// after a success and ends at its next success. Default 5 min; Forever
	// retries without end. Permanent errors end the source at once.
	MaxOutage time.Duration
	// MaxQueueAge is the longest a message may wait in the queue, being
	// renewed, before the source gives it back to the group
	// (ChangeInvisibleDuration to ReleaseInvisibleDuration), so that a
	// process that stopped calling Next does not hold its messages (and
	// their lite topics) for ever. Default 30 min; Forever turns the cap
	// off.
	MaxQueueAge time.Duration
	// LiteRejoinAfter is how long a wildcard lite binding's receives may
	// come back empty before it re-joins its group (client.Session.Rejoin:
	// COMPLETE_REMOVE, then COMPLETE_ADD), which makes the broker look for
	// the group's lite backlog again, 5 to 15 s later, and offer each lite
	// topic it finds to a member of the group, this one included. RocketMQ
	// 5.5.0 looks when a client joins, and otherwise only when a message
	// finds members of which none takes it; it offers a lite topic whose
	// popped batch comes free (acked, or its invisibility over) to one
	// member picked at random, which may be a consumer that stays connected
	// but polls no more (stopped, wedged, or a Source nobody calls Next on):
	// that member holds it until the broker's scan finds it idle, 10 to 20 s
	// later, and hands it to another member, possibly idle too. A consumer
	// started after others of its group stopped mid-stream so can wait long
	// for a backlog that is there (docs/broker-semantics.md, scenarios v and
	// x: once 90 s; beside four hung consumers, one of two lite topics did
	// not come within 60 s). The first re-join of an idle run comes when the
	// batches such consumers popped before this one started come free, if
	// they used the same InvisibleDuration. An idle run re-joins at most 4
	// times, the wait doubling each time (with a 30 s LiteRejoinAfter: 30 s,
	// then 60, 120 and 240 s more), and then waits for a message; a message
	// ends the run, and a pause in receiving (the queue full, receives
	// failing) starts it over. Each re-join is logged (INFO the first time
	// in a run, DEBUG after) and counted (rmqflow.source.lite_rejoins).
	// Default 30 s (DefaultLiteRejoinAfter); at least 10 s when set (set
	// it to InvisibleDuration for the first re-join to come when such
	// consumers' batches come free, as scenario x does); negative (or
	// Forever): never. Bindings of exact lite
	// topics never re-join. Each re-join costs the broker a pass over all
	// its lite consume queues, and a message that arrives between the two
	// calls may wait for that pass.
	LiteRejoinAfter time.Duration
	// LiteDispatchKick, when set, asks the broker to offer a wildcard lite
	// group's backlog to its consumers now, so that a Source joining a
	// group with a backlog gets its first message at once instead of 5 s
	// plus up to one broker scan (10 s by default) after its join (RocketMQ
	// 5.5.0 schedules a new wildcard client's first look at the backlog
	// with a constant 5,000 ms, and no broker setting changes it). The
	// source calls it for each wildcard binding once its subscription has
	// reached the broker (Start, and each re-join after LiteRejoinAfter),
	// with the binding's group and the source's client id for it, then
	// every LiteDispatchKickEvery until the binding receives a message, for
	// at most LiteDispatchKickFor (its ctx ends then, or when the source
	// stops); a re-join while a run goes on starts none. A failure is logged (WARN the first time in a run, DEBUG
	// after), counted (rmqflow.source.lite_dispatch_kicks, outcome=failed)
	// and otherwise ignored: the broker's own dispatch still comes.
	//
	// The gRPC proxy has no such request: brokeradmin.LiteDispatchKick(addr)
	// sends the broker's admin request triggerLiteDispatch to its own
	// remoting port (addr, listenPort), which this process must be able to
	// reach, for the whole group (a dispatch for one client of a wildcard
	// group does nothing on 5.5.0). Each request makes the broker walk every
	// lite consume queue it has (16 to 37 ms over 1,200,000 lite topics):
	// at most 20 per join. docs/operations-lite.md, "A new consumer's first
	// message"; conformance scenario aa. Default nil: no kick.
	LiteDispatchKick func(ctx context.Context, group, clientID string) error
	// UndecodableInvisibleDuration is the most invisibility a message whose
	// body the Decoder refused (AckableMessage.Err) is emitted with: unless
	// a Runner drives the source, the source neither leases nor renews such
	// a message, and cuts what is left of its invisibility to this
	// (ChangeInvisibleDuration) when more is left, so that a message nobody
	// acts on comes back soon, counting a delivery, and ends in the group's
	// dead-letter queue after the group's retries instead of holding its
	// lite topic (or FIFO message group) for InvisibleDuration on each
	// delivery. Extend it (Acker.ChangeInvisibleDuration) to keep it longer.
	// Under a Runner it is leased like every other message, since the
	// runner's handler decides on it. Default 10 s; Forever: leave it what
	// it has (no RPC).
	UndecodableInvisibleDuration time.Duration
}

// Forever, as MaxOutage or MaxQueueAge, turns the bound off.
const Forever time.Duration = 1<<63 - 1

// Defaults of the bounds of SourceConfig that go beyond the Flink connector.
const (
	DefaultMaxOutage   = 5 * time.Minute
	DefaultMaxQueueAge = 30 * time.Minute
	// DefaultLiteRejoinAfter is SourceConfig.LiteRejoinAfter's default and
	// MinLiteRejoinAfter its least value; maxLiteRejoins bounds the
	// re-joins of one idle run (30 s, 90 s, 210 s and 450 s into it by
	// default). A default that followed InvisibleDuration (10 s for a 10 s
	// invisibility) re-joined so often between sparse messages that
	// eKuiper's TestFilteredRowsAckedByProgress missed 3 of 51 rows in 60 s
	// on 5.5.0 (a message that arrives between the two calls waits for the
	// join's full dispatch).
	DefaultLiteRejoinAfter = 30 * time.Second
	MinLiteRejoinAfter     = 10 * time.Second
	maxLiteRejoins         = 4
	// LiteDispatchKickEvery and LiteDispatchKickFor pace
	// SourceConfig.LiteDispatchKick: a request at the join and every 250
	// ms after it until a message comes, for 5 s at most (the broker's own
	// first dispatch of a new client is due then).
	LiteDispatchKickEvery = 250 * time.Millisecond
	LiteDispatchKickFor   = 5 * time.Second
	// DefaultUndecodableInvisibleDuration is
	// SourceConfig.UndecodableInvisibleDuration's default.
	DefaultUndecodableInvisibleDuration = 10 * time.Second
)

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
	if c.RenewalConcurrency == 0 {
		c.RenewalConcurrency = DefaultRenewalConcurrency
	}
	if c.MaxOutage == 0 {
		c.MaxOutage = DefaultMaxOutage
	}
	if c.MaxQueueAge == 0 {
		c.MaxQueueAge = DefaultMaxQueueAge
	}
	if c.LiteRejoinAfter == 0 {
		c.LiteRejoinAfter = DefaultLiteRejoinAfter
	}
	if c.UndecodableInvisibleDuration == 0 {
		c.UndecodableInvisibleDuration = DefaultUndecodableInvisibleDuration
	}
	c.Leases = c.Leases.withDefaults()
	return c
}

// Validate reports what NewSource would refuse in c (an *OptionError naming
// the field, or a Connection error) without building a source.
func (c SourceConfig) Validate() error { return c.withDefaults().validate() }

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
			for _, lt := range b.LiteTopics {
				if strings.TrimSpace(lt) == "" {
					return optionError("Lite", fmt.Sprintf("binding %d lists an empty lite topic", i))
				}
			}
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
	case c.RenewalConcurrency < 0:
		return optionError("RenewalConcurrency", "must not be negative (zero means the default, 16)")
	case c.ReleaseInvisibleDuration < 0:
		return optionError("ReleaseInvisibleDuration", "must not be negative")
	case c.MaxOutage < 0:
		return optionError("MaxOutage", "must not be negative (Forever retries without end)")
	case c.MaxQueueAge < 0:
		return optionError("MaxQueueAge", "must not be negative (Forever turns the cap off)")
	case c.LiteRejoinAfter > 0 && c.LiteRejoinAfter < MinLiteRejoinAfter:
		return optionError("LiteRejoinAfter", "must be at least 10s (each re-join costs the broker a pass over the main topic's lite topics; the broker itself looks 5 to 15 s after a join), or negative for never")
	case c.UndecodableInvisibleDuration < 0:
		return optionError("UndecodableInvisibleDuration", "must not be negative (Forever leaves an undecodable message the invisibility it has)")
	}
	return c.Leases.validate()
}

// ErrSourceClosed is returned by Next once the source is closed (or drained
// and empty).
var ErrSourceClosed = errors.New("rmqflow: source closed")

// ReceiveError ends a Source: receiving from a binding failed with a
// permanent error (the broker refused the topic, the group or the
// credentials), or kept failing with transient ones for longer than
// MaxOutage. Err is the last cause; for a broker refusal it wraps a
// *client.StatusError, so errors.Is(err, client.ErrTopicNotFound) and the
// like work on it.
type ReceiveError struct {
	Topic, Group string
	// Permanent is true for a refusal that retrying cannot change, false when
	// MaxOutage ran out.
	Permanent bool
	// Outage is how long the binding had been failing (0 for a permanent
	// error on the first try).
	Outage time.Duration
	Err    error
}

func (e *ReceiveError) Error() string {
	if e.Permanent {
		return fmt.Sprintf("rmqflow: source %s/%s: receive failed permanently: %v", e.Topic, e.Group, e.Err)
	}
	return fmt.Sprintf("rmqflow: source %s/%s: receive failing for %v (MaxOutage): %v", e.Topic, e.Group, e.Outage.Round(time.Millisecond), e.Err)
}

func (e *ReceiveError) Unwrap() error { return e.Err }

// ErrMalformedMessage is wrapped by the Err of a message the broker sent
// without what an ack needs (receipt handle, topic, message id). Such a
// message cannot be acked or released; the broker delivers it again when its
// invisibility ends.
var ErrMalformedMessage = errors.New("rmqflow: malformed message from the broker")

// MalformedMessageError is the Err of a malformed message; it wraps
// ErrMalformedMessage.
type MalformedMessageError struct {
	MessageID string
	// Missing names the first field the message lacks, such as
	// "receipt handle".
	Missing string
}

func (e *MalformedMessageError) Error() string {
	return fmt.Sprintf("rmqflow: malformed message %q from the broker: no %s", e.MessageID, e.Missing)
}

func (e *MalformedMessageError) Unwrap() error { return ErrMalformedMessage }

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
	slots  *renewSlots // RenewalConcurrency: shared by the queue's renewer and the leases

	// rpcCtx bounds the RPCs that a stop does not cut (lease renewals, giving
	// messages back): Close cancels it (abandon) when its own context ends
	// before they are answered.
	rpcCtx  context.Context
	abandon context.CancelFunc

	// leaseUndecodable: a Runner drives the source, so a message that did
	// not decode is leased for its handler like the others, and its
	// invisibility is not cut. Set before Start.
	leaseUndecodable bool

	smetrics *sourceMetrics
	// unobserve unregisters the queue-depth callback (Close).
	unobserve func()

	mu          sync.Mutex
	started     bool
	running     bool // Start succeeded: the goroutines run
	closed      bool
	draining    bool
	cancelStart context.CancelFunc // ends a Start in progress
	startDone   chan struct{}      // closed when Start has returned
	stopFetch   context.CancelFunc // Drain, Close, or the source failed
	stopRun     context.CancelFunc // Close: renewal and leases
	fetchWG     sync.WaitGroup     // the fetchers
	wg          sync.WaitGroup     // renewal and leases
}

// binding is one (main topic, group) pair with its own consumer identity.
type binding struct {
	topic, group string
	lite         bool
	exact        []string // exact lite topics; none: a wildcard group
	filter       client.Filter
	c            *client.Client
	sess         *client.Session

	omu          sync.Mutex
	failingSince time.Time // first failed receive since the last success; zero when none

	// Re-joining an idle wildcard group (SourceConfig.LiteRejoinAfter).
	rmu        sync.Mutex
	emptySince time.Time     // start of the current run of empty receives (or the last re-join); zero: none
	lastEmpty  time.Time     // when the last empty receive was answered
	lastMsg    time.Time     // when the last receive with messages was answered
	rejoinWait time.Duration // how long the run must last for the next re-join
	rejoins    int           // re-joins in the current idle run

	// SourceConfig.LiteDispatchKick: withMsgs counts the receives that
	// brought messages (a kick run ends when it moves); kicking is set while
	// a run goes on.
	withMsgs atomic.Int64
	kicking  atomic.Bool
}

// rejoinDue records a receive of n messages, polled at polledAt and answered
// at now, and reports whether the binding's receives have been empty long
// enough to re-join its group, and whether it is the first re-join of this
// idle run. The wait doubles after each re-join, and after maxRejoins of
// them the binding waits for a message; a message ends the run and resets
// the wait to base. A run starts no earlier than the last message another
// fetcher received, and only time with a receive out counts: a poll sent
// more than rejoinGap after the last empty answer (the queue was full, or
// receives failed) starts the run over.
func (b *binding) rejoinDue(polledAt, now time.Time, n int, base time.Duration) (due, first bool) {
	b.rmu.Lock()
	defer b.rmu.Unlock()
	if n > 0 || b.rejoinWait == 0 {
		b.emptySince, b.rejoinWait, b.rejoins = time.Time{}, base, 0
	}
	if n > 0 {
		b.lastMsg = now
		return false, false
	}
	if !b.emptySince.IsZero() && polledAt.Sub(b.lastEmpty) > rejoinGap {
		b.emptySince = time.Time{}
	}
	if now.After(b.lastEmpty) {
		b.lastEmpty = now
	}
	if b.emptySince.IsZero() {
		b.emptySince = polledAt
		if b.lastMsg.After(polledAt) {
			b.emptySince = b.lastMsg
		}
	}
	if b.rejoins >= maxLiteRejoins || now.Sub(b.emptySince) < b.rejoinWait {
		return false, false
	}
	first = b.rejoins == 0
	b.emptySince, b.rejoinWait, b.rejoins = now, 2*b.rejoinWait, b.rejoins+1
	return true, first
}

// fifoGroup reports whether the broker told the session of group's simple
// binding that the group is FIFO: it then hands out each message group in
// order from its first unacked message, as it does each lite topic.
func (s *Source[T]) fifoGroup(group string) bool {
	for _, b := range s.binds {
		if b.group == group && !b.lite && b.sess != nil && b.sess.Settings().GetSubscription().GetFifo() {
			return true
		}
	}
	return false
}

// rejoinGap is the longest pause between an empty answer and the next poll
// that still continues a run of empty receives.
const rejoinGap = time.Second

// outage records a failed receive at now and returns how long the binding
// has been failing.
func (b *binding) outage(now time.Time) time.Duration {
	b.omu.Lock()
	defer b.omu.Unlock()
	if b.failingSince.IsZero() {
		b.failingSince = now
	}
	return now.Sub(b.failingSince)
}

// received records a successful receive: the outage, if any, is over.
func (b *binding) received() {
	b.omu.Lock()
	defer b.omu.Unlock()
	b.failingSince = time.Time{}
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
	s := &Source[T]{cfg: cfg, dec: dec, log: cfg.logger(), clk: wallClock, slots: newRenewSlots(cfg.RenewalConcurrency)}
	s.rpcCtx, s.abandon = context.WithCancel(context.Background())
	s.metrics = newMetrics(cfg.Meter)
	s.smetrics = newSourceMetrics(cfg.Meter)
	// Twice the receive window: while the consumer works through one batch
	// per fetcher, the fetchers receive full batches instead of shrinking.
	perBinding := 2 * cfg.MaxMessageNum * cfg.FetchConcurrency
	if cfg.Mode == ModeLite {
		for _, b := range cfg.Lite {
			s.binds = append(s.binds, &binding{topic: b.Topic, group: b.Group, lite: true, exact: slices.Clone(b.LiteTopics)})
		}
	} else {
		s.binds = append(s.binds, &binding{topic: cfg.Topic, group: cfg.Group, filter: cfg.Filter})
	}
	s.q = newQueue(perBinding, cfg.MaxMessageNum)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: cfg.Connection})
	if err != nil {
		return nil, err
	}
	s.pool = pool
	s.unobserve = s.metrics.observeQueue(s.q.len) // after the last error: Close unregisters it
	s.acker = NewAcker(pool)
	if cfg.Leases.Enabled {
		s.leases = newLeaseTable(cfg.Leases, cfg.InvisibleDuration, cfg.RenewalAheadTime, pool.s, s.log, s.metrics, s.slots, s.clk, s.rpcCtx)
		pool.s.addTable(s.leases) // any ack of a leased delivery through the pool ends its lease
	}
	return s, nil
}

// useLeases turns leases on (LeaseConfig's defaults unless they are on
// already) for a source that has not started: a Runner holds many messages
// at once — waiting behind their lite topic's head, in a handler, or for
// their ack's answer — and each must stay invisible while it has it.
func (s *Source[T]) useLeases() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrSourceClosed
	case s.started:
		return errors.New("rmqflow: a Runner needs a source that has not started (it starts it)")
	}
	// The runner's handler decides on every message, undecodable ones
	// included, and the runner may hold one for as long as a decoded one.
	s.leaseUndecodable = true
	if s.leases != nil {
		return nil
	}
	s.cfg.Leases = LeaseConfig{Enabled: true}.withDefaults()
	s.leases = newLeaseTable(s.cfg.Leases, s.cfg.InvisibleDuration, s.cfg.RenewalAheadTime, s.pool.s, s.log, s.metrics, s.slots, s.clk, s.rpcCtx)
	s.pool.s.addTable(s.leases)
	return nil
}

// isRunning reports whether Start has succeeded (and Close not yet begun).
func (s *Source[T]) isRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running && !s.closed
}

// Start opens one consumer session per binding (a lite source keeps its
// wildcard subscription fresh), checks that each topic has a route, and
// starts the fetch and renewal goroutines. ctx bounds the start only; stop
// the source with Close or Drain. Close the source even when Start fails: it
// holds a reference to the ack pool.
//
// Start fails when the broker refuses a binding: an unknown topic
// (client.ErrTopicNotFound), credentials it rejects (client.ErrUnauthorized,
// client.ErrForbidden), or a group it does not know (RocketMQ 5.5.0 answers
// the session's settings with gRPC InvalidArgument "group not found"). A
// Close that overtakes Start makes it return ErrSourceClosed with nothing
// left running.
func (s *Source[T]) Start(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrSourceClosed
	case s.started:
		s.mu.Unlock()
		return errors.New("rmqflow: source already started")
	}
	s.started = true
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancelStart = cancel
	done := make(chan struct{})
	s.startDone = done
	s.mu.Unlock()
	defer close(done)

	err := s.open(sctx)
	s.mu.Lock()
	if s.closed {
		err = ErrSourceClosed // whatever open said, Close overtook it
	}
	if err != nil {
		s.mu.Unlock()
		s.closeClients(ctx)
		return err
	}
	defer s.mu.Unlock()
	s.running = true
	fetchCtx, stopFetch := context.WithCancel(context.Background())
	runCtx, stopRun := context.WithCancel(context.Background())
	s.stopFetch, s.stopRun = stopFetch, stopRun
	if s.draining {
		stopFetch()
	}
	leases := s.leases
	for _, b := range s.binds {
		for i := 0; i < s.cfg.FetchConcurrency; i++ {
			s.fetchWG.Add(1)
			go func() {
				defer s.fetchWG.Done()
				s.fetch(fetchCtx, b)
			}()
		}
		s.startKick(fetchCtx, b)
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

// open connects every binding: a client, its consumer session, and a route
// check of its topic (a simple-mode session opens on an unknown topic, and
// only the route tells).
func (s *Source[T]) open(ctx context.Context) error {
	for _, b := range s.binds {
		c, err := client.New(s.cfg.clientConfig())
		if err != nil {
			return err
		}
		b.c = c
		sc := client.SessionConfig{Type: client.SimpleConsumer, Group: b.group,
			Subscriptions: []client.Subscription{{Topic: b.topic, Filter: b.filter}}, LongPollingTimeout: s.cfg.AwaitDuration}
		if b.lite {
			sc.Type, sc.LiteWildcard = client.LiteSimpleConsumer, true
		}
		sess, err := c.OpenSession(ctx, sc)
		if err != nil {
			return fmt.Errorf("rmqflow: source %s/%s: %w", b.topic, b.group, err)
		}
		b.sess = sess
		if _, err := c.QueryRoute(ctx, b.topic); err != nil {
			return fmt.Errorf("rmqflow: source %s/%s: %w", b.topic, b.group, err)
		}
		for _, lt := range b.exact {
			if err := sess.SubscribeLite(ctx, b.topic, lt, nil); err != nil {
				return fmt.Errorf("rmqflow: source %s/%s: subscribe lite topic %q: %w", b.topic, b.group, lt, err)
			}
		}
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
	// A retry after a poll whose answer was lost repeats its attempt id, so
	// that the broker hands out again what it may have popped for it.
	poller := b.c.NewPoller()
	for {
		// Reserve room in the binding's share first and ask for no more: a
		// full share stops receiving.
		room := s.q.reserve(ctx, b, s.cfg.MaxMessageNum)
		if room == 0 {
			return
		}
		req.BatchSize = room
		t0, polledAt := time.Now(), s.clk.now()
		msgs, err := poller.Receive(ctx, req)
		s.metrics.receiveLatency(ctx, time.Since(t0))
		s.metrics.fetched(ctx, len(msgs), b)
		if len(msgs) > room {
			// The broker sent more than asked: keep the reservation, give
			// the rest back at once.
			s.giveBack(ctx, b, msgs[room:], 0, "excess")
			msgs = msgs[:room]
		}
		s.q.put(b, s.entries(b, msgs, polledAt), room)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if permanentReceiveError(err) {
				s.fail(&ReceiveError{Topic: b.topic, Group: b.group, Permanent: true, Outage: b.outage(time.Now()), Err: err})
				return
			}
			outage := b.outage(time.Now())
			if outage >= s.cfg.MaxOutage {
				s.fail(&ReceiveError{Topic: b.topic, Group: b.group, Outage: outage, Err: err})
				return
			}
			// Sleep no later than the end of the allowed outage, so that
			// the error is seen in time.
			d := min(bo.Next(), s.cfg.MaxOutage-outage)
			s.log.Warn("rmqflow: receive failed; backing off", "topic", b.topic, "group", b.group, "backoff", d, "outage", outage, "err", err)
			if !backoff.Sleep(ctx, d) {
				return
			}
			continue
		}
		b.received()
		if len(msgs) > 0 {
			b.withMsgs.Add(1)
		}
		bo.Reset()
		if b.lite && len(b.exact) == 0 && s.cfg.LiteRejoinAfter > 0 {
			if due, first := b.rejoinDue(polledAt, s.clk.now(), len(msgs), s.cfg.LiteRejoinAfter); due {
				s.rejoin(ctx, b, first)
			}
		}
	}
}

// rejoin re-joins b's wildcard group (SourceConfig.LiteRejoinAfter), logged
// at Info the first time after messages stopped coming and at Debug while
// the binding stays idle. A failure is logged: the periodic COMPLETE_ADD
// puts the session back in the group within LiteSyncInterval if the
// COMPLETE_ADD half failed.
func (s *Source[T]) rejoin(ctx context.Context, b *binding, first bool) {
	level := slog.LevelDebug
	if first {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "rmqflow: lite binding received nothing; re-joining its group so that the broker looks for its backlog again",
		"topic", b.topic, "group", b.group, "after", s.cfg.LiteRejoinAfter)
	s.smetrics.rejoined(ctx, b)
	if err := b.sess.Rejoin(ctx, b.topic); err != nil && ctx.Err() == nil {
		s.log.Warn("rmqflow: re-joining the lite group failed", "topic", b.topic, "group", b.group, "err", err)
	}
	s.startKick(ctx, b)
}

// startKick starts a run of SourceConfig.LiteDispatchKick for wildcard
// binding b, unless none is set or a run goes on: a request now and every
// LiteDispatchKickEvery until b receives a message, for LiteDispatchKickFor
// at most. The run belongs to the fetchers (fetchWG) and ends with ctx.
func (s *Source[T]) startKick(ctx context.Context, b *binding) {
	kick := s.cfg.LiteDispatchKick
	if kick == nil || !b.lite || len(b.exact) > 0 || !b.kicking.CompareAndSwap(false, true) {
		return
	}
	s.fetchWG.Add(1)
	go func() {
		defer s.fetchWG.Done()
		defer b.kicking.Store(false)
		s.kickRun(ctx, b, kick)
	}()
}

func (s *Source[T]) kickRun(ctx context.Context, b *binding, kick func(context.Context, string, string) error) {
	seen := b.withMsgs.Load()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The run's bound and pace follow the source's clock (SetSourceClock in
	// tests); its end cancels a request under way.
	stopRun := s.clk.afterFunc(LiteDispatchKickFor, cancel)
	defer stopRun()
	tick := make(chan struct{}, 1)
	failed := false
	for b.withMsgs.Load() == seen && ctx.Err() == nil {
		stop := s.clk.afterFunc(LiteDispatchKickEvery, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		err := kick(ctx, b.group, b.c.ID())
		s.smetrics.kicked(context.WithoutCancel(ctx), b, err == nil)
		if err != nil && ctx.Err() == nil {
			level := slog.LevelWarn
			if failed {
				level = slog.LevelDebug
			}
			failed = true
			s.log.Log(ctx, level, "rmqflow: LiteDispatchKick failed; the broker's own dispatch follows", "topic", b.topic, "group", b.group, "err", err)
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-tick:
		}
	}
}

// permanentReceiveError reports whether err is a refusal that retrying
// cannot change: an unknown or illegal topic or group, refused credentials,
// an invalid request or an unsupported operation. Everything else (transport
// failures, throttling, timeouts, INTERNAL_SERVER_ERROR, which RocketMQ 5.5.0
// also answers while a restarted proxy has not yet seen the client's
// settings) is retried within MaxOutage.
func permanentReceiveError(err error) bool {
	var ce *client.ConfigError
	if errors.As(err, &ce) {
		return true
	}
	var se *client.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case client.CodeTopicNotFound, client.CodeConsumerGroupNotFound, client.CodeUnauthorized, client.CodeForbidden,
		client.CodeIllegalTopic, client.CodeIllegalConsumerGroup, client.CodeIllegalFilterExpression,
		client.CodeIllegalInvisibleTime, client.CodeIllegalPollingTime, client.CodeBadRequest,
		client.CodeUnrecognizedClientType, client.CodeUnsupported, client.CodeVersionUnsupported:
		return true
	}
	return false
}

// fail ends the source with err: the fetchers stop, Next emits what is
// queued and then returns err.
func (s *Source[T]) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q.fail(err) {
		s.log.Error("rmqflow: source stopped receiving", "err", err)
	}
	if s.stopFetch != nil {
		s.stopFetch()
	}
}

// giveBack makes fetched messages that the source will not emit visible
// again after d, and counts them under reason. Malformed ones cannot be
// given back (no handle); the broker redelivers them when they expire.
func (s *Source[T]) giveBack(ctx context.Context, b *binding, msgs []*client.ReceivedMessage, d time.Duration, reason string) {
	// A stop does not cut these RPCs (each is bounded by RequestTimeout);
	// Close does when its own context ends first.
	ctx = s.rpcCtx
	failed := 0
	for _, m := range msgs {
		if missing(m) != "" {
			continue
		}
		if _, err := b.c.ChangeInvisibleDuration(ctx, client.ChangeInvisibleRequest{
			Group: b.group, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle,
			LiteTopic: m.LiteTopic, InvisibleDuration: d,
		}); err != nil {
			failed++
		}
	}
	s.smetrics.released(ctx, reason, len(msgs))
	if failed > 0 {
		s.log.Warn("rmqflow: some messages were not given back; they come back when their invisibility ends", "reason", reason, "count", failed)
	}
}

// missing names the first thing an ack needs that m lacks, or "".
func missing(m *client.ReceivedMessage) string {
	switch {
	case m.ReceiptHandle == "":
		return "receipt handle"
	case m.Topic == "":
		return "topic"
	case m.MessageID == "":
		return "message id"
	}
	return ""
}

func (s *Source[T]) entries(b *binding, msgs []*client.ReceivedMessage, polledAt time.Time) []*entry {
	out := make([]*entry, len(msgs))
	for i, m := range msgs {
		if m.Topic == b.topic {
			m.Topic = b.topic // one string for every message, not a copy each (issue 9, memory)
		}
		inv := m.InvisibleDuration
		if inv == 0 {
			inv = s.cfg.InvisibleDuration
		}
		// The poll was sent at polledAt: the broker's clock started no earlier.
		out[i] = &entry{msg: m, bind: b, handle: m.ReceiptHandle, visibleAt: polledAt.Add(inv), receivedAt: s.clk.now()}
		if what := missing(m); what != "" {
			out[i].bad = &MalformedMessageError{MessageID: m.MessageID, Missing: what}
		}
	}
	return out
}

// Next returns the next message, blocking until one is queued, ctx ends, or
// the source ends. Safe for concurrent use.
//
// Unless DisableQueueRenewal is set, an emitted message has at least half of
// InvisibleDuration of invisibility left: a message that waited in the queue
// until less was left is renewed before it is returned (and, if that renewal
// fails, given up to the broker's redelivery instead of being returned).
//
// Order: one goroutine calling Next gets each lite topic's (and FIFO
// group's) messages in the order the broker delivered them; a message given
// up this way takes the later messages of its lite topic queued behind it
// with it (they come back after it). Several goroutines calling Next at once
// each get messages in that order, but which goroutine handles a lite
// topic's next message first is theirs to decide: hand messages on by lite
// topic (as the Runner does) when order matters.
//
// A message is returned with a nil error; its own Err tells whether it
// decoded (a *DecodeError or the Decoder's error) or came malformed from the
// broker (ErrMalformedMessage). The errors of Next itself are:
//   - ctx.Err() when ctx ends first;
//   - ErrSourceClosed after Close, or after Drain once the queue is empty;
//   - a *ReceiveError once the source has ended on a receive failure (a
//     permanent refusal, or an outage longer than MaxOutage) and the queue
//     is empty; every later call returns it again.
func (s *Source[T]) Next(ctx context.Context) (*AckableMessage[T], error) {
	var (
		e        *entry
		value    T
		decodeEr error
		meta     Metadata
	)
	for {
		var err error
		if e, err = s.q.take(ctx); err != nil {
			return nil, err
		}
		meta = metadataOf(e.msg, e.receivedAt)
		value, decodeEr = *new(T), nil
		if e.bad == nil {
			value, decodeEr = s.dec.Decode(e.msg.Body, &meta)
		}
		if decodeEr != nil && !s.leaseUndecodable {
			s.cutUndecodable(ctx, e) // instead of a renewal: it is emitted in any case
			break
		}
		if s.freshen(ctx, e) {
			break
		}
		// e comes back when its invisibility ends; what its lite topic or
		// message group queued behind it must not run ahead of it. On the
		// broker those messages come after e (a lite topic or FIFO group
		// delivers nothing more while e is in flight), so they are left to
		// come back with it, in order.
		if n := len(s.q.dropFollowers(e)); n > 0 {
			s.log.Warn("rmqflow: messages queued behind a message that was not emitted are left to come back behind it, in order",
				"message_id", e.msg.MessageID, "count", n)
			s.smetrics.released(ctx, "order", n)
		}
	}
	e.mu.Lock()
	handle := e.handle
	e.mu.Unlock()
	m := &AckableMessage[T]{
		Meta: meta,
		Handle: ReceiptHandle{
			Endpoints: s.cfg.Endpoints, Namespace: s.cfg.Namespace, Group: e.bind.group,
			Topic: e.msg.Topic, LiteTopic: e.msg.LiteTopic, MessageID: e.msg.MessageID,
			Handle: handle, DeliveryAttempt: e.msg.DeliveryAttempt,
		},
	}
	if e.bad != nil {
		m.Err = e.bad
		s.smetrics.malformed(ctx)
		s.metrics.emitted(ctx)
		return m, nil
	}
	m.Value, m.Err = value, decodeEr
	if m.Err != nil {
		s.metrics.decodeFailed(ctx)
	}
	// A message that failed to decode is leased only under a Runner, whose
	// handler decides on it (UndecodableInvisibleDuration).
	if s.leases != nil && (m.Err == nil || s.leaseUndecodable) {
		m.lease = s.leases.add(m.Handle, e.visibleAt)
		m.Handle.owner = s.leases // encoding the handle hands the delivery off
	}
	s.metrics.emitted(ctx)
	return m, nil
}

// Messages iterates over Next until ctx ends or the source closes; a Next
// error other than ErrSourceClosed (ctx.Err(), or the *ReceiveError that
// ended the source) is yielded once with a nil message, then the iteration
// ends.
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
// ErrSourceClosed. Queued messages go on being renewed until they are
// emitted (and leases until Close). It returns at once; call Close when
// done. A Drain before Start leaves nothing to emit.
func (s *Source[T]) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.draining {
		return
	}
	s.draining = true
	s.q.closeWhenEmpty()
	if s.stopFetch != nil {
		s.stopFetch()
	}
}

// Close stops receiving, waits for the fetch goroutines, gives every message
// still queued back to the group (ChangeInvisibleDuration to
// ReleaseInvisibleDuration), stops lease renewal, and closes the consumer
// sessions. It unregisters the source's metric callback (the queue depth).
// Messages already emitted stay valid: ack them through any Acker or
// AckPool.
//
// ctx bounds all of it, the renewals on the wire included: Close waits for
// those (cut short, a renewal may change a message's handle on the broker
// without this process learning the new one), and when ctx ends first it
// cancels them and returns an error wrapping ctx.Err(). A message whose
// renewal was cancelled keeps the handle it had here; an ack of it may then
// not take, and it comes back when its invisibility ends (a duplicate,
// never a loss).
func (s *Source[T]) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.cancelStart != nil {
		s.cancelStart()
	}
	done := s.startDone
	s.mu.Unlock()
	defer s.abandon() // nothing of it is on the wire any more
	s.unobserve()
	if done != nil {
		<-done // a Start in progress gives up and closes what it opened
	}
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if !running {
		s.q.close()
		return s.releasePool(ctx)
	}
	var errs []error
	s.stopFetch()
	if err := s.join(ctx, &s.fetchWG, "messages being given back"); err != nil {
		errs = append(errs, err)
	}
	s.stopRun()
	if err := s.join(ctx, &s.wg, "renewals"); err != nil {
		errs = append(errs, err)
	}
	left := s.q.close()
	if err := s.release(ctx, left); err != nil {
		errs = append(errs, err)
	}
	s.closeClients(ctx)
	if err := s.releasePool(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// join waits for the goroutines of wg, which have been told to stop. The
// RPCs a stop does not cut (lease renewals, messages being given back)
// have until ctx ends: then they are cancelled (abandon), the goroutines
// end at once, and join returns an error naming what was on the wire.
func (s *Source[T]) join(ctx context.Context, wg *sync.WaitGroup, what string) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.abandon()
	<-done
	return fmt.Errorf("rmqflow: %s still on the wire at close were cancelled: %w", what, ctx.Err())
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
		if e.bad != nil {
			continue // no handle to release with
		}
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
// invisibility ends (earlier in a crowd: renewSlots.lead), swapping in the
// handle the broker returns, and gives
// back those queued for longer than MaxQueueAge. It runs until Close, Drain
// included.
func (s *Source[T]) renewQueued(ctx context.Context) {
	tick := make(chan struct{}, 1)
	for {
		stop := s.clk.afterFunc(renewTick(s.cfg.RenewalAheadTime), func() {
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
		now := s.clk.now()
		most := mostLead(s.cfg.InvisibleDuration, s.cfg.RenewalAheadTime)
		due, old := s.q.scan(now, s.slots.lead(s.cfg.RenewalAheadTime, most), most, s.cfg.MaxQueueAge)
		if len(old) > 0 {
			s.giveBackOld(ctx, old)
		}
		s.renewPass(ctx, due)
	}
}

// renewPass renews the due entries (soonest expiry first, as scan returns
// them), up to RenewalConcurrency at once with the leases' renewals, and
// returns once all are answered.
func (s *Source[T]) renewPass(ctx context.Context, due []*entry) {
	if len(due) == 0 {
		return
	}
	p := newRenewalPass("queue", s.log, s.metrics)
	var wg sync.WaitGroup
	for _, e := range due {
		if s.slots.acquire(ctx) != nil {
			break
		}
		p.add()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.slots.release()
			s.renewEntry(ctx, e, p)
		}()
	}
	p.dispatched()
	wg.Wait()
}

// giveBackOld releases entries that waited longer than MaxQueueAge.
func (s *Source[T]) giveBackOld(ctx context.Context, old []*entry) {
	byBinding := map[*binding][]*client.ReceivedMessage{}
	for _, e := range old {
		e.mu.Lock()
		m := *e.msg
		m.ReceiptHandle = e.handle
		e.mu.Unlock()
		byBinding[e.bind] = append(byBinding[e.bind], &m)
	}
	for b, msgs := range byBinding {
		s.giveBack(ctx, b, msgs, s.cfg.ReleaseInvisibleDuration, "max_queue_age")
	}
}

// minEmitInvisibility is the least invisibility an emitted message has left:
// half of InvisibleDuration.
func (s *Source[T]) minEmitInvisibility() time.Duration { return s.cfg.InvisibleDuration / 2 }

// freshen renews a just-taken entry that has less than minEmitInvisibility
// left. It reports whether the entry may be emitted: false when that renewal
// failed (the message is then left to the broker's redelivery, and counted).
func (s *Source[T]) freshen(ctx context.Context, e *entry) bool {
	if s.cfg.DisableQueueRenewal || e.bad != nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.visibleAt.Sub(s.clk.now()) >= s.minEmitInvisibility() {
		return true
	}
	if err := s.renewLocked(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("rmqflow: renewing a message at emission failed; it is not emitted and comes back when its invisibility ends",
			"message_id", e.msg.MessageID, "err", err)
		s.smetrics.released(ctx, "renewal_failed", 1)
		return false
	}
	return true
}

// cutUndecodable cuts the invisibility left to a taken entry whose body did
// not decode to UndecodableInvisibleDuration, when more is left, and swaps in
// the new handle. A failure is logged: the message is emitted all the same,
// with what it has.
func (s *Source[T]) cutUndecodable(ctx context.Context, e *entry) {
	d := s.cfg.UndecodableInvisibleDuration
	if d == Forever {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.visibleAt.Sub(s.clk.now()) <= d {
		return
	}
	t0 := s.clk.now()
	h, err := e.bind.c.ChangeInvisibleDuration(context.WithoutCancel(ctx), client.ChangeInvisibleRequest{
		Group: e.bind.group, Topic: e.msg.Topic, MessageID: e.msg.MessageID, ReceiptHandle: e.handle,
		LiteTopic: e.msg.LiteTopic, InvisibleDuration: d,
	})
	if err != nil {
		s.log.Warn("rmqflow: shortening the invisibility of a message that did not decode failed; it is emitted with what it has left",
			"message_id", e.msg.MessageID, "err", err)
		return
	}
	e.handle = h
	e.visibleAt = t0.Add(d)
}

func (s *Source[T]) renewEntry(ctx context.Context, e *entry, p *renewalPass) {
	var lateBy time.Duration
	defer func() {
		var name string
		if lateBy > 0 {
			name = ReceiptHandle{Group: e.bind.group, Topic: e.msg.Topic, LiteTopic: e.msg.LiteTopic,
				MessageID: e.msg.MessageID, DeliveryAttempt: e.msg.DeliveryAttempt}.String()
		}
		p.answered(ctx, name, lateBy)
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.taken {
		return // emitted meanwhile: leases (if on) take over
	}
	deadline := e.visibleAt
	err := s.renewLocked(ctx, e)
	if ctx.Err() != nil {
		return // cut by Close
	}
	if answered := s.clk.now(); answered.After(deadline) {
		lateBy = answered.Sub(deadline)
	}
	if err != nil {
		s.log.Warn("rmqflow: renewing a queued message failed", "message_id", e.msg.MessageID, "err", err)
	}
}

// renewLocked renews e (e.mu held) for InvisibleDuration and swaps in the
// new handle.
func (s *Source[T]) renewLocked(ctx context.Context, e *entry) error {
	t0 := s.clk.now()
	h, err := e.bind.c.ChangeInvisibleDuration(ctx, client.ChangeInvisibleRequest{
		Group: e.bind.group, Topic: e.msg.Topic, MessageID: e.msg.MessageID, ReceiptHandle: e.handle,
		LiteTopic: e.msg.LiteTopic, InvisibleDuration: s.cfg.InvisibleDuration,
	})
	if ctx.Err() == nil {
		s.slots.observe(s.clk.now().Sub(t0))
	}
	s.metrics.renewed(ctx, "queue", err)
	if err != nil {
		return err
	}
	e.handle = h
	e.visibleAt = t0.Add(s.cfg.InvisibleDuration)
	return nil
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
