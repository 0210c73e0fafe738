package rmqkuiper

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/lf-edge/ekuiper/contract/v2/api"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
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
	returns    *returnCounts
	log        api.Logger
}

// limit is the own delivery count at which the valve fires for h.
func (v *valve) limit(h rmqflow.ReceiptHandle) int32 {
	limit := v.maxAttempt
	if g := v.groupMax; g > 0 {
		if v.ordered(h) {
			g = (g + 1) / 2
		}
		limit = min(limit, g)
	}
	return limit
}

// ordered reports whether the broker hands h's message out behind the
// earlier ones of its lite topic (or message group), so that its delivery
// attempt is not its own.
func (v *valve) ordered(h rmqflow.ReceiptHandle) bool { return h.LiteTopic != "" || v.fifo }

// own is h's own delivery count: its returns + 1, or, outside any order,
// the broker's attempt when that is larger (its deliveries before a restart
// count too).
func (v *valve) own(h rmqflow.ReceiptHandle) int32 {
	n := int32(min(v.returns.count(h), math.MaxInt32-1)) + 1
	if !v.ordered(h) {
		n = max(n, h.DeliveryAttempt)
	}
	return n
}

// fired reports whether h's message may not be returned once more.
func (v *valve) fired(h rmqflow.ReceiptHandle) bool { return v.own(h) >= v.limit(h) }

// returned counts a return of h's message.
func (v *valve) returned(h rmqflow.ReceiptHandle) { v.returns.add(h) }

// giveUpTimeout bounds the RPC that moves (or acks) a message given up on.
const giveUpTimeout = 30 * time.Second

// failed gives back h's message, whose rows failed in an acking sink: it is
// left to come back when its invisibility ends, unless its valve fired; then
// it goes where on-valve says. acker is the source's.
func (v *valve) failed(ctx context.Context, acker *rmqflow.Acker, h rmqflow.ReceiptHandle) {
	if !v.fired(h) {
		v.returned(h)
		acker.Leave(h)
		return
	}
	own, limit := v.own(h), v.limit(h)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	if v.onValve == rmqflow.ValveAck {
		if err := acker.Ack(cctx, h); err != nil {
			v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times: acking it as on-valve %s asks failed, it comes back: %v",
				h.MessageID, h.LiteTopic, own, OnValveAck, err)
			return
		}
		v.returns.forget(h)
		v.log.Errorf("rocketmq source: message %s (lite topic %q) failed %d times (valve at %d): acked and dropped, as on-valve %s asks",
			h.MessageID, h.LiteTopic, own, limit, OnValveAck)
		return
	}
	if err := acker.DeadLetter(cctx, h); err != nil {
		// Nothing acked: it comes back, and the broker's own limit
		// takes it to the same queue.
		acker.Leave(h)
		v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times: moving it to the dead-letter queue %%DLQ%%%s failed, it comes back: %v",
			h.MessageID, h.LiteTopic, own, h.Group, err)
		return
	}
	v.returns.forget(h)
	v.log.Warnf("rocketmq source: message %s (lite topic %q) failed %d times (valve at %d): moved to the dead-letter queue %%DLQ%%%s",
		h.MessageID, h.LiteTopic, own, limit, h.Group)
}

// returnCounts counts the returns of messages, per consumer group and
// message id, for every source of the process (a restarted rule keeps
// them), forgetting the oldest beyond its capacity.
type returnCounts struct {
	mu    sync.Mutex
	max   int
	m     map[string]int
	order []string // keys, oldest first (with stale ones, skipped)
}

// ownReturns holds the returns every source of the process counts.
var ownReturns = &returnCounts{max: rmqflow.DefaultDeferTrackerCapacity, m: map[string]int{}}

func returnKey(h rmqflow.ReceiptHandle) string { return h.Group + "\x00" + h.MessageID }

func (r *returnCounts) count(h rmqflow.ReceiptHandle) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[returnKey(h)]
}

func (r *returnCounts) add(h rmqflow.ReceiptHandle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := returnKey(h)
	if _, ok := r.m[k]; !ok {
		r.order = append(r.order, k)
	}
	r.m[k]++
	for len(r.m) > r.max && len(r.order) > 0 {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
	if len(r.order) > 2*r.max { // compact the forgotten keys
		kept := make([]string, 0, len(r.m))
		for _, k := range r.order {
			if _, ok := r.m[k]; ok {
				kept = append(kept, k)
			}
		}
		r.order = kept
	}
}

func (r *returnCounts) forget(h rmqflow.ReceiptHandle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, returnKey(h))
}

// groupInfo is what the broker's settings answer says of the source's
// consumer group.
type groupInfo struct {
	maxAttempts int32 // deliveries before the broker dead-letters: retry limit + 1
	fifo        bool
}

// askGroup opens a consumer session of the source's group, without
// subscribing or receiving, to read the broker's settings answer, and closes
// it.
func (s *source) askGroup(ctx context.Context) (groupInfo, error) {
	conn := s.conf.src.Connection
	c, err := client.New(client.Config{Endpoints: conn.Endpoints, Namespace: conn.Namespace, Credentials: conn.Credentials,
		TLS: conn.TLS, RequestTimeout: conn.RequestTimeout})
	if err != nil {
		return groupInfo{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	sc := client.SessionConfig{Type: client.SimpleConsumer, Group: s.conf.src.Group,
		Subscriptions: []client.Subscription{{Topic: s.conf.src.Topic, Filter: s.conf.src.Filter}}}
	if s.conf.src.Mode != rmqflow.ModeSimple {
		b := s.conf.src.Lite[0]
		sc = client.SessionConfig{Type: client.LiteSimpleConsumer, Group: b.Group, Subscriptions: []client.Subscription{{Topic: b.Topic}}}
	}
	sess, err := c.OpenSession(ctx, sc)
	if err != nil {
		return groupInfo{}, fmt.Errorf("rocketmq: reading the settings of group %s: %w", sc.Group, err)
	}
	st := sess.Settings()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = sess.Close(cctx)
	return groupInfo{maxAttempts: st.GetBackoffPolicy().GetMaxAttempts(), fifo: st.GetSubscription().GetFifo()}, nil
}
