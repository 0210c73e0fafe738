package rmqio

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/rmqflow/rmqflow"
)

// RetryConfig configures Retry.
type RetryConfig struct {
	AckConfig
	// Backoff and BackoffMax shape the deferral of a message's n-th own
	// return: Backoff × 2^(n-1), at most BackoffMax. Defaults 1 s and
	// 10 min (rmqflow.RunnerConfig's ErrorBackoff and ErrorBackoffMax).
	Backoff    time.Duration
	BackoffMax time.Duration
	// MaxDeliveryAttempt is the valve: once a message's own delivery count
	// (its returns by Retry and Throttle in the worker, + 1) reaches it, it
	// is not deferred again but given up on, as OnValve says. Default 16
	// (rmqflow.DefaultMaxDeliveryAttempt), lowered to the group's own
	// limit and, for a lite message, to half of it (see Throttle's valves).
	MaxDeliveryAttempt int32
	// MaxDeferredAge: a message older than this (since its born time) is
	// given up on too. Default 24 h.
	MaxDeferredAge time.Duration
	// OnValve is what happens to a message given up on:
	// rmqflow.ValveDeadLetterQueue (the default) moves it to its group's
	// dead-letter queue on the broker, %DLQ%<group>, where it can be read
	// back — nothing is acked; rmqflow.ValveAck acks it: it is dropped.
	OnValve rmqflow.ValveAction
}

// Defaults of RetryConfig.
const (
	DefaultRetryBackoff    = time.Second
	DefaultRetryBackoffMax = 10 * time.Minute
)

func (c RetryConfig) withDefaults() RetryConfig {
	if c.Backoff == 0 {
		c.Backoff = DefaultRetryBackoff
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultRetryBackoffMax
	}
	if c.MaxDeliveryAttempt == 0 {
		c.MaxDeliveryAttempt = rmqflow.DefaultMaxDeliveryAttempt
	}
	if c.MaxDeferredAge == 0 {
		c.MaxDeferredAge = rmqflow.DefaultMaxDeferredAge
	}
	return c
}

func (c RetryConfig) validate() error {
	if err := c.AckConfig.validate(); err != nil {
		return err
	}
	switch {
	case c.Backoff < 0, c.BackoffMax < 0, c.MaxDeliveryAttempt < 0, c.MaxDeferredAge < 0:
		return errors.New("rmqio: RetryConfig: Backoff, BackoffMax, MaxDeliveryAttempt and MaxDeferredAge must not be negative")
	case c.BackoffMax > rmqflow.MaxInvisibleDuration:
		return fmt.Errorf("rmqio: RetryConfig.BackoffMax: at most %v (the broker's longest invisibility)", rmqflow.MaxInvisibleDuration)
	case c.OnValve != rmqflow.ValveDeadLetterQueue && c.OnValve != rmqflow.ValveAck:
		return fmt.Errorf("rmqio: RetryConfig.OnValve: unknown action %v", c.OnValve)
	}
	return nil
}

// Outcome is what Retry did with one message.
type Outcome struct {
	MessageID string
	Topic     string
	LiteTopic string
	// Outcome is rmqflow.Outcome's name: "deferred" (it comes back after
	// the backoff), "dead-lettered" (its valve fired: it is in
	// DeadLetterQueue, not acked), "acked-by-valve" (its valve fired and
	// OnValve is rmqflow.ValveAck: dropped) or "failed" (nothing changed
	// on the broker as far as Retry knows: it comes back when its
	// invisibility ends; Error says why).
	Outcome string
	// Deliveries is the message's own delivery count when Retry got it.
	Deliveries int32
	// DeadLetterQueue is where a dead-lettered message is: %DLQ%<group>.
	DeadLetterQueue string
	Error           string
}

// Retry gives back to the broker the messages of col whose work failed for
// now — the failure output of your step, in Beam's dead-letter idiom — so
// that each comes back after a backoff that grows with its own returns
// (ChangeInvisibleDuration), and returns what it did with each as a
// PCollection of Outcome, in the global window with the message's
// timestamp. A message is judged by its own returns only (see Throttle's
// valves): once its valve fires, Retry gives up on it instead — by default
// it moves it to its group's dead-letter queue, and never acks it unless
// RetryConfig.OnValve is rmqflow.ValveAck. A message read from the
// dead-letter topic (DeadLettered) is deferred the same way, and left where
// it is once its valve fires: nothing removes it (docs/beam.md).
//
// Without Retry, a message that is not acked comes back when its
// invisibility ends (ReadConfig.InvisibleDuration), and the broker's own
// count decides when it is dead-lettered — a count that, on a lite topic,
// also grows for the messages held behind it.
func Retry(s beam.Scope, cfg RetryConfig, col beam.PCollection) beam.PCollection {
	s = s.Scope("rmqio.Retry")
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return beam.ParDo(s, &retryFn{Cfg: cfg.withDefaults()}, beam.WindowInto(s, window.NewGlobalWindows(), col))
}

// Retry's Beam metrics (namespace rmqio).
var (
	messagesRetried      = beam.NewCounter("rmqio", "messages_retried")
	messagesGivenUpDLQ   = beam.NewCounter("rmqio", "messages_moved_to_dlq")
	messagesAckedByValve = beam.NewCounter("rmqio", "messages_acked_by_valve")
	retryFailures        = beam.NewCounter("rmqio", "retry_failures")
)

type retryFn struct {
	Cfg RetryConfig

	acker *rmqflow.Acker
}

// Setup takes the process's ack pool for the configuration's connection.
func (fn *retryFn) Setup() error {
	pool, err := fn.Cfg.AckConfig.pool()
	if err != nil {
		return err
	}
	fn.acker = rmqflow.NewAcker(pool)
	return nil
}

func (fn *retryFn) ProcessElement(ctx context.Context, at beam.EventTime, m AckableMessage, emit func(beam.EventTime, Outcome)) {
	o := Outcome{MessageID: m.MessageID, Topic: m.Topic, LiteTopic: m.LiteTopic}
	out := func(outcome rmqflow.Outcome, err error) {
		o.Outcome = outcome.String()
		if err != nil {
			o.Error = err.Error()
			retryFailures.Inc(ctx, 1)
			log.Warnf(ctx, "rmqio: Retry could not give back message %s: %v", m.MessageID, err)
		}
		emit(at, o)
	}
	h, err := m.ReceiptHandle()
	if err != nil {
		out(rmqflow.Failed, err)
		return
	}
	o.Deliveries = ownDeliveries(h, m.MessageGroup)
	limit := valveLimit(ctx, fn.Cfg.Connection, h, m.MessageGroup, fn.Cfg.MaxDeliveryAttempt, true)
	aged := !m.BornTime.IsZero() && time.Since(m.BornTime) >= fn.Cfg.MaxDeferredAge
	if o.Deliveries < limit && !aged {
		delay := fn.Cfg.Backoff
		for i := int32(1); i < o.Deliveries && delay < fn.Cfg.BackoffMax; i++ {
			delay *= 2
		}
		delay = min(delay, fn.Cfg.BackoffMax)
		if _, err := fn.acker.ChangeInvisibleDuration(ctx, h, delay); err != nil {
			out(rmqflow.Failed, err)
			return
		}
		ownReturns.Add(h)
		messagesRetried.Inc(ctx, 1)
		out(rmqflow.Deferred, nil)
		return
	}
	// Given up on.
	if m.DeadLettered {
		// Already in the dead-letter queue, and nothing moves or removes
		// it there: it is left to come back when its invisibility ends.
		o.DeadLetterQueue = m.Topic
		out(rmqflow.DeadLettered, nil)
		return
	}
	if fn.Cfg.OnValve == rmqflow.ValveAck {
		if err := fn.acker.Ack(ctx, h); err != nil {
			out(rmqflow.Failed, err)
			return
		}
		ownReturns.Forget(h)
		messagesAckedByValve.Inc(ctx, 1)
		log.Errorf(ctx, "rmqio: Retry gave up on message %s after %d deliveries of its own: acked (dropped), as RetryConfig.OnValve asks", m.MessageID, o.Deliveries)
		out(rmqflow.AckedByValve, nil)
		return
	}
	if err := fn.acker.DeadLetter(ctx, h); err != nil {
		// Nothing acked: it comes back, and the broker's own limit takes
		// it to the same queue.
		out(rmqflow.Failed, err)
		return
	}
	ownReturns.Forget(h)
	messagesGivenUpDLQ.Inc(ctx, 1)
	o.DeadLetterQueue = "%DLQ%" + h.Group
	log.Warnf(ctx, "rmqio: Retry gave up on message %s after %d deliveries of its own: moved to the dead-letter queue %s", m.MessageID, o.Deliveries, o.DeadLetterQueue)
	out(rmqflow.DeadLettered, nil)
}

func init() {
	beam.RegisterType(reflect.TypeOf((*Outcome)(nil)).Elem())
	register.DoFn4x0[context.Context, beam.EventTime, AckableMessage, func(beam.EventTime, Outcome)](&retryFn{})
	register.Emitter2[beam.EventTime, Outcome]()
}
