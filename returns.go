package rmqflow

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// This file exports the safety valves' rules (ThrottleConfig) for stages
// that settle messages outside a Runner or Throttle, such as an engine's
// retry step in another process: a count of each message's own returns, the
// delivery limit they are judged against, and the group's own limit read
// from the broker.

// ReturnTracker counts the returns of messages decided in this process: the
// deferrals, releases and leaves of a message for its own failures or a
// throttle policy, keyed by consumer group and message id. It is what a
// safety valve judges a message by (see ThrottleConfig): a message held back
// behind an earlier one of its lite topic, or whose ack failed, was not
// returned for itself and is not counted. It is safe for concurrent use and
// bounded: beyond its capacity it forgets the message least recently
// counted.
type ReturnTracker struct{ counts *deferTracker }

// NewReturnTracker returns a tracker that remembers at most capacity
// messages (0: DefaultDeferTrackerCapacity; negative: none).
func NewReturnTracker(capacity int) *ReturnTracker {
	if capacity == 0 {
		capacity = DefaultDeferTrackerCapacity
	}
	return &ReturnTracker{counts: newDeferTracker(capacity)}
}

func returnKey(h ReceiptHandle) string { return h.Group + "\x00" + h.MessageID }

// Add counts one more return of h's message.
func (r *ReturnTracker) Add(h ReceiptHandle) { r.counts.add(returnKey(h)) }

// Forget drops the count of h's message: call it once the message is acked
// or given up on.
func (r *ReturnTracker) Forget(h ReceiptHandle) { r.counts.forget(returnKey(h)) }

// Returns is the count of h's message's returns.
func (r *ReturnTracker) Returns(h ReceiptHandle) int { return r.counts.count(returnKey(h)) }

// Deliveries is h's message's own delivery count: its returns + 1; or, for a
// message outside any order (ordered false: no lite topic, no message group
// of a FIFO group), whose broker attempt counts its own deliveries only, that
// attempt (h.DeliveryAttempt) when it is larger, so that deliveries before a
// restart or on another process count too. The broker attempt of an ordered
// message grows with every return of the earlier ones of its lite topic
// (docs/broker-semantics.md, scenarios e and o) and is not read.
func (r *ReturnTracker) Deliveries(h ReceiptHandle, ordered bool) int32 {
	return ownDeliveries(r.Returns(h), ordered, h.DeliveryAttempt)
}

// ownDeliveries is a message's own delivery count, given its own returns and
// its broker attempt (see ReturnTracker.Deliveries).
func ownDeliveries(own int, ordered bool, attempt int32) int32 {
	n := int32(min(own, math.MaxInt32-1)) + 1
	if !ordered {
		n = max(n, attempt)
	}
	return n
}

// DeliveryLimit is the own delivery count (ReturnTracker.Deliveries) at which
// a message's max-delivery-attempt valve fires: maxAttempt (0 or less:
// DefaultMaxDeliveryAttempt), lowered to the group's own limit groupMax when
// it is known (more than 0: GroupSettings.MaxDeliveryAttempts) and lower;
// for an ordered message (a lite topic's, or a message group's in a FIFO
// group), to half of the group's limit, rounded up, because its successors
// are delivered again with it every time it comes back and spend the same
// budget on the broker (docs/grpc-connector.md, "Sizing a lite group's retry
// limit"). A stage that defers each message of an ordered run itself (a
// throttle deferring a whole over-share lite topic) passes ordered false.
func DeliveryLimit(maxAttempt, groupMax int32, ordered bool) int32 {
	limit := maxAttempt
	if limit <= 0 {
		limit = DefaultMaxDeliveryAttempt
	}
	if groupMax > 0 {
		if ordered {
			groupMax = (groupMax + 1) / 2
		}
		limit = min(limit, groupMax)
	}
	return limit
}

// GroupSettings is what the broker's settings answer says of a consumer
// group.
type GroupSettings struct {
	// MaxDeliveryAttempts is the deliveries the broker allows a message of
	// the group before it moves it to the group's dead-letter queue: its
	// retry limit + 1 (RetryPolicy.max_attempts). Zero when the broker sent
	// none.
	MaxDeliveryAttempts int32
	// FIFO: the group hands out each message group in order, from its
	// first unacked message (Subscription.fifo).
	FIFO bool
}

// readGroupTimeout bounds ReadGroupSettings when ctx has no deadline.
const readGroupTimeout = 30 * time.Second

// GroupQuery names the consumer session ReadGroupSettings opens.
type GroupQuery struct {
	// Group is the consumer group.
	Group string
	// Topic is the topic the group consumes: its LITE main topic when Lite.
	Topic string
	// Lite opens a lite consumer session (a lite group, bound to Topic).
	Lite bool
	// Filter is the group's filter on Topic (SourceConfig.Filter; simple
	// mode only; zero: every message). Give the filter the group's sources
	// use: the session announces its subscription to the broker, as theirs
	// do, and one without it would announce every message (TAG "*") for
	// the group.
	Filter client.Filter
}

// ReadGroupSettings asks the broker what it says of q's group: it opens a
// consumer session of the group on q's topic (a lite one on the LITE main
// topic when q.Lite; with q.Filter), without syncing a lite subscription or
// receiving, reads the settings the broker answers with, and closes it. It
// takes at most 30 s when ctx has no deadline. A Runner reads its group's
// settings from its own source; this is for a stage that has none, such as
// an engine's retry step.
func ReadGroupSettings(ctx context.Context, conn Connection, q GroupQuery) (GroupSettings, error) {
	if err := conn.validate(); err != nil {
		return GroupSettings{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readGroupTimeout)
		defer cancel()
	}
	c, err := client.New(conn.clientConfig())
	if err != nil {
		return GroupSettings{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	sc := client.SessionConfig{Type: client.SimpleConsumer, Group: q.Group, Subscriptions: []client.Subscription{{Topic: q.Topic, Filter: q.Filter}}}
	if q.Lite {
		sc.Type = client.LiteSimpleConsumer
	}
	sess, err := c.OpenSession(ctx, sc)
	if err != nil {
		return GroupSettings{}, fmt.Errorf("rmqflow: reading the settings of group %s: %w", q.Group, err)
	}
	st := sess.Settings()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = sess.Close(cctx)
	return GroupSettings{MaxDeliveryAttempts: st.GetBackoffPolicy().GetMaxAttempts(), FIFO: st.GetSubscription().GetFifo()}, nil
}
