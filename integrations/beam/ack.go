package rmqio

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/rmqflow/rmqflow"
)

// AckConfig configures Ack.
type AckConfig struct {
	Connection
	// MaxBatch, MaxInFlight and Linger tune the worker's ack pool
	// (rmqflow.AckPoolConfig); zero takes rmqflow's defaults.
	MaxBatch    int
	MaxInFlight int
	Linger      time.Duration
}

// pools holds one reference to the ack pool of each configuration per
// worker process: DoFn instances come and go with bundle plans (and are
// never torn down on portable runners), the pool stays.
var pools = struct {
	sync.Mutex
	m map[AckConfig]*rmqflow.AckPool
}{m: map[AckConfig]*rmqflow.AckPool{}}

func (c AckConfig) pool() (*rmqflow.AckPool, error) {
	pools.Lock()
	defer pools.Unlock()
	if p := pools.m[c]; p != nil {
		return p, nil
	}
	conn, err := c.Connection.rmqflow()
	if err != nil {
		return nil, err
	}
	p, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn, MaxBatch: c.MaxBatch,
		MaxInFlight: c.MaxInFlight, Linger: c.Linger})
	if err != nil {
		return nil, err
	}
	pools.m[c] = p
	return p, nil
}

func (c AckConfig) validate() error {
	if err := c.Connection.validate(); err != nil {
		return err
	}
	if c.MaxBatch < 0 || c.MaxInFlight < 0 || c.Linger < 0 {
		return errors.New("rmqio: AckConfig: MaxBatch, MaxInFlight and Linger must not be negative")
	}
	return nil
}

// AckFailure is a message that could not be acked. Unless OutcomeUnknown is
// set (the ack was sent and its answer lost: the broker may have taken it),
// the message will be delivered again.
type AckFailure struct {
	MessageID      string
	Topic          string
	LiteTopic      string
	Error          string
	OutcomeUnknown bool
	// DeadLettered: the message is a copy read from its group's dead-letter
	// topic (%DLQ%<group>, its Topic). On RocketMQ 5.5.0 a lite message's
	// copy cannot be acked (the broker refuses it) and comes back after its
	// invisibility whatever is done: it was given up on, by a valve (Retry)
	// or by the broker's own retry limit; park it where you keep such
	// messages (docs/beam.md).
	DeadLettered bool
}

// Ack acks every message of col (by its Handle) through the worker's ack
// pool, batched with every other ack of the worker process, and returns the
// messages it could not ack as a PCollection of AckFailure, in the global
// window with the failed message's timestamp.
//
// Ack first moves col through a Reshuffle: the runner commits the bundles
// that made col before any of its messages is acked, so a bundle that fails
// (in any of its fused stages) has acked nothing, and its messages are
// delivered again. A bundle of Ack itself finishes only once every ack of the
// bundle has its answer.
func Ack(s beam.Scope, cfg AckConfig, col beam.PCollection) beam.PCollection {
	s = s.Scope("rmqio.Ack")
	if err := cfg.validate(); err != nil {
		panic(err) // a pipeline construction error, as Beam's own IOs report them
	}
	committed := beam.Reshuffle(s, beam.WindowInto(s, window.NewGlobalWindows(), col))
	return beam.ParDo(s, &ackFn{Cfg: cfg}, committed)
}

// Ack's and Write's Beam metrics (namespace rmqio).
var (
	messagesAcked  = beam.NewCounter("rmqio", "messages_acked")
	ackFailures    = beam.NewCounter("rmqio", "ack_failures")
	recordsWritten = beam.NewCounter("rmqio", "records_written")
	recordsFailed  = beam.NewCounter("rmqio", "records_failed")
)

// pendingAck is one ack of a bundle waiting for its answer.
type pendingAck struct {
	at                   beam.EventTime
	id, topic, liteTopic string
	endpoints            string // where the ack goes: the handle's access point
	dead                 bool
	f                    *rmqflow.AckFuture
}

// bundleAcks collects the acks of one bundle and waits for them at its end.
type bundleAcks struct {
	pool    *rmqflow.AckPool
	conn    Connection
	pending []pendingAck
}

// add acks handle. The failure names the handle's message or, when the
// handle does not decode, the message who names.
func (b *bundleAcks) add(ctx context.Context, at beam.EventTime, handle []byte, who AckFailure) *AckFailure {
	var h rmqflow.ReceiptHandle
	if err := h.UnmarshalBinary(handle); err != nil {
		who.Error = fmt.Sprintf("rmqio: the message's handle: %v", err)
		ackFailures.Inc(ctx, 1)
		return &who
	}
	b.pending = append(b.pending, pendingAck{at: at, id: h.MessageID, topic: h.Topic, liteTopic: h.LiteTopic, endpoints: h.Endpoints,
		dead: who.DeadLettered || strings.HasPrefix(h.Topic, "%DLQ%"), f: b.pool.AckAsync(context.WithoutCancel(ctx), h)})
	return nil
}

// finish waits for every pending ack and emits the failures. When ctx ends
// first it returns ctx's error: the runner retries the bundle, whose acks
// that went through are then sent again (the broker answers OK to an
// already-acked handle: docs/broker-semantics.md, scenario h). An ack the
// broker refused for the connection's credentials fails the bundle with an
// error that says so and names the endpoint the ack went to (the handle's):
// it is no message's failure, and every other ack would be refused alike.
// Prism then fails the job; a Dataflow streaming job retries the bundle
// without end, and stalls there until the credentials are fixed.
func (b *bundleAcks) finish(ctx context.Context, emit func(beam.EventTime, AckFailure)) error {
	defer func() { b.pending = b.pending[:0] }()
	for _, p := range b.pending {
		select {
		case <-p.f.Done():
			if err := p.f.Err(); err != nil {
				if r := refused(b.conn, p.endpoints, err); r != err {
					return r
				}
				ackFailures.Inc(ctx, 1)
				emit(p.at, AckFailure{MessageID: p.id, Topic: p.topic, LiteTopic: p.liteTopic, Error: err.Error(),
					OutcomeUnknown: errors.Is(err, rmqflow.ErrAckOutcomeUnknown), DeadLettered: p.dead})
			} else {
				messagesAcked.Inc(ctx, 1)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ackFn acks AckableMessages.
type ackFn struct {
	Cfg AckConfig

	acks bundleAcks
}

// Setup takes the process's ack pool for this configuration, shared with
// every other Ack, Throttle and Write of the worker (rmqflow shares one pool
// per connection). It lives as long as the worker process.
func (fn *ackFn) Setup() error {
	pool, err := fn.Cfg.pool()
	if err != nil {
		return err
	}
	fn.acks.pool, fn.acks.conn = pool, fn.Cfg.Connection
	return nil
}

func (fn *ackFn) StartBundle(_ context.Context, _ func(beam.EventTime, AckFailure)) {
	fn.acks.pending = fn.acks.pending[:0]
}

func (fn *ackFn) ProcessElement(ctx context.Context, at beam.EventTime, m AckableMessage, emit func(beam.EventTime, AckFailure)) {
	if f := fn.acks.add(ctx, at, m.Handle, AckFailure{MessageID: m.MessageID, Topic: m.Topic, LiteTopic: m.LiteTopic, DeadLettered: m.DeadLettered}); f != nil {
		emit(at, *f)
	}
}

// FinishBundle waits for every ack of the bundle and emits the failures.
func (fn *ackFn) FinishBundle(ctx context.Context, emit func(beam.EventTime, AckFailure)) error {
	return fn.acks.finish(ctx, emit)
}

// handleAckFn acks raw handles (Write's stored records' AckHandles).
type handleAckFn struct {
	Cfg AckConfig

	acks bundleAcks
}

func (fn *handleAckFn) Setup() error {
	pool, err := fn.Cfg.pool()
	if err != nil {
		return err
	}
	fn.acks.pool, fn.acks.conn = pool, fn.Cfg.Connection
	return nil
}

func (fn *handleAckFn) StartBundle(_ context.Context, _ func(beam.EventTime, AckFailure)) {
	fn.acks.pending = fn.acks.pending[:0]
}

func (fn *handleAckFn) ProcessElement(ctx context.Context, at beam.EventTime, h []byte, emit func(beam.EventTime, AckFailure)) {
	if f := fn.acks.add(ctx, at, h, AckFailure{}); f != nil {
		emit(at, *f)
	}
}

func (fn *handleAckFn) FinishBundle(ctx context.Context, emit func(beam.EventTime, AckFailure)) error {
	return fn.acks.finish(ctx, emit)
}

func init() {
	beam.RegisterType(reflect.TypeOf((*AckFailure)(nil)).Elem())
	register.DoFn4x0[context.Context, beam.EventTime, AckableMessage, func(beam.EventTime, AckFailure)](&ackFn{})
	register.DoFn4x0[context.Context, beam.EventTime, []byte, func(beam.EventTime, AckFailure)](&handleAckFn{})
	register.Emitter2[beam.EventTime, AckFailure]()
}
