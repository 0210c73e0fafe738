package rmqio

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/rmqflow/rmqflow"
)

// ThrottleConfig configures Throttle: rmqflow's fair-share policy and the
// safety valves of its deferrals.
type ThrottleConfig struct {
	AckConfig
	// Fair share (rmqflow.FairShareConfig; zero takes its defaults).
	Window   time.Duration
	Slack    float64
	MinCount int
	Defer    time.Duration
	// Valves (rmqflow.ThrottleConfig; zero takes its defaults): once one
	// fires, the message is let through instead of deferred again — never
	// acked. A message is judged by its own returns (Throttle's and Retry's
	// deferrals of it in the worker), and MaxDeliveryAttempt is lowered to
	// the group's own limit: see valve.go and docs/beam.md.
	MaxDeliveryAttempt int32
	MaxDefers          int
	MaxDeferredAge     time.Duration
	MaxDeferDuration   time.Duration
}

// Throttle lets through the messages of col whose lite topic is within its
// fair share of the recent throughput and defers the others on the broker
// (they leave the pipeline and come back after the deferral, the lite topic
// paused meanwhile). The shares are counted per worker process: with N
// workers each sees about 1/N of the traffic, and a lite topic is judged on
// the share of it each worker sees.
func Throttle(s beam.Scope, cfg ThrottleConfig, col beam.PCollection) beam.PCollection {
	s = s.Scope("rmqio.Throttle")
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return beam.ParDo(s, &throttleFn{Cfg: cfg}, col)
}

func (c ThrottleConfig) validate() error {
	if err := c.AckConfig.validate(); err != nil {
		return err
	}
	if _, err := rmqflow.FairShare[[]byte](c.fairShare()); err != nil {
		return err
	}
	return c.valves().Validate()
}

func (c ThrottleConfig) valves() rmqflow.ThrottleConfig {
	return rmqflow.ThrottleConfig{MaxDeliveryAttempt: c.MaxDeliveryAttempt, MaxDefers: c.MaxDefers,
		MaxDeferredAge: c.MaxDeferredAge, MaxDeferDuration: c.MaxDeferDuration}
}

func (c ThrottleConfig) fairShare() rmqflow.FairShareConfig {
	return rmqflow.FairShareConfig{Window: c.Window, Slack: c.Slack, MinCount: c.MinCount, Defer: c.Defer}
}

// Throttle's Beam metrics (namespace rmqio).
var (
	messagesAdmitted = beam.NewCounter("rmqio", "messages_admitted")
	messagesDeferred = beam.NewCounter("rmqio", "messages_deferred")
)

// throttles holds one throttle per configuration per worker process, so that
// every bundle of the worker counts into the same shares.
var throttles = struct {
	mu sync.Mutex
	m  map[string]*rmqflow.Throttle[[]byte]
}{m: map[string]*rmqflow.Throttle[[]byte]{}}

type throttleFn struct {
	Cfg ThrottleConfig

	th *rmqflow.Throttle[[]byte]
}

func (fn *throttleFn) Setup() error {
	b, _ := json.Marshal(fn.Cfg) // plain data: cannot fail
	throttles.mu.Lock()
	defer throttles.mu.Unlock()
	if th := throttles.m[string(b)]; th != nil {
		fn.th = th
		return nil
	}
	pool, err := fn.Cfg.AckConfig.pool()
	if err != nil {
		return err
	}
	policy, err := rmqflow.FairShare[[]byte](fn.Cfg.fairShare())
	if err != nil {
		return err
	}
	th, err := rmqflow.NewThrottle(rmqflow.NewAcker(pool), policy, fn.Cfg.valves())
	if err != nil {
		return err
	}
	throttles.m[string(b)] = th
	fn.th = th
	return nil
}

// ProcessElement emits m when the throttle admits it. A message the throttle
// defers, or fails to defer, is not emitted: it comes back from the broker.
// A dead-lettered message, one whose handle does not decode (Ack will
// report it), and one whose valve fired (it may not be returned once more)
// pass unthrottled.
func (fn *throttleFn) ProcessElement(ctx context.Context, m AckableMessage, emit func(AckableMessage)) error {
	h, err := m.ReceiptHandle()
	if err != nil || m.DeadLettered ||
		ownDeliveries(h, m.MessageGroup) >= valveLimit(ctx, fn.Cfg.Connection, h, m.MessageGroup, fn.Cfg.MaxDeliveryAttempt, false) {
		messagesAdmitted.Inc(ctx, 1)
		emit(m)
		return nil
	}
	rm := &rmqflow.AckableMessage[[]byte]{Value: m.Payload, Handle: h, Meta: rmqflow.Metadata{
		Topic: m.Topic, LiteTopic: m.LiteTopic, MessageID: m.MessageID, Tag: m.Tag, Keys: m.Keys,
		Properties: m.Properties, MessageGroup: m.MessageGroup, BornTime: m.BornTime, StoreTime: m.StoreTime,
		DeliveryAttempt: m.DeliveryAttempt, Body: m.Payload,
	}}
	admitted, err := fn.th.Admit(ctx, rm)
	if admitted {
		messagesAdmitted.Inc(ctx, 1)
		emit(m)
		return nil
	}
	if err == nil {
		ownReturns.Add(h)
		messagesDeferred.Inc(ctx, 1)
	} else {
		// Not deferred: the message comes back when its invisibility ends.
		log.Warnf(ctx, "rmqio: throttle could not defer message %s: %v", m.MessageID, err)
	}
	return nil
}

func init() {
	register.DoFn3x1[context.Context, AckableMessage, func(AckableMessage), error](&throttleFn{})
	register.Emitter1[AckableMessage]()
}
