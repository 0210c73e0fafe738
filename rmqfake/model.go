package rmqfake

import (
	"crypto/md5"
	"iter"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// TopicType is the message type a topic accepts (the broker's
// message.type attribute).
type TopicType int

const (
	// TopicNormal accepts normal messages.
	TopicNormal TopicType = iota + 1
	// TopicFIFO accepts messages with a message group; each group's messages
	// go to one queue, and groups created with [FIFO] consume each queue in
	// order.
	TopicFIFO
	// TopicDelay accepts messages with a delivery time.
	TopicDelay
	// TopicLite is a LITE main topic: each message names a lite topic, an
	// ordered queue of its own.
	TopicLite
	// TopicTransaction accepts transactional messages: each waits as a half
	// message, invisible, until its producer commits it (txn.go).
	TopicTransaction
)

func (t TopicType) String() string {
	switch t {
	case TopicNormal:
		return "normal"
	case TopicFIFO:
		return "fifo"
	case TopicDelay:
		return "delay"
	case TopicLite:
		return "lite"
	case TopicTransaction:
		return "transaction"
	}
	return "unknown"
}

// ParseTopicType reads "normal", "fifo", "delay", "lite" or "transaction".
func ParseTopicType(s string) (TopicType, bool) {
	for _, t := range []TopicType{TopicNormal, TopicFIFO, TopicDelay, TopicLite, TopicTransaction} {
		if t.String() == s {
			return t, true
		}
	}
	return 0, false
}

func (t TopicType) proto() v2.MessageType {
	switch t {
	case TopicFIFO:
		return v2.MessageType_FIFO
	case TopicDelay:
		return v2.MessageType_DELAY
	case TopicLite:
		return v2.MessageType_LITE
	case TopicTransaction:
		return v2.MessageType_TRANSACTION
	}
	return v2.MessageType_NORMAL
}

// message is one stored message. Messages are immutable once stored; a retry
// or dead-letter copy is a new message sharing the body. It is kept compact
// (issue 9 bounds it to 1 KB beyond the body; it takes about 200 B): the
// protobuf objects a delivery carries (timestamps, digest, the lite dispatch
// property) are rendered per delivery from plain fields, and what most
// messages leave empty lives in x.
type message struct {
	seq   uint64 // unique per server, like a commit-log offset
	id    string
	store *topic // where it is stored: the main topic of a lite message, %DLQ%<group> for a dead-letter copy
	main  *topic // the LITE main topic of a lite message
	lite  string
	// bornHost is interned per server: most messages share a few hosts.
	bornHost string
	body     []byte
	props    map[string]string // user properties as sent; shared read-only
	x        *msgExtra         // nil when every field of it is empty
	sum      [md5.Size]byte    // MD5 of body, sent as the body digest
	// born and stored are rendered as protobuf timestamps: born as the client
	// sent it (0, 0 when it sent none), stored on the server's clock.
	bornSec, storedSec     int64
	bornNanos, storedNanos int32
	mtype                  v2.MessageType
	queueID                int32
	offset                 int64 // offset in the queue that holds it
	// hoffset is the offset written into receipt handles. It equals offset,
	// except for the copy of a lite message that went to the DLQ: that copy
	// keeps the original's offset, which is why acking it never commits
	// (docs/broker-semantics.md, scenario g).
	hoffset   int64
	reconsume int32 // delivery attempts already made (retry copies)
	// lmq: a lite message dispatched to its lite topic, whose properties
	// carry INNER_MULTI_DISPATCH=%LMQ%$<main>$<lite> (added when rendered).
	lmq bool
}

// msgExtra holds the message fields most messages leave empty.
type msgExtra struct {
	keys      []string
	tag       string
	msgGroup  string
	trace     string
	deliverAt time.Time // delayed messages
}

func (m *message) keys() []string {
	if m.x == nil {
		return nil
	}
	return m.x.keys
}

func (m *message) tag() string {
	if m.x == nil {
		return ""
	}
	return m.x.tag
}

func (m *message) msgGroup() string {
	if m.x == nil {
		return ""
	}
	return m.x.msgGroup
}

func (m *message) trace() string {
	if m.x == nil {
		return ""
	}
	return m.x.trace
}

func (m *message) deliverAt() time.Time {
	if m.x == nil {
		return time.Time{}
	}
	return m.x.deliverAt
}

// extra returns m.x, creating it.
func (m *message) extra() *msgExtra {
	if m.x == nil {
		m.x = &msgExtra{}
	}
	return m.x
}

func (m *message) size() int { return len(m.body) }

// queue is an append-only run of messages; base is the offset of msgs[0].
type queue struct {
	id   int32
	base int64
	msgs []*message
}

func (q *queue) end() int64 { return q.base + int64(len(q.msgs)) }

func (q *queue) at(off int64) *message {
	if off < q.base || off >= q.end() {
		return nil
	}
	return q.msgs[off-q.base]
}

func (q *queue) push(m *message) {
	m.queueID = q.id
	m.offset = q.end()
	if m.hoffset < 0 {
		m.hoffset = m.offset
	}
	if m.store != nil {
		m.store.bytes += m.cost()
	}
	q.msgs = append(q.msgs, m)
}

// trim drops the messages below offset to, so that they can be collected.
func (q *queue) trim(to int64) {
	n := to - q.base
	if n <= 0 {
		return
	}
	if n > int64(len(q.msgs)) {
		n = int64(len(q.msgs))
	}
	for _, m := range q.msgs[:n] {
		if m.store != nil {
			m.store.bytes -= m.cost()
		}
	}
	clear(q.msgs[:n])
	q.msgs = q.msgs[n:]
	q.base += n
	switch {
	case len(q.msgs) == 0:
		q.msgs = nil
	case cap(q.msgs) > 64 && len(q.msgs) < cap(q.msgs)/4:
		q.msgs = append([]*message(nil), q.msgs...)
	}
}

// topic is a normal, FIFO, delay or LITE main topic.
type topic struct {
	key    resKey
	typ    TopicType
	queues []*queue
	rr     int
	// lite holds the lite topics of a LITE main topic.
	lite map[string]*liteQueue
	// liteSeq numbers lite-queue offsets across the main topic, so that a lite
	// topic dropped when idle and created again never reuses an offset.
	liteSeq int64
	// liteTTL is lite.topic.expiration in ms; 0: never (ttl.go).
	liteTTL int64
	// liteWanted lists, per lite topic, the exact groups whose clients ever
	// subscribed it: its messages are kept until each of them read them
	// (trimLite), so that a group whose subscriber came and went before the
	// messages did still starts at the first one, as on the broker.
	liteWanted map[string][]*group
	// consumers are the groups reading the queues with normal or FIFO pops.
	consumers map[*group]*groupTopic
	waiters   map[*waiter]struct{}
	scheduled map[*btimer]*message // delayed messages not yet due
	sent      int64
	// bytes is what the messages stored by this topic (m.store) count
	// against MaxStoredBytes, wherever they are queued, and its delayed
	// messages not yet due.
	bytes int64
}

// group is a consumer group.
type group struct {
	key      resKey
	retryMax int
	bind     string // LITE main topic (same namespace); empty for a normal group
	wildcard bool
	fifo     bool
	// exclusive and resetExclusive: lite.sub.model=Exclusive and
	// lite.sub.reset.offset.exclusive (see LiteExclusive).
	exclusive      bool
	resetExclusive bool
	topics         map[*topic]*groupTopic
	// clients are the wildcard subscriptions of the group (COMPLETE_ADD), in
	// the order they joined; next rotates the first one an event is offered
	// to; fullDispatch is its pending full dispatch; shared is the one event
	// set of its clients with FastLiteDispatch; maxEvents is
	// lite.sub.client.max.event.cnt (0: unset). dispatch.go.
	clients      []*liteSub
	next         int
	fullDispatch *btimer
	shared       eventSet
	maxEvents    int
	// liteAcked and liteDLQ count over all lite topics, including the ones
	// dropped when idle.
	liteAcked int64
	liteDLQ   int64
}

func (g *group) maxAttempts() int32 { return int32(g.retryMax) + 1 }

// groupTopic is what a group has consumed of one topic with normal pops
// (or, for a FIFO group, ordered pops per queue).
type groupTopic struct {
	g        *group
	t        *topic
	next     []int64    // normal pops: next offset per queue
	ord      []*ordered // FIFO groups: ordered position per queue
	retry    []*message // redeliveries ready now (the group's retry topic)
	retrySeq int64
	inflight map[dkey]*delivery
	acked    int64
	dlq      int64
}

// dkey identifies one delivery: a message of a queue, or a retry copy.
type dkey struct {
	retry  bool
	queue  int32
	offset int64
}

// delivery is a message popped with a normal pop that is not acked yet. It
// usually has one checkpoint; ChangeInvisibleDuration with a stale handle
// adds more, as the broker does.
type delivery struct {
	key       dkey
	msg       *message
	reconsume int32
	cks       []*checkpoint
}

type checkpoint struct {
	seq     uint64
	popTime int64 // ms
	until   int64 // ms
	timer   *btimer
}

// liteQueue is one lite topic of a LITE main topic: one ordered queue.
type liteQueue struct {
	main *topic
	name string
	q    queue
	// c0 and more are the positions of the groups reading it, one per
	// group (see all): the first lives in c0 (c0.g is nil until then), so
	// that a lite topic read by one group is one allocation of 128 B; a main
	// topic has few groups, so the others are a list, not a map.
	c0   liteCursor
	more *[]*liteCursor
}

// all yields the positions of the groups reading lq.
func (lq *liteQueue) all() iter.Seq[*liteCursor] {
	return func(yield func(*liteCursor) bool) {
		if lq.c0.g == nil || !yield(&lq.c0) || lq.more == nil {
			return
		}
		for _, c := range *lq.more {
			if !yield(c) {
				return
			}
		}
	}
}

// cursorOf returns g's position in lq, or nil.
func (lq *liteQueue) cursorOf(g *group) *liteCursor {
	for c := range lq.all() {
		if c.g == g {
			return c
		}
	}
	return nil
}

// liteCursor is a group's ordered position in one lite topic.
type liteCursor struct {
	lq    *liteQueue
	g     *group
	ord   ordered
	acked int64
	dlq   int32 // int32, with the flags, keeps a liteQueue at 128 B
	// queued: c waits in its group's shared event set (FastLiteDispatch).
	queued bool
	// gone: its lite topic was dropped from the main topic (dropLite); a
	// lite topic of the same name created later is another liteQueue.
	gone bool
}

// dropped reports whether c's lite topic is no longer its main topic's.
func (c *liteCursor) dropped() bool { return c.gone }

// session is the settings record of one client id (the proxy keeps one).
type session struct {
	clientID string
	typ      v2.ClientType
	settings *v2.Settings
	group    resKey // consumers
	// push sends a command the server starts (a transaction check) on the
	// client's Telemetry stream; nil until the stream answered settings.
	push    func(*v2.TelemetryCommand) error
	pushTok *byte // the stream push belongs to; cleared when it ends
	// seen is when the client was last heard from (ms: settings,
	// heartbeat, the end of its stream), for SessionExpiry.
	seen int64
}

// registered tells whether the settings registered the client with the
// proxy (gave it a channel): a consumer's always, a producer's only with a
// topic to publish to. ChangeInvisibleDuration and dead-lettering need it
// (the 5.5.0 proxy dereferences the missing channel otherwise: conformance j
// and t).
func (s *session) registered() bool {
	if s == nil {
		return false
	}
	if p := s.settings.GetPublishing(); p != nil {
		return len(p.GetTopics()) > 0
	}
	return true
}

// liteSub is the lite subscription of one client id.
type liteSub struct {
	group    *group
	main     *topic
	wildcard bool
	names    []string // exact lite topics, in subscription order
	set      map[string]struct{}
	rr       int
	seen     int64 // last sync (ms), for SessionExpiry
	// events is a wildcard client's event set (nil until its first event),
	// blacklisted until when (ms) it gets no new event (dispatch.go).
	events      *eventSet
	blacklisted int64
}

// waiter is a long poll parked on a topic.
type waiter struct {
	ch chan struct{}
}

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}
