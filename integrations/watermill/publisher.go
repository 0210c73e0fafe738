package rmqwatermill

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
)

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("rmqwatermill: closed")

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Sink is the template of the publisher's rmqflow sinks: the connection
	// and the tuning (MaxAttempts, Concurrency, BatchSize, Linger). Its Topic
	// and LiteTopic must be empty: the Watermill topic decides them (Mode).
	Sink rmqflow.SinkConfig
	// Mode says what a Watermill topic is. ModeLite (the default): a lite
	// topic of MainTopic. ModeSimple: a RocketMQ topic (normal, FIFO or
	// delay), which must exist.
	Mode rmqflow.Mode
	// MainTopic is the LITE main topic in ModeLite. Required there.
	MainTopic string
	// Marshaler turns messages into records. Default DefaultMarshaler{}.
	Marshaler Marshaler
}

func (c PublisherConfig) validate() error {
	switch {
	case c.Sink.Topic != "" || c.Sink.LiteTopic != "":
		return errors.New("rmqwatermill: PublisherConfig.Sink.Topic and LiteTopic must be empty: the Watermill topic names the destination")
	case c.Mode == rmqflow.ModeLite && c.MainTopic == "":
		return errors.New("rmqwatermill: PublisherConfig.MainTopic is required in ModeLite")
	case c.Mode == rmqflow.ModeSimple && c.MainTopic != "":
		return errors.New("rmqwatermill: PublisherConfig.MainTopic is for ModeLite; in ModeSimple the Watermill topic is the RocketMQ topic")
	case c.Mode != rmqflow.ModeLite && c.Mode != rmqflow.ModeSimple:
		return fmt.Errorf("rmqwatermill: unknown mode %d", c.Mode)
	}
	return nil
}

// Publisher is a Watermill message.Publisher over rmqflow sinks. Publish
// returns once the broker stored every message (or one failed). Messages of
// one Watermill topic in lite mode (one lite topic), and of one message
// group, are stored in the order published (rmqflow.Sink's order). A retried
// send keeps its message id.
type Publisher struct {
	cfg PublisherConfig

	mu     sync.Mutex
	closed bool
	sinks  map[string]*sinkEntry // by RocketMQ topic
}

// sinkEntry is the sink of one RocketMQ topic, or its connection under way.
type sinkEntry struct {
	ready chan struct{} // closed once s or err is set
	s     *rmqflow.Sink
	err   error
}

// NewPublisher checks cfg and returns a publisher; it connects on the first
// Publish to each RocketMQ topic.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Marshaler == nil {
		cfg.Marshaler = DefaultMarshaler{}
	}
	return &Publisher{cfg: cfg, sinks: map[string]*sinkEntry{}}, nil
}

// sink returns the sink of topic, connecting it on first use; the
// connection does not hold up Publishes to other topics, nor Close. A
// failed connection is tried again by the next Publish.
func (p *Publisher) sink(ctx context.Context, topic string) (*rmqflow.Sink, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if e := p.sinks[topic]; e != nil {
		p.mu.Unlock()
		select {
		case <-e.ready:
			return e.s, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e := &sinkEntry{ready: make(chan struct{})}
	p.sinks[topic] = e
	p.mu.Unlock()

	c := p.cfg.Sink
	c.Topic = topic
	s, err := rmqflow.NewSink(ctx, c)
	p.mu.Lock()
	switch {
	case err != nil:
		e.err = fmt.Errorf("rmqwatermill: connecting a producer to %s: %w", topic, err)
		delete(p.sinks, topic)
	case p.closed:
		// Close ran while this sink connected: it was not among the sinks
		// Close closed.
		e.err = ErrClosed
		p.mu.Unlock()
		close(e.ready)
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, ErrClosed
	default:
		e.s = s
	}
	p.mu.Unlock()
	close(e.ready)
	return e.s, e.err
}

// Publish sends messages to topic and waits until each has its result. It
// writes them all before it waits, so that they share calls; it returns the
// first failure, naming that message's UUID; the other messages were sent
// and may be stored (publishing them again, as Watermill's retries do, may
// duplicate them: consumers see at-least-once). A message's Context bounds
// its wait.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if topic == "" {
		return errors.New("rmqwatermill: publish: empty topic")
	}
	dest := topic
	if p.cfg.Mode == rmqflow.ModeLite {
		dest = p.cfg.MainTopic
	}
	if len(messages) == 0 {
		return nil
	}
	s, err := p.sink(messages[0].Context(), dest)
	if err != nil {
		return err
	}
	fs := make([]*rmqflow.SendFuture, len(messages))
	for i, msg := range messages {
		rec, err := p.cfg.Marshaler.Marshal(topic, msg)
		if err != nil {
			return errors.Join(fmt.Errorf("rmqwatermill: publish %s: %w", msg.UUID, err), p.wait(messages[:i], fs[:i]))
		}
		if p.cfg.Mode == rmqflow.ModeLite {
			// A lite message has no message group: a FIFO message received
			// elsewhere and published on here keeps its place by lite topic.
			rec.LiteTopic, rec.MessageGroup = topic, ""
		}
		fs[i] = s.Write(msg.Context(), rec)
	}
	return p.wait(messages, fs)
}

// wait waits for every future and returns the first failure.
func (p *Publisher) wait(messages []*message.Message, fs []*rmqflow.SendFuture) error {
	var first error
	for i, f := range fs {
		if _, err := f.Wait(messages[i].Context()); err != nil && first == nil {
			first = fmt.Errorf("rmqwatermill: publish %s: %w", messages[i].UUID, err)
		}
	}
	return first
}

// Close sends what Publish accepted and closes the producers. Publish after
// Close returns ErrClosed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	entries := p.sinks
	p.sinks = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var errs []error
	for _, e := range entries {
		<-e.ready // a connection under way closes its own sink (see sink)
		if e.s != nil {
			errs = append(errs, e.s.Close(ctx))
		}
	}
	return errors.Join(errs...)
}
