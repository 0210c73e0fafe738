package rmqwatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Defaults of SubscriberConfig.
const (
	DefaultNackBackoff    = 100 * time.Millisecond
	DefaultNackBackoffMax = 10 * time.Second
	DefaultCloseTimeout   = 30 * time.Second
	// DefaultLiteMaxMessageNum is SubscriberConfig.Source.MaxMessageNum in
	// lite mode when it is zero: a subscription receives its lite topic's
	// next message only once the one before was acked. A message received
	// behind one the handler nacks is delivered again with it, spending one
	// of the deliveries its group allows although it did not fail; with 1
	// no message ever waits behind another, and a message is delivered again
	// only for its own nacks.
	DefaultLiteMaxMessageNum = 1
)

// closeTimeout bounds Publisher.Close.
const closeTimeout = DefaultCloseTimeout

// ErrNacked is the cause the Subscriber reports for a message its handler
// nacked (for instance to DeadLetter, once a valve fired).
var ErrNacked = errors.New("rmqwatermill: the handler nacked the message")

// ErrWildcardGroup is in the error of a Subscribe in lite mode that the
// broker refused because the group is a wildcard lite group: a wildcard
// group takes no lite subscriptions, and each Watermill subscription
// subscribes the one lite topic it names.
var ErrWildcardGroup = errors.New("this group is a wildcard lite group: use an exact one (lite.bind.topic without lite.sub.wildcard=true) or leave Lite subscriptions out (read the whole main topic with an rmqflow.Source instead)")

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Source is the template of every subscription's rmqflow source: the
	// connection and the tuning (InvisibleDuration, AwaitDuration,
	// MaxMessageNum, FetchConcurrency, RenewalAheadTime, ...). Its Mode says
	// what a Watermill topic is:
	//
	//   - ModeLite (the default): a lite topic. Source.Lite holds exactly one
	//     binding, the LITE main topic and a lite group bound to it that is
	//     not a wildcard group, with no LiteTopics: each Subscribe subscribes
	//     the one lite topic it names (rmqflow.LiteBinding.LiteTopics).
	//   - ModeSimple: a RocketMQ topic, read by Source.Group with
	//     Source.Filter. Source.Topic must be empty.
	Source rmqflow.SourceConfig
	// NackBackoff is how long a nacked message stays invisible before the
	// broker delivers it again; it doubles with every delivery attempt up to
	// NackBackoffMax. Defaults 100 ms and 10 s.
	NackBackoff    time.Duration
	NackBackoffMax time.Duration
	// Valves bound the nacks of one message (rmqflow.ThrottleConfig, with
	// its defaults: 16 nacks by this subscription, at most the deliveries
	// its group allows — half of them in lite mode —, 24 h of age), judged by
	// the message's own nacks only. When one fires the message is given up
	// on, and it goes, in this order: to DeadLetter if set; to
	// DeadLetterTopic if set; else where Valves.OnValve says —
	// rmqflow.ValveDeadLetterQueue (the zero value, the default) moves it
	// to the group's dead-letter queue on the broker, %DLQ%<group>, and
	// rmqflow.ValveAck acks it: it is dropped, the only choice that loses it.
	// Either way it is logged (its handle, never its body) and counted in
	// rmqflow.runner.dead_lettered (Source.Connection.Meter). A Router's
	// PoisonQueue middleware usually takes failing messages long before.
	Valves rmqflow.ThrottleConfig
	// DeadLetterTopic parks a message a valve gave up on in a Watermill
	// topic of your own (rmqflow.DeadLetterToSink): a lite topic of
	// Source.Lite[0].Topic in lite mode, a RocketMQ topic in simple mode,
	// which Subscribe reads back. The copy keeps the body, tag, keys and
	// properties (so the UUID and metadata), plus where it came from and why
	// (rmqflow.PropertyDeadLetterOrigin, PropertyDeadLetterLiteTopic,
	// PropertyDeadLetterMessageID, PropertyDeadLetterCause, as metadata); the
	// message is acked once the broker stored the copy, and kept (tried
	// again after NackBackoffMax) if the write fails. Subscribe checks the
	// topic first (rmqflow.CheckDeadLetterSink): in simple mode a topic that
	// cannot store such a copy (a FIFO or LITE topic) fails Subscribe,
	// naming the types it accepts; a message whose write failed 3 times
	// (rmqflow.DefaultMaxDeadLetterFailures: a topic that refuses copies
	// since, an illegal lite topic name) goes where Valves.OnValve says
	// instead. Empty: see Valves. On
	// RocketMQ 5.5.0 a lite message in %DLQ%<group> is also delivered into
	// its lite topic again (MetaDeadLettered "true") and cannot be acked for
	// good: set DeadLetterTopic (or DeadLetter) to park lite messages for
	// good.
	DeadLetterTopic string
	// DeadLetter parks a message a valve gave up on in a place of your
	// own; returning nil acks it, an error keeps it (it is tried again after
	// NackBackoffMax; after rmqflow.DefaultMaxDeadLetterFailures (3) errors
	// for one message it goes where Valves.OnValve says instead). A delivery the Unmarshaler fails on is deferred like
	// a nacked one (it never reaches the handler) and reaches DeadLetter
	// (or DeadLetterTopic) raw: its body, its RocketMQ message id as UUID,
	// and the error in MetaUnmarshalError. Unset: see Valves.
	DeadLetter func(ctx context.Context, msg *message.Message, cause error) error
	// CloseTimeout bounds how long Close (or the end of a Subscribe's ctx)
	// waits for a handed-out message's Ack or Nack; then it is released to
	// the group. Default 30 s.
	CloseTimeout time.Duration
	// Unmarshaler builds the Watermill messages. Default DefaultMarshaler{}.
	Unmarshaler Unmarshaler
}

func (c SubscriberConfig) withDefaults() SubscriberConfig {
	if c.Source.Mode == rmqflow.ModeLite && c.Source.MaxMessageNum == 0 {
		c.Source.MaxMessageNum = DefaultLiteMaxMessageNum
	}
	if c.NackBackoff == 0 {
		c.NackBackoff = DefaultNackBackoff
	}
	if c.NackBackoffMax == 0 {
		c.NackBackoffMax = DefaultNackBackoffMax
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Unmarshaler == nil {
		c.Unmarshaler = DefaultMarshaler{}
	}
	return c
}

func (c SubscriberConfig) validate() error {
	switch c.Source.Mode {
	case rmqflow.ModeLite:
		if len(c.Source.Lite) != 1 {
			return errors.New("rmqwatermill: in ModeLite, SubscriberConfig.Source.Lite holds exactly one binding (the LITE main topic and its lite group)")
		}
		if len(c.Source.Lite[0].LiteTopics) > 0 {
			return errors.New("rmqwatermill: SubscriberConfig.Source.Lite[0].LiteTopics must be empty: each Subscribe names its lite topic")
		}
	case rmqflow.ModeSimple:
		if c.Source.Topic != "" {
			return errors.New("rmqwatermill: SubscriberConfig.Source.Topic must be empty: each Subscribe names its topic")
		}
		if c.Source.Group == "" {
			return errors.New("rmqwatermill: SubscriberConfig.Source.Group is required in ModeSimple")
		}
	default:
		return fmt.Errorf("rmqwatermill: unknown mode %d", c.Source.Mode)
	}
	switch {
	case c.NackBackoff < 0, c.NackBackoffMax < 0:
		return errors.New("rmqwatermill: NackBackoff and NackBackoffMax must not be negative")
	case c.CloseTimeout < 0:
		return errors.New("rmqwatermill: CloseTimeout must not be negative")
	case c.DeadLetter != nil && c.DeadLetterTopic != "":
		return errors.New("rmqwatermill: SubscriberConfig.DeadLetter and DeadLetterTopic exclude each other: set one place to park messages")
	case c.Valves.OnValve == rmqflow.ValveAck && (c.DeadLetter != nil || c.DeadLetterTopic != ""):
		return errors.New("rmqwatermill: SubscriberConfig.Valves.OnValve ValveAck drops the messages that DeadLetter or DeadLetterTopic would park: set one")
	}
	return nil
}

// deadLetterSink is the sink configuration of DeadLetterTopic.
func (c SubscriberConfig) deadLetterSink() rmqflow.SinkConfig {
	sc := rmqflow.SinkConfig{Connection: c.Source.Connection, Topic: c.DeadLetterTopic}
	if c.Source.Mode == rmqflow.ModeLite {
		sc.Topic, sc.LiteTopic = c.Source.Lite[0].Topic, c.DeadLetterTopic
	}
	return sc
}

// Subscriber is a Watermill message.Subscriber over rmqflow: each Subscribe
// runs one rmqflow source and runner that hands out one message at a time,
// and the next only after the handler called Ack or Nack. Ack acks the
// message through the process's ack pool; Nack defers it (it stays
// invisible for NackBackoff, growing per attempt, then the broker delivers
// it again), so the broker, not the process, keeps the failed message. In
// lite mode a lite topic is delivered in order, and a nacked message holds
// its lite topic back until it returns.
type Subscriber struct {
	cfg SubscriberConfig

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup

	dlqMu sync.Mutex
	dlq   *rmqflow.Sink // DeadLetterTopic's, opened by the first Subscribe
}

// NewSubscriber checks cfg and returns a subscriber; each Subscribe connects.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Subscriber{cfg: cfg.withDefaults(), closing: make(chan struct{})}, nil
}

// subscription is one Subscribe: its runner's handler hands messages to out.
type subscription struct {
	cfg      *SubscriberConfig
	ctx      context.Context // Subscribe's: messages carry its values
	out      chan *message.Message
	closeCtx context.Context // cancelled when the subscription begins to close
}

// Subscribe connects a source to topic (see SubscriberConfig.Source) and
// returns the channel of its messages; it fails at once when the broker
// refuses the subscription (an unknown topic or group, for instance). The
// channel is closed once ctx has ended or Close was called, and the message
// handed out has been acked, nacked or released (CloseTimeout); the
// messages fetched but not handed out are released to the group at once.
// Each message's Context carries ctx's values and is cancelled when the
// handler acks or nacks it, or when the subscription closes.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic == "" {
		return nil, errors.New("rmqwatermill: subscribe: empty topic")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.subs.Add(1)
	s.mu.Unlock()
	started := false
	defer func() {
		if !started {
			s.subs.Done()
		}
	}()

	sc := s.cfg.Source
	if sc.Mode == rmqflow.ModeLite {
		b := sc.Lite[0]
		b.LiteTopics = []string{topic}
		sc.Lite = []rmqflow.LiteBinding{b}
	} else {
		sc.Topic = topic
	}
	src, err := rmqflow.NewSource(sc, rmqflow.BytesDecoder())
	if err != nil {
		return nil, fmt.Errorf("rmqwatermill: subscribe %s: %w", topic, err)
	}
	closeCtx, beginClose := context.WithCancel(context.Background())
	sub := &subscription{cfg: &s.cfg, ctx: ctx, out: make(chan *message.Message), closeCtx: closeCtx}
	run, err := rmqflow.NewRunner(src, sub.handle, rmqflow.RunnerConfig{
		Concurrency:     1, // Watermill hands out the next message after Ack or Nack
		ErrorBackoff:    s.cfg.NackBackoff,
		ErrorBackoffMax: s.cfg.NackBackoffMax,
		ErrorValves:     s.cfg.Valves,
		ShutdownTimeout: s.cfg.CloseTimeout,
		// The give-up log lines name the Subscriber's settings: its user
		// does not hold its Runner.
		Hints: rmqflow.RunnerHints{DeadLetter: "SubscriberConfig.DeadLetterTopic (or DeadLetter)",
			Drop: "SubscriberConfig.Valves.OnValve = rmqflow.ValveAck"},
	})
	if err != nil {
		beginClose()
		_ = src.Close(context.Background())
		return nil, fmt.Errorf("rmqwatermill: subscribe %s: %w", topic, err)
	}
	if s.cfg.DeadLetterTopic != "" {
		dlq, err := s.deadLetterSink(ctx)
		if err != nil {
			beginClose()
			_ = src.Close(context.Background())
			return nil, fmt.Errorf("rmqwatermill: subscribe %s: SubscriberConfig.DeadLetterTopic %s: %w", topic, s.cfg.DeadLetterTopic, err)
		}
		run.SetDeadLetter(rmqflow.DeadLetterToSink[[]byte](dlq))
	}
	if dl := s.cfg.DeadLetter; dl != nil {
		run.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[[]byte], cause error) error {
			msg, err := s.cfg.Unmarshaler.Unmarshal(m)
			if err != nil {
				// The message that cannot be unmarshaled is the one most in
				// need of parking: hand over its raw form.
				msg = rawMessage(m, err)
			}
			msg.SetContext(ctx)
			return dl(ctx, msg, cause)
		})
	}
	if err := src.Start(ctx); err != nil {
		beginClose()
		_ = src.Close(context.Background())
		var se *client.StatusError
		if sc.Mode == rmqflow.ModeLite && errors.As(err, &se) && se.Op == "SyncLiteSubscription" && se.Code == client.CodeInternalServerError {
			// RocketMQ 5.5.0's answer to a lite subscription in a wildcard
			// group ("subscribe lite operation is not supported for this
			// group": ILLEGAL_OPERATION on the broker).
			return nil, fmt.Errorf("rmqwatermill: subscribe %s: group %s: %w: %w", topic, sc.Lite[0].Group, ErrWildcardGroup, err)
		}
		return nil, fmt.Errorf("rmqwatermill: subscribe %s: %w", topic, err)
	}
	started = true
	runCtx, stop := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer s.subs.Done()
		if err := run.Run(runCtx); err != nil {
			logger(sc.Connection).Error("rmqwatermill: subscription ended with an error", "topic", topic, "err", err)
		}
		close(ended)
		close(sub.out)
		beginClose()
	}()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closing:
		case <-ended:
		}
		// Run's ctx first: a message given back (or nacked) once its
		// context ends is then given back during the shutdown, where no
		// safety valve fires; in between, one could dead-letter it unworked.
		stop()       // the runner releases what it holds and shuts down
		beginClose() // no more handing out; message contexts end
	}()
	return sub.out, nil
}

// handle is the runner's handler: it hands m out and waits for Ack or Nack.
func (sub *subscription) handle(hctx context.Context, m *rmqflow.AckableMessage[[]byte]) (rmqflow.Decision, error) {
	msg, err := sub.cfg.Unmarshaler.Unmarshal(m)
	if err != nil {
		return rmqflow.Decision{}, fmt.Errorf("rmqwatermill: unmarshal %s: %w", m.Meta.MessageID, err)
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(sub.ctx))
	defer cancel()
	defer context.AfterFunc(sub.closeCtx, cancel)()
	defer context.AfterFunc(hctx, cancel)()
	msg.SetContext(mctx)
	select {
	case sub.out <- msg:
	case <-sub.closeCtx.Done():
		return rmqflow.Release(), nil // never handed out: back to the group at once
	case <-hctx.Done():
		return rmqflow.Release(), nil
	}
	select {
	case <-msg.Acked():
		return rmqflow.Ack(), nil
	case <-msg.Nacked():
		return rmqflow.Decision{}, ErrNacked // deferred with backoff, up to the valves
	case <-hctx.Done():
		// CloseTimeout passed with the message still out: give it back; an
		// Ack that comes later is lost, and the message comes again.
		return rmqflow.Release(), nil
	}
}

// Close closes every subscription and waits until their channels are
// closed (each within CloseTimeout, plus the time to release what they
// held). Subscribe after Close returns ErrClosed.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.subs.Wait()
	// Every subscription has ended, and with it every write to the
	// dead-letter topic (a dead-letter function returns once its write did).
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	if s.dlq != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
		defer cancel()
		return s.dlq.Close(ctx)
	}
	return nil
}

// deadLetterSink returns the sink of DeadLetterTopic, opening it the first
// time; a failed opening is tried again by the next call. It is checked
// when opened (rmqflow.CheckDeadLetterSink): a topic that cannot store a
// parked copy (in simple mode a FIFO or LITE topic) fails Subscribe before
// anything is received, where every park would fail otherwise.
func (s *Subscriber) deadLetterSink(ctx context.Context) (*rmqflow.Sink, error) {
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	if s.dlq == nil {
		sink, err := rmqflow.NewSink(ctx, s.cfg.deadLetterSink())
		if err != nil {
			return nil, err
		}
		if err := rmqflow.CheckDeadLetterSink(ctx, sink); err != nil {
			return nil, errors.Join(err, sink.Close(context.WithoutCancel(ctx)))
		}
		s.dlq = sink
	}
	return s.dlq, nil
}

func logger(c rmqflow.Connection) *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// MetaUnmarshalError is set on the message DeadLetter gets for a delivery the
// Unmarshaler failed on: the raw body, the RocketMQ message id as UUID, and
// the Unmarshaler's error here.
const MetaUnmarshalError = "rocketmq_unmarshal_error"

// rawMessage is m as a Watermill message without the Unmarshaler.
func rawMessage(m *rmqflow.AckableMessage[[]byte], err error) *message.Message {
	msg := message.NewMessage(m.Meta.MessageID, m.Value)
	msg.Metadata.Set(MetaMessageID, m.Meta.MessageID)
	msg.Metadata.Set(MetaTopic, m.Meta.Topic)
	if m.Meta.LiteTopic != "" {
		msg.Metadata.Set(MetaLiteTopic, m.Meta.LiteTopic)
	}
	msg.Metadata.Set(MetaUnmarshalError, err.Error())
	return msg
}
