package rmqfake

import (
	"fmt"
	"time"

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

// DefaultMaxAutoTopics is the default of MaxAutoTopics.
const DefaultMaxAutoTopics = 10_000

// MaxAutoTopics bounds how many topics AutoCreate makes on a send, a
// QueryRoute, a lite consumer's settings or a lite subscription sync. Past
// it an unknown topic stays unknown, with the limit named in the answer: a
// send gets MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, a QueryRoute or lite sync
// TOPIC_NOT_FOUND. Topics made by CreateTopic and fixtures, and the DLQ
// topics the server makes, do not count. The default is DefaultMaxAutoTopics;
// n <= 0 removes the limit.
func MaxAutoTopics(n int) Option { return func(c *config) { c.limits.autoTopics = n } }

// DefaultSessionExpiry is the default of SessionExpiry: the 5.5.0 proxy's
// channelExpiredTimeout.
const DefaultSessionExpiry = 120 * time.Second

// SessionExpiry is how long the server keeps the settings (and a lite
// consumer's lite subscription) of a client whose Telemetry stream has
// ended, counted on the server's Clock from its last settings, heartbeat or
// lite subscription sync, or the end of its stream, whichever came last.
// The proxy drops a client whose channel saw no heartbeat for 120 s
// (channelExpiredTimeout, scanned every 10 s) and then its settings; a
// client that left without NotifyClientTermination used to be kept for good.
// A client whose stream is still open never expires (a live client
// heartbeats every 10 s, and a test's ManualClock may jump hours past its
// heartbeats). After expiry the client's RPCs find no settings, as on the
// proxy (Heartbeat: UNRECOGNIZED_CLIENT_TYPE; ReceiveMessage:
// INTERNAL_SERVER_ERROR), until it sends its settings again. The default is
// DefaultSessionExpiry; d <= 0 keeps sessions for good.
func SessionExpiry(d time.Duration) Option { return func(c *config) { c.limits.sessionExpiry = d } }

// DefaultMaxLiteSubscriptions is the default of MaxLiteSubscriptions: the
// 5.5.0 broker's maxLiteSubscriptionCount.
const DefaultMaxLiteSubscriptions = 100_000

// MaxLiteSubscriptions bounds the lite subscriptions of all clients,
// counted as the broker counts them: one per (client, lite topic), a
// wildcard subscription as one, across requests. As on the 5.5.0 broker, a
// PARTIAL_ADD made when the count has reached the limit is refused (checked
// before it adds, so the last one accepted may pass the limit by its size)
// with LITE_SUBSCRIPTION_QUOTA_EXCEEDED
// "org.apache.rocketmq.broker.lite.LiteQuotaException: lite subscription
// quota exceeded <n>"; rmqfake refuses a COMPLETE_ADD that would grow the
// count past it too (5.5.0 does not check COMPLETE_ADD). The proxy's check
// of each request (at most the group's quota, 2000, plus 300 names) stays.
// The default is DefaultMaxLiteSubscriptions; n <= 0 removes the limit.
func MaxLiteSubscriptions(n int) Option { return func(c *config) { c.limits.liteSubs = n } }

// limits are the bounds of one server (see the options above); a value of 0
// or less means none.
type limits struct {
	storedBytes   int64
	liteTopics    int
	autoGroups    int
	autoTopics    int
	sessionExpiry time.Duration
	liteSubs      int
}

func defaultLimits() limits {
	return limits{storedBytes: DefaultMaxStoredBytes, liteTopics: DefaultMaxLiteTopics, autoGroups: DefaultMaxAutoGroups,
		autoTopics: DefaultMaxAutoTopics, sessionExpiry: DefaultSessionExpiry, liteSubs: DefaultMaxLiteSubscriptions}
}

// limiter enforces a server's limits; its state is guarded by b.mu.
type limiter struct {
	limits
	// admin is set while CreateGroup creates a group, which is not
	// limited; autoMade counts the groups auto-create made.
	admin    bool
	autoMade int
	// autoTopicsMade counts the topics autoTopic made.
	autoTopicsMade int
	// streams counts the open Telemetry streams per client id; sweep is
	// the pending expiry sweep, due at sweepAt (ms).
	streams map[string]int // per client id, its streams that registered settings
	open    int            // every open Telemetry stream
	sweep   *btimer
	sweepAt int64
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

// autoTopic makes topic k of type typ for auto-create, or returns nil when
// auto-create is off or has made MaxAutoTopics topics. Call it with b.mu
// held.
func (b *broker) autoTopic(k resKey, typ TopicType) *topic {
	if !b.auto {
		return nil
	}
	if max := b.lim.autoTopics; max > 0 && b.lim.autoTopicsMade >= max {
		return nil
	}
	b.lim.autoTopicsMade++
	return b.newTopic(k, typ, 0)
}

// autoTopicsFull explains a topic auto-create did not make. Call it with
// b.mu held.
func (b *broker) autoTopicsFull() string {
	if max := b.lim.autoTopics; b.auto && max > 0 && b.lim.autoTopicsMade >= max {
		return fmt.Sprintf(" (auto-create stopped at %d topics, the server's MaxAutoTopics)", max)
	}
	return ""
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

// streamOpened records a Telemetry stream of client id. Call it with b.mu
// held.
func (b *broker) streamOpened(id string) {
	if b.lim.streams == nil {
		b.lim.streams = map[string]int{}
	}
	b.lim.streams[id]++
	b.notify()
}

// streamClosed records the end of a Telemetry stream of client id: once its
// last stream is gone, its session and lite subscription start to expire.
// Call it with b.mu held.
func (b *broker) streamClosed(id string) {
	if b.lim.streams[id]--; b.lim.streams[id] <= 0 {
		delete(b.lim.streams, id)
		if b.restarting || b.closed {
			b.notify() // Restart forgets sessions; Stop ends everything
			return
		}
		if sess := b.sessions[id]; sess != nil {
			b.touch(sess)
		}
		if sub := b.liteSubs[id]; sub != nil {
			b.touchLite(id, sub)
		}
	}
	b.notify()
}

// touch records that the client of sess was heard from now. Call it with
// b.mu held.
func (b *broker) touch(sess *session) {
	sess.seen = b.nowMS()
	if b.lim.streams[sess.clientID] == 0 {
		b.armSweep(sess.seen)
	}
}

// touchLite records that client id synced its lite subscription sub now.
// Call it with b.mu held.
func (b *broker) touchLite(id string, sub *liteSub) {
	sub.seen = b.nowMS()
	if b.lim.streams[id] == 0 {
		b.armSweep(sub.seen)
	}
}

// armSweep makes sure an expiry sweep runs for what was last heard from at
// seen (ms): at seen + SessionExpiry, rounded up to the second so that many
// clients leaving together cost one sweep. Call it with b.mu held.
func (b *broker) armSweep(seen int64) {
	d := b.lim.sessionExpiry.Milliseconds()
	if d <= 0 || b.closed {
		return
	}
	at := (seen + d + 999) / 1000 * 1000
	if b.lim.sweep != nil && !b.lim.sweep.dead {
		if b.lim.sweepAt <= at {
			return
		}
		b.stop(b.lim.sweep)
	}
	b.lim.sweepAt = at
	b.lim.sweep = b.after(at, b.sweepSessions)
}

// sweepSessions expires the sessions and lite subscriptions of clients
// without an open Telemetry stream that were last heard from SessionExpiry
// ago or more, and arms the next sweep. Call it with b.mu held.
func (b *broker) sweepSessions() {
	b.lim.sweep = nil
	d := b.lim.sessionExpiry.Milliseconds()
	now := b.nowMS()
	next := int64(-1)
	due := func(seen int64) bool {
		if seen+d <= now {
			return true
		}
		if next < 0 || seen < next {
			next = seen
		}
		return false
	}
	for id, sess := range b.sessions {
		if b.lim.streams[id] == 0 && due(sess.seen) {
			b.expire(id)
		}
	}
	for id, sub := range b.liteSubs {
		if b.lim.streams[id] == 0 && b.sessions[id] == nil && due(sub.seen) {
			b.dropLiteSub(id)
		}
	}
	if next >= 0 {
		b.armSweep(next)
	}
}

// expire forgets client id as the proxy does when its channel expires: its
// settings, a lite consumer's lite subscription and the messages the
// server renews for it. Call it with b.mu held.
func (b *broker) expire(id string) {
	b.offlineLite(id)
	b.clearRenewals(id)
	delete(b.sessions, id)
	b.notify()
}

// liteSubscriptions counts (client, lite topic) subscriptions, a wildcard
// subscription as one, as the broker counts them for maxLiteSubscriptionCount.
// Call it with b.mu held.
func (b *broker) liteSubscriptions() int {
	n := 0
	for _, sub := range b.liteSubs {
		if sub.wildcard {
			n++
		} else {
			n += len(sub.set)
		}
	}
	return n
}

// admitLiteSub checks a SyncLiteSubscription of client id (for group g)
// against MaxLiteSubscriptions before anything changes. Call it with b.mu
// held.
func (b *broker) admitLiteSub(id string, g *group, action v2.LiteSubscriptionAction, names []string) *failure {
	max := b.lim.liteSubs
	if max <= 0 {
		return nil
	}
	total := b.liteSubscriptions()
	grows := false
	switch action {
	case v2.LiteSubscriptionAction_PARTIAL_ADD:
		grows = true // LiteSubscriptionRegistryImpl.addPartialSubscription checks before it looks
	case v2.LiteSubscriptionAction_COMPLETE_ADD:
		now, after := 0, 1
		if sub := b.liteSubs[id]; sub != nil {
			now = len(sub.set)
			if sub.wildcard {
				now = 1
			}
		}
		if !g.wildcard {
			set := make(map[string]struct{}, len(names))
			for _, n := range names {
				set[n] = struct{}{}
			}
			after = len(set)
		}
		grows = after > now
	}
	if grows && total >= max {
		return fail(v2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED, "org.apache.rocketmq.broker.lite.LiteQuotaException: lite subscription quota exceeded %d", max)
	}
	return nil
}
