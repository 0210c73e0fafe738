package rmqfake

import (
	"fmt"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// MaxQueues is the most queues a topic may have (CreateTopic's Queues, a
// fixture's queues=N). The real broker's topics have a few (8 by default,
// 4 in the project's fixtures); every queue costs rmqfake a position per
// consuming group and QueryRoute one MessageQueue per queue, so an
// unbounded count let one fixture line make a single route answer of
// gigabytes. 1024 queues keep a route answer near 100 KB, well inside the
// clients' 4 MiB default receive size.
const MaxQueues = 1024

// DefaultMaxStoredBytes is the default of MaxStoredBytes: 1 GiB.
const DefaultMaxStoredBytes = 1 << 30

// MessageOverhead is what each stored message counts against
// MaxStoredBytes beyond its body, id, lite topic, tag, keys, message group,
// trace context and user properties: about what rmqfake keeps per message
// (docs/rmqfake.md: under 1 KB, about 200 B in practice).
const MessageOverhead = 256

// MaxStoredBytes bounds what the server stores: the sum over stored
// messages (in topics, lite topics and dead-letter queues, and delayed
// messages not yet due) of their body, id, lite topic, tag, keys, message
// group, trace context and user properties plus MessageOverhead. A send that
// would go past it is refused whole, as the broker refuses a message when its
// disk is full: INTERNAL_SERVER_ERROR "service not available now. It may be
// caused by one of the following reasons: the broker's disk is full [...]".
// Messages are freed once every group consuming their queue has taken them
// (received and acked, for ordered queues; received, for normal pops); dead
// letters the server moves itself are never refused. The default is
// DefaultMaxStoredBytes; n <= 0 removes the limit.
func MaxStoredBytes(n int64) Option { return func(c *config) { c.limits.storedBytes = n } }

// DefaultMaxLiteTopics is the default of MaxLiteTopics.
const DefaultMaxLiteTopics = 1_000_000

// MaxLiteTopics bounds how many lite topics the server holds, over all LITE
// main topics. A message that would create one more is refused as the broker
// refuses a new LMQ past its quota (enableLmqQuota, maxLmqConsumeQueueNum):
// LITE_TOPIC_QUOTA_EXCEEDED "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume
// queue num exceeded.". A lite topic is held while it has messages stored or
// in flight; once every group reading it has acked it to the end it is freed,
// and subscribing to a lite topic creates none. The default is
// DefaultMaxLiteTopics (the project's benchmarks run 1,000,000 lite topics);
// n <= 0 removes the limit.
func MaxLiteTopics(n int) Option { return func(c *config) { c.limits.liteTopics = n } }

// DefaultMaxAutoGroups is the default of MaxAutoGroups.
const DefaultMaxAutoGroups = 10_000

// MaxAutoGroups bounds how many groups AutoCreate makes (on a consumer's
// first settings or receive). Past it an unknown group stays unknown: the
// session fails as for any unknown group (gRPC InvalidArgument, "group not
// found: <group> (auto-create stopped at <n> groups, the server's
// MaxAutoGroups)") and a receive answers CONSUMER_GROUP_NOT_FOUND. Groups
// made by CreateGroup and fixtures do not count. The default is
// DefaultMaxAutoGroups; n <= 0 removes the limit.
func MaxAutoGroups(n int) Option { return func(c *config) { c.limits.autoGroups = n } }

// limits are the bounds of one server (see the options above); a value of 0
// or less means none.
type limits struct {
	storedBytes int64
	liteTopics  int
	autoGroups  int
}

func defaultLimits() limits {
	return limits{storedBytes: DefaultMaxStoredBytes, liteTopics: DefaultMaxLiteTopics, autoGroups: DefaultMaxAutoGroups}
}

// limiter enforces a server's limits; its state is guarded by b.mu.
type limiter struct {
	limits
	// admin is set while CreateGroup creates a group, which is not
	// limited; autoMade counts the groups auto-create made.
	admin    bool
	autoMade int
}

// admitGroup reports whether newGroup may make a group: always for
// CreateGroup, while fewer than MaxAutoGroups were made for auto-create.
// Call it with b.mu held.
func (b *broker) admitGroup() bool {
	if b.lim.admin {
		return true
	}
	if max := b.lim.autoGroups; max > 0 && b.lim.autoMade >= max {
		return false
	}
	b.lim.autoMade++
	return true
}

// autoGroupsFull explains a group auto-create did not make. Call it with
// b.mu held.
func (b *broker) autoGroupsFull() string {
	if max := b.lim.autoGroups; b.auto && max > 0 && b.lim.autoMade >= max {
		return fmt.Sprintf(" (auto-create stopped at %d groups, the server's MaxAutoGroups)", max)
	}
	return ""
}

// cost is what m counts against MaxStoredBytes. It depends only on fields
// that never change once m is stored.
func (m *message) cost() int64 {
	n := len(m.body) + len(m.id) + len(m.lite) + MessageOverhead
	for k, v := range m.props {
		n += len(k) + len(v)
	}
	if x := m.x; x != nil {
		n += len(x.tag) + len(x.msgGroup) + len(x.trace)
		for _, k := range x.keys {
			n += len(k)
		}
	}
	return int64(n)
}

// storedBytes is what the server's stored messages count against
// MaxStoredBytes. Call it with b.mu held.
func (b *broker) storedBytes() int64 {
	var n int64
	for _, t := range b.topics {
		n += t.bytes
	}
	return n
}

// liteTopics is how many lite topics the server holds. Call it with b.mu
// held.
func (b *broker) liteTopics() int {
	n := 0
	for _, t := range b.topics {
		n += len(t.lite)
	}
	return n
}

// admit checks that msgs, about to be stored into t, fit the limits. Call
// it with b.mu held, before anything of msgs is stored.
func (b *broker) admit(t *topic, msgs []*message) *failure {
	if max, lite := b.lim.liteTopics, msgs[0].lite; max > 0 && len(msgs) == 1 && lite != "" && t.lite != nil && t.lite[lite] == nil {
		// A new lite topic (a batch of lite messages is never dispatched
		// to its lite topics, so it creates none). The broker's answer for
		// PutMessageStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED (code 2017, which
		// the 5.5.0 proxy maps to LITE_TOPIC_QUOTA_EXCEEDED).
		if b.liteTopics() >= max {
			return fail(v2.Code_LITE_TOPIC_QUOTA_EXCEEDED, "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume queue num exceeded.")
		}
	}
	if max := b.lim.storedBytes; max > 0 {
		var in int64
		for _, m := range msgs {
			in += m.cost()
		}
		if used := b.storedBytes(); used+in > max {
			// The broker's SendMessageProcessor remark for PutMessageStatus
			// SERVICE_NOT_AVAILABLE (its disk is full); the 5.5.0 proxy maps
			// the broker's code to INTERNAL_SERVER_ERROR and keeps the
			// remark. The usage figures are the share of MaxStoredBytes used.
			pct := 100 * float64(used) / float64(max)
			return fail(v2.Code_INTERNAL_SERVER_ERROR,
				"service not available now. It may be caused by one of the following reasons: the broker's disk is full [CL: %5.2f CQ: %5.2f INDEX: %5.2f], messages are put to the slave, message store has been shut down, etc.",
				pct, pct, pct)
		}
	}
	return nil
}
