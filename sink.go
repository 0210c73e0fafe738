package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/backoff"
)

// Defaults of SinkConfig.
const (
	DefaultSinkMaxAttempts = 3
	DefaultSinkConcurrency = 4
	DefaultSinkBatchSize   = 32
	DefaultSinkLinger      = 5 * time.Millisecond
	// MaxSinkConcurrency and MaxSinkBatchSize bound SinkConfig's
	// Concurrency and BatchSize: the sink allocates queues of
	// Concurrency×BatchSize records.
	MaxSinkConcurrency = 1024
	MaxSinkBatchSize   = 1024
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	Connection
	// Topic is the destination topic (the LITE main topic for lite
	// records). Required.
	Topic string
	// LiteTopic is the lite topic of records that name none. Empty: records
	// without a lite topic are normal messages.
	LiteTopic string
	// MaxAttempts bounds the calls that may store a record: it is retried
	// after a retriable failure while fewer were made. A call of a batch
	// refused as a whole (one bad record refuses its batch and stores none
	// of it; its records then go one per call) does not count. Default 3.
	MaxAttempts int
	// Concurrency is the number of senders, each sending one batch at a
	// time (the records of a batch with a lite topic or message group go
	// one per call, up to 16 lite topics or groups at once). All records of
	// one lite topic, and all of one message group, go through the same
	// sender, one call after another. Default 4.
	Concurrency int
	// BatchSize caps the records a sender takes at once, and so the records
	// of one SendMessage (records with a lite topic or message group always
	// go one per call; docs/broker-semantics.md, scenario k). Default 32.
	BatchSize int
	// Linger is how long a record waits for others to share its call.
	// Default 5 ms.
	Linger time.Duration
	// Unordered drops the order of records of one lite topic or message
	// group: any free sender takes them, and a sender sends its batch's
	// records with a lite topic or group concurrently, each in a call of its
	// own (up to 16 at once). One lite topic is then no longer limited to one
	// record per round trip, but its records may be stored in any order.
	// Default false: each lite topic's and group's records are stored in the
	// order written.
	Unordered bool
}

func (c SinkConfig) withDefaults() SinkConfig {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultSinkMaxAttempts
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultSinkConcurrency
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultSinkBatchSize
	}
	if c.Linger == 0 {
		c.Linger = DefaultSinkLinger
	}
	return c
}

// Validate reports what NewSink would refuse in c (an *OptionError naming
// the field, or a Connection error) without connecting: for configurations
// built long before their sink, such as a pipeline's.
func (c SinkConfig) Validate() error { return c.validate() }

func (c SinkConfig) validate() error {
	if err := c.Connection.validate(); err != nil {
		return err
	}
	switch {
	case c.Topic == "":
		return optionError("Topic", "required")
	case c.MaxAttempts < 0:
		return optionError("MaxAttempts", "must not be negative")
	case c.Concurrency < 0 || c.Concurrency > MaxSinkConcurrency:
		return optionError("Concurrency", fmt.Sprintf("must be 0 (default) to %d", MaxSinkConcurrency))
	case c.BatchSize < 0 || c.BatchSize > MaxSinkBatchSize:
		return optionError("BatchSize", fmt.Sprintf("must be 0 (default) to %d", MaxSinkBatchSize))
	case c.Linger < 0:
		return optionError("Linger", "must not be negative")
	}
	return nil
}

// Record is one message for a Sink.
type Record struct {
	// LiteTopic overrides SinkConfig.LiteTopic for this record.
	LiteTopic    string
	Tag          string
	Keys         []string
	Properties   map[string]string
	MessageGroup string
	DeliveryTime time.Time
	Body         []byte
}

// SendFuture is the pending result of Sink.Write.
type SendFuture struct {
	done     chan struct{}
	accepted string // the id Write fixed; never changes once Write returned
	id       string
	err      error
	ep       *epoch // the Flush epoch the record counts in
}

// Done is closed when the result is known.
func (f *SendFuture) Done() <-chan struct{} { return f.done }

// Result returns the message id and the error (for instance one satisfying
// errors.Is(err, client.ErrIllegalLiteTopic)); valid after Done. The id is
// fixed when the record is accepted and every attempt sends under it, so it
// is set on failure too when the record was accepted (the broker may hold a
// copy under it: a failure after a lost response); it is empty only for a
// record never accepted (written after Close, or its Write's ctx ended).
func (f *SendFuture) Result() (string, error) { return f.id, f.err }

// Wait waits for the result or ctx. When ctx ends first it returns ctx's
// error with the id the record was accepted under (empty if it was not): the
// record is still being sent and may be stored under that id.
func (f *SendFuture) Wait(ctx context.Context) (string, error) {
	select {
	case <-f.done:
		return f.id, f.err
	case <-ctx.Done():
		return f.accepted, ctx.Err()
	}
}

// epoch counts the records written between two Flushes. Its count holds one
// per record not yet settled, one while it is the current epoch (until a
// Flush seals it), and one while the epoch before it is not done; done
// closes when the count reaches zero, so an epoch is done only when its
// records and every earlier one are settled.
type epoch struct {
	n    atomic.Int64
	done chan struct{}
	next *epoch // set when a Flush seals this epoch, before it drops its token
}

func newEpoch(tokens int64) *epoch {
	e := &epoch{done: make(chan struct{})}
	e.n.Store(tokens)
	return e
}

// release drops one token of e; the last one closes e and releases the
// token e's successor holds on it.
func (e *epoch) release() {
	for e != nil && e.n.Add(-1) == 0 {
		close(e.done)
		// Unlink: a future kept by its caller must not keep every later
		// epoch reachable.
		next := e.next
		e.next = nil
		e = next
	}
}

// ErrSinkClosed is wrapped by the result of a Write after Close or blocked
// in Write when Close began, and of an accepted record still unsent when
// Close's ctx ended.
var ErrSinkClosed = errors.New("rmqflow: sink closed")

// Sink produces records to one topic with batching, bounded concurrency and
// retries. Errors are per record; one bad record never fails another. Each
// record gets its message id when Write accepts it, and every retry sends it
// under that id.
//
// Records of one lite topic, or of one message group, keep their order: one
// written after another's Write returned is stored after it. They go through
// one sender, which sends a record only once every earlier record of its lite
// topic or group has its result, retries included. A record that fails for
// good leaves a gap (its future reports the error); the records after it are
// still sent. Records with neither are sent by whichever sender is free, in
// no particular order; so are all records with SinkConfig.Unordered.
type Sink struct {
	cfg     SinkConfig
	c       *client.Client
	metrics *metrics

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed when Close begins: blocked Writes give up
	writers sync.WaitGroup
	in      chan pendingSend   // records with no order key; closed by Close once no Write can send on it
	keyed   []chan pendingSend // per sender: the records of the lite topics and groups hashed to it
	seed    maphash.Seed
	epoch   *epoch // the records written since the last Flush; guarded by mu
	// flushSealed, when set (tests), is called by Flush once it has sealed
	// its epoch: records written after that are not waited for.
	flushSealed func()
	workers     sync.WaitGroup
	// sendCtx bounds every SendMessage and retry wait; Close cancels it when
	// its own ctx ends first.
	sendCtx    context.Context
	cancelSend context.CancelCauseFunc
}

type pendingSend struct {
	msg *client.Message
	f   *SendFuture
}

// NewSink connects a producer session and starts the senders.
func NewSink(ctx context.Context, cfg SinkConfig) (*Sink, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c, err := client.New(cfg.clientConfig())
	if err != nil {
		return nil, err
	}
	if _, err := c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{cfg.Topic}}); err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	s := &Sink{cfg: cfg, c: c, metrics: newMetrics(cfg.Meter), in: make(chan pendingSend, cfg.BatchSize*cfg.Concurrency),
		keyed: make([]chan pendingSend, cfg.Concurrency), seed: maphash.MakeSeed(), closing: make(chan struct{}), epoch: newEpoch(1)}
	s.sendCtx, s.cancelSend = context.WithCancelCause(context.Background())
	for i := range s.keyed {
		s.keyed[i] = make(chan pendingSend, cfg.BatchSize)
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			s.worker(s.keyed[i])
		}()
	}
	return s, nil
}

// Write queues rec and returns its future; it blocks only while the queue is
// full, until ctx ends (the future then holds ctx's error) or Close begins
// (ErrSinkClosed). A ctx that has ended already queues nothing. A record
// Write queued is sent or fails with a result; it is never dropped.
func (s *Sink) Write(ctx context.Context, rec Record) *SendFuture {
	f := &SendFuture{done: make(chan struct{})}
	m := &client.Message{Topic: s.cfg.Topic, LiteTopic: rec.LiteTopic, Tag: rec.Tag, Keys: rec.Keys,
		Properties: rec.Properties, MessageGroup: rec.MessageGroup, DeliveryTime: rec.DeliveryTime, Body: rec.Body}
	if m.LiteTopic == "" {
		m.LiteTopic = s.cfg.LiteTopic
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up already: nothing is sent.
		f.err = err
		close(f.done)
		return f
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.err = ErrSinkClosed
		close(f.done)
		return f
	}
	f.ep = s.epoch
	f.ep.n.Add(1)
	s.writers.Add(1)
	s.mu.Unlock()
	defer s.writers.Done()
	// The id is fixed here, before the first attempt: retries reuse it.
	m.MessageID = client.NewMessageID()
	f.id = m.MessageID // set before the record is queued: the sender writes f next
	f.accepted = m.MessageID
	p := pendingSend{msg: m, f: f}
	q := s.queueOf(m)
	select {
	case q <- p: // room in the queue: accepted even if Close has begun
		return f
	default:
	}
	select {
	case q <- p:
	case <-ctx.Done():
		f.accepted, f.id, f.err = "", "", ctx.Err()
		f.settle()
	case <-s.closing:
		f.accepted, f.id, f.err = "", "", fmt.Errorf("%w: Close began while Write waited for room in the queue", ErrSinkClosed)
		f.settle()
	}
	return f
}

// orderKey is the key whose records m keeps its order with: its lite topic,
// else its message group ("l"/"g" keep the two apart), else "" for none.
func orderKey(m *client.Message) string {
	switch {
	case m.LiteTopic != "":
		return "l" + m.LiteTopic
	case m.MessageGroup != "":
		return "g" + m.MessageGroup
	}
	return ""
}

// queueOf is the queue of m: its sender's own queue when m has an order key,
// else the queue every sender takes from.
func (s *Sink) queueOf(m *client.Message) chan pendingSend {
	key := orderKey(m)
	if key == "" || s.cfg.Unordered {
		return s.in
	}
	return s.keyed[maphash.String(s.seed, key)%uint64(len(s.keyed))]
}

// Send writes recs and waits for all their results, in order.
func (s *Sink) Send(ctx context.Context, recs ...Record) ([]string, []error) {
	fs := make([]*SendFuture, len(recs))
	for i, r := range recs {
		fs[i] = s.Write(ctx, r)
	}
	ids, errs := make([]string, len(recs)), make([]error, len(recs))
	for i, f := range fs {
		ids[i], errs[i] = f.Wait(ctx)
	}
	return ids, errs
}

// Flush waits until every record whose Write returned before Flush began
// has its result, or ctx ends. Records written meanwhile are not waited for.
// It is safe to call concurrently with Write, Close and other Flushes.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	e := s.epoch
	s.epoch = newEpoch(2) // its own token, and one until e is done
	e.next = s.epoch
	hook := s.flushSealed
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	e.release() // e's own token: e is done once its records and the earlier epochs are
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle closes f's Done and counts it settled in its Flush epoch; f's
// result must be set.
func (f *SendFuture) settle() {
	ep := f.ep
	f.ep = nil
	close(f.done)
	ep.release()
}

// Close stops accepting records: later Writes, and Writes blocked on a full
// queue, end with ErrSinkClosed. It then sends every record it had accepted
// and closes the producer. When ctx ends first, the records not yet sent fail
// with an error wrapping ErrSinkClosed (one whose SendMessage was on the wire
// may still have been stored, under the id its future reports) and Close
// returns ctx's error; either way every accepted record has its result when
// Close returns. Close never panics and is safe to call concurrently with
// Write; a second Close returns nil at once.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.closing)
	// Writes past the closed check are leaving their select now; once they
	// have, nothing sends on s.in and it can be closed.
	s.writers.Wait()
	close(s.in)
	for _, q := range s.keyed {
		close(q)
	}
	err := s.Flush(ctx)
	if err != nil {
		s.cancelSend(fmt.Errorf("%w: Close's context ended before the record was sent (%v)", ErrSinkClosed, err))
	}
	s.workers.Wait()
	s.cancelSend(ErrSinkClosed)
	return errors.Join(err, s.c.Close(ctx))
}

// worker is one sender: it takes records from the shared queue and from its
// own (own), collects a batch for up to Linger and sends it, retries
// included, before it takes the next: so a record of a lite topic or group
// leaves only after the earlier ones of its key have their results.
func (s *Sink) worker(own <-chan pendingSend) {
	in := (<-chan pendingSend)(s.in)
	batch := make([]pendingSend, 0, s.cfg.BatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for in != nil || own != nil {
		var first pendingSend
		select {
		case p, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			first = p
		case p, ok := <-own:
			if !ok {
				own = nil
				continue
			}
			first = p
		}
		batch = append(batch[:0], first)
		timer.Reset(s.cfg.Linger)
	collect:
		for len(batch) < s.cfg.BatchSize && (in != nil || own != nil) {
			select {
			case p, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				batch = append(batch, p)
			case p, ok := <-own:
				if !ok {
					own = nil
					continue
				}
				batch = append(batch, p)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop() // Go 1.23+ timers: no stale tick survives Stop
		s.send(batch)
	}
}

// keyChains is the most lite topics or message groups of one batch a sender
// sends at once.
const keyChains = 16

// send sends one batch and returns when every record of it has its result.
// Records of a lite topic or message group go one per call (lite records must,
// docs/broker-semantics.md scenario k; and the broker puts a multi-message
// call in one queue, which a call holding several groups would mix): those of
// one key one after another, each with its retries before the next,
// different keys concurrently. The other records go together.
func (s *Sink) send(batch []pendingSend) {
	var (
		plain  []pendingSend
		chains map[string][]pendingSend
		order  []string
	)
	for _, p := range batch {
		k := orderKey(p.msg)
		if k == "" {
			plain = append(plain, p)
			continue
		}
		if s.cfg.Unordered {
			k = strconv.Itoa(len(order)) // a chain of its own: sent concurrently with the others
		}
		if chains == nil {
			chains = map[string][]pendingSend{}
		}
		if _, ok := chains[k]; !ok {
			order = append(order, k)
		}
		chains[k] = append(chains[k], p)
	}
	sendChain := func(chain []pendingSend) {
		for _, p := range chain {
			s.sendRetrying([]pendingSend{p}, 0)
		}
	}
	if len(order) == 1 && len(plain) == 0 {
		sendChain(chains[order[0]])
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, keyChains)
	for _, k := range order {
		chain := chains[k]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			sendChain(chain)
		}()
	}
	if len(plain) > 0 {
		s.sendRetrying(plain, 0)
	}
	wg.Wait()
}

// sendRetrying sends records in one call, retrying those that failed
// retriably, each under the id Write gave it, in their order; tried is how
// often they were sent before (MaxAttempts bounds the sum). A multi-message
// SendMessage is stored as one batch, all or nothing (the proxy answers it
// with one entry).
func (s *Sink) sendRetrying(batch []pendingSend, tried int) {
	ctx := s.sendCtx
	todo := batch
	bo := backoff.New(200*time.Millisecond, 5*time.Second)
	for attempt := tried + 1; len(todo) > 0; attempt++ {
		if ctx.Err() != nil {
			// Close gave up waiting: fail what is left, never drop it.
			s.finish(todo, context.Cause(ctx))
			return
		}
		msgs := make([]*client.Message, len(todo))
		for i, p := range todo {
			msgs[i] = p.msg
		}
		res, err := s.c.Send(ctx, msgs...)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		if err != nil && len(todo) > 1 && !client.IsRetriable(err) {
			// One bad record fails a whole request, which stores none of
			// them: isolate it by sending each record on its own. This
			// call stored nothing, so it does not count toward MaxAttempts;
			// the earlier ones may have, and do.
			for _, p := range todo {
				s.sendRetrying([]pendingSend{p}, attempt-1)
			}
			return
		}
		var retry []pendingSend
		for i, p := range todo {
			e := err
			id := p.msg.MessageID
			if e == nil {
				e = res[i].Err
				if res[i].MessageID != "" {
					id = res[i].MessageID
				}
			}
			if e != nil && client.IsRetriable(e) && attempt < s.cfg.MaxAttempts && ctx.Err() == nil {
				retry = append(retry, p)
				continue
			}
			s.metrics.sent(context.Background(), e)
			p.f.id, p.f.err = id, e
			p.f.settle()
		}
		todo = retry
		if len(todo) > 0 {
			backoff.Sleep(ctx, bo.Next())
		}
	}
}

// finish fails every record of ps with err.
func (s *Sink) finish(ps []pendingSend, err error) {
	for _, p := range ps {
		s.metrics.sent(context.Background(), err)
		p.f.id, p.f.err = p.msg.MessageID, err
		p.f.settle()
	}
}

// MessageType is a type of message a topic accepts (the broker's topic
// attribute message.type), as the topic's route names it.
type MessageType string

// The message types a route names.
const (
	MessageNormal      MessageType = "NORMAL"
	MessageFIFO        MessageType = "FIFO"
	MessageDelay       MessageType = "DELAY"
	MessageTransaction MessageType = "TRANSACTION"
	MessageLite        MessageType = "LITE"
)

// TopicTypes asks the broker which message types s's topic accepts: the
// accept_message_types of its route's queues. It is empty when the broker
// names none.
func (s *Sink) TopicTypes(ctx context.Context) ([]MessageType, error) {
	names, err := s.c.TopicMessageTypes(ctx, s.cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("rmqflow: sink %s: %w", s.cfg.Topic, err)
	}
	types := make([]MessageType, len(names))
	for i, n := range names {
		types[i] = MessageType(n)
	}
	return types, nil
}
