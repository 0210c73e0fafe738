package rmqio

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"

	"github.com/rmqflow/rmqflow"
)

// Safety valves judge a message by its own returns: Throttle's deferrals of
// it and Retry's, counted in the worker process by consumer group and
// message id (ownReturns). A message delivered again only because an
// earlier one of its lite topic came back (the broker hands a lite topic out
// in batches, and a successor acked behind an unacked message comes back
// with it: docs/broker-semantics.md, scenario o) is not charged for that,
// nor is its broker delivery attempt read, which grows with its lite
// topic's head. Once a message's own delivery count (its returns + 1)
// reaches its limit, Throttle admits it instead of deferring it, and Retry
// gives up on it (RetryConfig.OnValve).
//
// The limit is MaxDeliveryAttempt, lowered to the group's own limit (its
// retry limit + 1 deliveries, read from the broker's settings answer, once
// per group and worker). Retry lowers it, for a lite message, to half of
// that, rounded up: the successors of a message that keeps failing come
// back with it every time it does and spend the group's budget with it, so
// it must leave first (rmqflow's rule: rmqflow.ThrottleConfig). Throttle
// does not halve it: it defers each message of an over-share lite topic
// itself, so each one's deferrals are its own; admitting a message while
// the ones before it are deferred would bring it back with them, worked
// twice (scenario o).

// ownReturns counts the returns of messages in this worker process.
var ownReturns = rmqflow.NewReturnTracker(0)

// ordered reports whether the broker hands h's message out behind the
// earlier ones of its lite topic (or message group).
func ordered(h rmqflow.ReceiptHandle, messageGroup string) bool {
	return h.LiteTopic != "" || messageGroup != ""
}

// ownDeliveries is a message's own delivery count (rmqflow.ReturnTracker).
func ownDeliveries(h rmqflow.ReceiptHandle, messageGroup string) int32 {
	return ownReturns.Deliveries(h, ordered(h, messageGroup))
}

// valveLimit is the own delivery count at which the valve of h's message
// fires (rmqflow.DeliveryLimit), for a configured maximum maxAttempt (0:
// rmqflow's default); halve: half the group's limit for an ordered message
// (Retry). conn is how to ask the broker the group's own limit.
func valveLimit(ctx context.Context, conn Connection, h rmqflow.ReceiptHandle, messageGroup string, maxAttempt int32, halve bool) int32 {
	return rmqflow.DeliveryLimit(maxAttempt, groupLimit(ctx, conn, h), halve && ordered(h, messageGroup))
}

// groupLimits caches, per worker process, the delivery limit of each lite
// group (0: not known; asked again after groupLimitRetry).
var groupLimits = struct {
	mu sync.Mutex
	m  map[string]groupLimitEntry
}{m: map[string]groupLimitEntry{}}

type groupLimitEntry struct {
	limit int32
	at    time.Time
}

// groupLimitRetry is how long a failed question about a group's limit is
// not asked again.
const groupLimitRetry = time.Minute

// groupLimit is the number of deliveries h's lite group allows (its retry
// limit + 1), from the broker's settings answer to a consumer session of
// the group, opened without subscribing or receiving; 0 when it is not known
// (a message outside a lite topic: its broker attempt is its own and the
// broker's limit judges it by its own deliveries; a copy from the
// dead-letter topic; the broker did not answer).
func groupLimit(ctx context.Context, conn Connection, h rmqflow.ReceiptHandle) int32 {
	if h.LiteTopic == "" || strings.HasPrefix(h.Topic, "%DLQ%") {
		return 0
	}
	k := h.Endpoints + "\x00" + h.Namespace + "\x00" + h.Group + "\x00" + h.Topic
	groupLimits.mu.Lock()
	defer groupLimits.mu.Unlock() // one question at a time per process: rare, and short
	if e, ok := groupLimits.m[k]; ok && (e.limit > 0 || time.Since(e.at) < groupLimitRetry) {
		return e.limit
	}
	limit, err := askGroupLimit(ctx, conn, h)
	if err != nil {
		log.Warnf(ctx, "rmqio: the delivery limit of group %s is unknown (%v): its valves fire at MaxDeliveryAttempt", h.Group, err)
	}
	groupLimits.m[k] = groupLimitEntry{limit: limit, at: time.Now()}
	return limit
}

// askGroupLimit asks the broker the settings of h's lite group on h's main
// topic (rmqflow.ReadGroupSettings).
func askGroupLimit(ctx context.Context, conn Connection, h rmqflow.ReceiptHandle) (int32, error) {
	rc, err := conn.rmqflow()
	if err != nil {
		return 0, err
	}
	rc.Endpoints, rc.Namespace = h.Endpoints, h.Namespace
	g, err := rmqflow.ReadGroupSettings(ctx, rc, rmqflow.GroupQuery{Group: h.Group, Topic: h.Topic, Lite: true})
	return g.MaxDeliveryAttempts, err
}
