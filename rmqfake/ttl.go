package rmqfake

import "time"

// Lite topic TTL (notes/research/notify-unsubscribe-lite.md, from the 5.5.0
// broker's AbstractLiteLifecycleManager): a LITE main topic's attribute
// lite.topic.expiration (minutes, -1 never, the default) lets the broker
// delete a lite topic whose last message was stored longer ago than that,
// and than minLiteTTl (15 min), whatever is still unconsumed. The scan runs
// every liteTtlCheckInterval (2 min), not before the broker has run for
// minLiteTTl. Deletion is silent: the messages and every group's offsets go,
// the lite topic leaves every client's subscription, and no client is told.

const (
	// DefaultMinLiteTTL is the broker's minLiteTTl.
	DefaultMinLiteTTL = 15 * time.Minute
	// DefaultLiteTTLCheckInterval is the broker's liteTtlCheckInterval.
	DefaultLiteTTLCheckInterval = 2 * time.Minute
)

// LiteTTL sets a LITE main topic's lite.topic.expiration in minutes: its lite
// topics are deleted once their last message is older than that (and than
// MinLiteTTL). 0 or -1: never (the default).
func LiteTTL(minutes int) TopicOption { return topicOpt(func(c *topicConfig) { c.liteTTL = minutes }) }

// MinLiteTTL sets the broker's minLiteTTl: no lite topic is deleted for its
// TTL younger than this, and the TTL scan starts this long after the server.
// Default 15 min.
func MinLiteTTL(d time.Duration) Option { return func(c *config) { c.minLiteTTL = &d } }

// LiteTTLCheckInterval sets how often the TTL scan runs (the broker's
// liteTtlCheckInterval). Default 2 min.
func LiteTTLCheckInterval(d time.Duration) Option { return func(c *config) { c.ttlInterval = d } }

// ttlConfig is the broker's TTL settings, in ms.
type ttlConfig struct {
	min, interval int64
	timer         *btimer // the next scan; nil until a topic has a TTL
}

// armTTL schedules the TTL scan, once some topic has a TTL. Call it with
// b.mu held.
func (b *broker) armTTL() {
	if b.ttl.timer != nil || b.closed {
		return
	}
	at := max(b.start+b.ttl.min, b.nowMS()+b.ttl.interval)
	b.ttl.timer = b.after(at, b.ttlScan)
}

// ttlScan deletes the expired lite topics and schedules the next scan.
func (b *broker) ttlScan() {
	b.ttl.timer = nil
	now := b.nowMS()
	armed := false
	for _, t := range b.topics {
		if t.lite == nil || t.liteTTL <= 0 {
			continue
		}
		armed = true
		for _, lq := range t.lite {
			n := len(lq.q.msgs)
			if n == 0 {
				continue
			}
			last := lq.q.msgs[n-1]
			stored := last.storedSec*1000 + int64(last.storedNanos)/1e6
			if idle := now - stored; idle >= b.ttl.min && idle > t.liteTTL {
				b.expireLite(lq)
			}
		}
	}
	if armed {
		b.ttl.timer = b.after(now+max(b.ttl.interval, 1), b.ttlScan)
	}
}

// expireLite deletes lite topic lq silently. Call it with b.mu held.
func (b *broker) expireLite(lq *liteQueue) {
	for c := range lq.all() {
		b.stop(c.ord.timer)
		c.ord.timer = nil
	}
	lq.q.trim(lq.q.end()) // frees what its messages count
	if lq.main.liteSeq < lq.q.end() {
		lq.main.liteSeq = lq.q.end()
	}
	b.dropLite(lq)
	// Its exact subscribers leave it below: their claim on its messages
	// (liteWanted) goes too, or a later lite topic of the same name would
	// keep its messages for them for good.
	delete(lq.main.liteWanted, lq.name)
	for _, sub := range b.liteSubs {
		if sub.main == lq.main {
			sub.remove(lq.name)
		}
	}
}
