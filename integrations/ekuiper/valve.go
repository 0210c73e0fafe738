package rmqkuiper

import (
	"context"
	"fmt"
	"time"

	"github.com/lf-edge/ekuiper/contract/v2/api"

	"github.com/rmqflow/rmqflow"
)

// The values of on-valve: what happens to a message once its safety valve
// fired.
const (
	// OnValveDeadLetterQueue (default) moves the message to its group's
	// dead-letter queue on the broker, %DLQ%<group>, where it can be read
	// back: nothing is acked. When the move fails the message is left to
	// come back, and the broker's own retry limit takes it there.
	OnValveDeadLetterQueue = "dead-letter-queue"
	// OnValveAck acks the message: it is dropped (logged with its message
	// id). Choose it only when losing a message that kept failing is what
	// you want.
	OnValveAck = "ack"
)

// parseOnValve reads on-valve.
func parseOnValve(p *props) rmqflow.ValveAction {
	switch v := p.str("on-valve"); v {
	case "", OnValveDeadLetterQueue:
		return rmqflow.ValveDeadLetterQueue
	case OnValveAck:
		return rmqflow.ValveAck
	default:
		p.fail("on-valve", "want %s or %s, got %q", OnValveDeadLetterQueue, OnValveAck, v)
		return rmqflow.ValveDeadLetterQueue
	}
}

// A valve judges a message by its own returns: the failed deliveries of its
// rows in the rule's acking sinks (ledger.failedOwn) and the throttle's
// deferrals of it, counted in this process. A message delivered again only
// because an earlier one of its lite topic came back (the broker hands a
// lite topic out in batches, and an acked successor of an unacked message
// comes back with it: docs/broker-semantics.md, scenario o), or because its
// rule run stopped, is not charged; nor is the broker's delivery attempt of
// such a message read, which grows with its lite topic's head.
//
// Once a message's own delivery count (its returns + 1) reaches the limit,
// it is not returned again: it goes where on-valve says. The limit is
// max-delivery-attempt, lowered to the group's own limit (its retry limit +
// 1 deliveries, from the broker's settings) and, for a message of a lite
// topic or of a FIFO group, to half of that (rounded up): its successors
// come back with it every time it does and spend the group's budget with
// it, so that it leaves before the broker dead-letters them. These are
// rmqflow's rules (rmqflow.ThrottleConfig).
type valve struct {
	maxAttempt int32               // max-delivery-attempt
	onValve    rmqflow.ValveAction // on-valve
	groupMax   int32               // the group's deliveries; 0 when unknown
	fifo       bool                // the group hands each message group out in order
	returns    *rmqflow.ReturnTracker
	log        api.Logger
	// park, when set (dead-letter-topic), parks a message whose valve
	// fired in parkTopic; the source acks it once stored.
	park      rmqflow.DeadLetterFunc[[]byte]
	parkTopic string
}

// parked holds the messages every source of the process parked in its
// dead-letter-topic whose ack has not been seen to take. One that comes back
// has its one copy already: it is only acked (ackParked), on arrival, by any
// source of the process, whatever that source's options (one without
// dead-letter-topic would otherwise send a second copy where on-valve says);
// its rows are not handed to the rule again.
var parked = rmqflow.NewReturnTracker(0)

// wasParked reports whether h's message is in parked.
func wasParked(h rmqflow.ReceiptHandle) bool { return parked.Returns(h) > 0 }

// ackParked acks h's message, which a source of the process parked in its
// dead-letter-topic before while the ack did not take: it is neither parked
// again nor sent where on-valve says. When the ack fails again it is left to
// come back, and acked then.
func (v *valve) ackParked(ctx context.Context, acker *rmqflow.Acker, h rmqflow.ReceiptHandle) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	if err := acker.Ack(cctx, h); err != nil {
		acker.Leave(h)
		v.log.Warnf("rocketmq source: message %s (lite topic %q) was parked in a dead-letter-topic before; its ack failed again: it comes back, and is acked then: %v",
			h.MessageID, h.LiteTopic, err)
		return
	}
	parked.Forget(h)
	v.forget(h)
	v.log.Warnf("rocketmq source: message %s (lite topic %q) was parked in a dead-letter-topic before, and its ack did not take then: acked now, not handed to the rule again",
		h.MessageID, h.LiteTopic)
}

// limit is the own delivery count at which the valve fires for h.
func (v *valve) limit(h rmqflow.ReceiptHandle) int32 {
	return rmqflow.DeliveryLimit(v.maxAttempt, v.groupMax, v.ordered(h))
}

// ordered reports whether the broker hands h's message out behind the
// earlier ones of its lite topic (or message group), so that its delivery
// attempt is not its own.
func (v *valve) ordered(h rmqflow.ReceiptHandle) bool { return h.LiteTopic != "" || v.fifo }

// own is h's own delivery count (rmqflow.ReturnTracker.Deliveries).
func (v *valve) own(h rmqflow.ReceiptHandle) int32 { return v.returns.Deliveries(h, v.ordered(h)) }

// fired reports whether h's message may not be returned once more.
func (v *valve) fired(h rmqflow.ReceiptHandle) bool { return v.own(h) >= v.limit(h) }

// returned counts a return of h's message.
func (v *valve) returned(h rmqflow.ReceiptHandle) { v.returns.Add(h) }

// maxParkFailures is how many failed parks in dead-letter-topic a message
// gets before it goes where on-valve says instead: a topic that refuses
// every copy (one the check at start could not see: its type or its ACL
// changed since) must not keep the message, and its lite topic, coming back
// until the broker's own limit. It is the Runner's default
// (rmqflow.RunnerConfig.MaxDeadLetterFailures), so that the integrations
// agree; the source gives up on messages itself, without a Runner.
const maxParkFailures = rmqflow.DefaultMaxDeadLetterFailures

// parkFailures counts each message's failed parks in this process (a
// restarted rule keeps them).
var parkFailures = rmqflow.NewReturnTracker(0)

// giveUpTimeout bounds the RPC that moves (or acks) a message given up on.
const giveUpTimeout = 30 * time.Second

// failed gives back h's message, whose rows failed in an acking sink: it is
// left to come back when its invisibility ends, unless its valve fired; then
// it is parked in dead-letter-topic when set (m is the message; the ledger
// keeps it then) and its parks did not fail maxParkFailures times, or else
// it goes where on-valve says. A message parked before is only acked.
// acker is the source's.
func (v *valve) failed(ctx context.Context, acker *rmqflow.Acker, h rmqflow.ReceiptHandle, m *rmqflow.AckableMessage[[]byte]) {
	if wasParked(h) {
		v.ackParked(ctx, acker, h)
		return
	}
	if !v.fired(h) {
		v.returned(h)
		acker.Leave(h)
		return
	}
	own, limit := v.own(h), v.limit(h)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	if v.park != nil && m != nil && parkFailures.Returns(h) < maxParkFailures {
		v.parkMsg(cctx, acker, h, m, own, limit)
		return
	}
	v.giveUp(cctx, acker, h, own, limit)
}

// giveUp sends h's message, whose valve fired at limit after own
// deliveries, where on-valve says.
func (v *valve) giveUp(ctx context.Context, acker *rmqflow.Acker, h rmqflow.ReceiptHandle, own, limit int32) {
	if v.onValve == rmqflow.ValveAck {
		if err := acker.Ack(ctx, h); err != nil {
			v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times: acking it as on-valve %s asks failed, it comes back: %v",
				h.MessageID, h.LiteTopic, own, OnValveAck, err)
			return
		}
		v.forget(h)
		v.log.Errorf("rocketmq source: message %s (lite topic %q) failed %d times (valve at %d): acked and dropped, as on-valve %s asks",
			h.MessageID, h.LiteTopic, own, limit, OnValveAck)
		return
	}
	if err := acker.DeadLetter(ctx, h); err != nil {
		// Nothing acked: it comes back, and the broker's own limit
		// takes it to the same queue.
		acker.Leave(h)
		v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times: moving it to the dead-letter queue %%DLQ%%%s failed, it comes back: %v",
			h.MessageID, h.LiteTopic, own, h.Group, err)
		return
	}
	v.forget(h)
	v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times (valve at %d): moved to the dead-letter queue %%DLQ%%%s",
		h.MessageID, h.LiteTopic, own, limit, h.Group)
}

// forget drops what the process counts of h's message, settled now.
func (v *valve) forget(h rmqflow.ReceiptHandle) {
	v.returns.Forget(h)
	parkFailures.Forget(h)
}

// onValveName is on-valve's value.
func (v *valve) onValveName() string {
	if v.onValve == rmqflow.ValveAck {
		return OnValveAck
	}
	return OnValveDeadLetterQueue
}

// ownReturns holds the returns every source of the process counts (a
// restarted rule keeps them).
var ownReturns = rmqflow.NewReturnTracker(0)

// askGroup asks the broker the settings of the source's consumer group
// (rmqflow.ReadGroupSettings), in a session that announces the stream's
// filter, as the source's own does.
func (s *source) askGroup(ctx context.Context) (rmqflow.GroupSettings, error) {
	q := rmqflow.GroupQuery{Group: s.conf.src.Group, Topic: s.conf.src.Topic, Filter: s.conf.src.Filter}
	if s.conf.src.Mode != rmqflow.ModeSimple {
		q = rmqflow.GroupQuery{Group: s.conf.src.Lite[0].Group, Topic: s.conf.src.Lite[0].Topic, Lite: true}
	}
	return rmqflow.ReadGroupSettings(ctx, s.conf.src.Connection, q)
}

// parkMsg writes m to dead-letter-topic and acks it once the broker stored
// the copy. When the write fails nothing is acked: m comes back, and is
// parked when it fails again. When the ack fails m is in parked: it comes
// back, and is only acked then (ackParked).
func (v *valve) parkMsg(ctx context.Context, acker *rmqflow.Acker, h rmqflow.ReceiptHandle, m *rmqflow.AckableMessage[[]byte], own, limit int32) {
	cause := fmt.Errorf("rocketmq source: failed %d times in the rule's sinks (valve at %d)", own, limit)
	if err := v.park(ctx, m, cause); err != nil {
		if parkFailures.Add(h); parkFailures.Returns(h) >= maxParkFailures {
			v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times: parking it in dead-letter-topic %s failed %d times, it goes where on-valve says (%s) instead: %v",
				h.MessageID, h.LiteTopic, own, v.parkTopic, maxParkFailures, v.onValveName(), err)
			v.giveUp(ctx, acker, h, own, limit)
			return
		}
		acker.Leave(h)
		v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times: parking it in dead-letter-topic %s failed, it comes back: %v",
			h.MessageID, h.LiteTopic, own, v.parkTopic, err)
		return
	}
	parkFailures.Forget(h)
	parked.Add(h)
	if err := acker.Ack(ctx, h); err != nil {
		v.log.Warnf("rocketmq source: message %s (lite topic %q) is parked in dead-letter-topic %s, but its ack failed: it comes back, and is acked then: %v",
			h.MessageID, h.LiteTopic, v.parkTopic, err)
		return
	}
	parked.Forget(h)
	v.forget(h)
	v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times (valve at %d): parked in dead-letter-topic %s and acked",
		h.MessageID, h.LiteTopic, own, limit, v.parkTopic)
}
