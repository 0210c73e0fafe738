package rmqfake

import (
	"sync"
	"time"
)

// broker is the state of the emulated proxy and broker. One mutex guards all
// of it: every operation is short, and nothing blocks while holding it.
type broker struct {
	mu    sync.Mutex
	clock Clock
	auto  bool
	ttl   ttlConfig // lite topic TTL (ttl.go)
	// disp is the lite dispatch settings (dispatch.go).
	disp  dispatchConfig
	start int64 // ms, when the server started (dispatch scans count from it)
	// scanAt is the time of the scan running now (ms; 0: none): what a full
	// dispatch schedules counts from it, as the broker's next scan starts
	// after the one that scheduled it ends, whatever a timer's lateness.
	scanAt int64
	// restarting is set while Restart cuts connections, so that dropped
	// Telemetry streams keep their lite subscriptions.
	restarting bool
	seq        uint64 // message sequence (commit-log offset analogue)
	ckSeq      uint64 // checkpoint sequence
	topics     map[resKey]*topic
	groups     map[resKey]*group
	sessions   map[string]*session // by client id
	liteSubs   map[string]*liteSub // by client id
	timers     map[*btimer]struct{}
	closed     bool
	// strs interns strings many messages repeat (born hosts).
	strs map[string]string
	// lim holds the server's limits and their state (limits.go).
	lim limiter

	pollers int
	changed chan struct{} // closed and replaced when pollers or sessions change

	// renewed holds the auto-renewed messages by handle, renewCount their
	// number per client id (renew.go).
	renewed    map[string]*renewal
	renewCount map[string]int
	// halves holds the transactional messages not yet ended (txn.go).
	halves map[txnKey]*halfMessage
}

// locked runs f with b.mu held and lets go of it on every path, a panic in f
// included: one request that panics must not stall the others.
func (b *broker) locked(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

func newBroker(c Clock, auto bool, disp dispatchConfig) *broker {
	return &broker{
		clock:    c,
		auto:     auto,
		disp:     disp,
		start:    c.Now().UnixMilli(),
		topics:   map[resKey]*topic{},
		groups:   map[resKey]*group{},
		sessions: map[string]*session{},
		liteSubs: map[string]*liteSub{},
		timers:   map[*btimer]struct{}{},
		strs:     map[string]string{},
		changed:  make(chan struct{}),
	}
}

func (b *broker) nowMS() int64 { return b.clock.Now().UnixMilli() }

// intern returns s, or an equal string the broker already keeps (at most
// 4096 of them), so that messages repeating it share one. Call it with b.mu
// held.
func (b *broker) intern(s string) string {
	if v, ok := b.strs[s]; ok {
		return v
	}
	if len(b.strs) < 4096 {
		b.strs[s] = s
	}
	return s
}

// btimer is a broker timer: its function runs with b.mu held, unless the
// timer was stopped (under b.mu) first or the broker is closed.
type btimer struct {
	t    Timer
	dead bool
}

// after runs f with b.mu held at time at (ms on the broker's clock). Call it
// with b.mu held.
func (b *broker) after(at int64, f func()) *btimer {
	t := &btimer{}
	d := time.Duration(at-b.nowMS()) * time.Millisecond
	b.timers[t] = struct{}{}
	t.t = b.clock.AfterFunc(d, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if t.dead || b.closed {
			return
		}
		t.dead = true
		delete(b.timers, t)
		f()
	})
	return t
}

// stop cancels t (nil is fine). Call it with b.mu held.
func (b *broker) stop(t *btimer) {
	if t == nil || t.dead {
		return
	}
	t.dead = true
	delete(b.timers, t)
	t.t.Stop()
}

// close stops every timer and wakes every long poll. Call it with b.mu held.
func (b *broker) close() {
	b.closed = true
	for t := range b.timers {
		t.dead = true
		t.t.Stop()
	}
	clear(b.timers)
	for _, t := range b.topics {
		b.wake(t)
	}
}

func (b *broker) wake(t *topic) {
	for w := range t.waiters {
		w.wake()
	}
}

func (b *broker) park(t *topic, w *waiter) {
	if t.waiters == nil {
		t.waiters = map[*waiter]struct{}{}
	}
	t.waiters[w] = struct{}{}
	b.pollers++
	b.notify()
}

func (b *broker) unpark(t *topic, w *waiter) {
	if _, ok := t.waiters[w]; !ok {
		return
	}
	delete(t.waiters, w)
	b.pollers--
	b.notify()
}

// notify wakes WaitFor. Call it with b.mu held.
func (b *broker) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// defaultQueues is how many queues a topic gets unless told otherwise (the
// fixtures of scripts/rocketmq show 4 per topic on the real broker).
const defaultQueues = 4

func (b *broker) newTopic(k resKey, typ TopicType, queues int) *topic {
	if queues <= 0 {
		queues = defaultQueues
	}
	t := &topic{key: k, typ: typ, consumers: map[*group]*groupTopic{}}
	for i := 0; i < queues; i++ {
		t.queues = append(t.queues, &queue{id: int32(i)})
	}
	if typ == TopicLite {
		t.lite = map[string]*liteQueue{}
	}
	b.topics[k] = t
	return t
}

// newGroup makes group k, or returns nil when auto-create may make no more
// (MaxAutoGroups; limits.go).
func (b *broker) newGroup(k resKey, cfg groupConfig) *group {
	if !b.admitGroup() {
		return nil
	}
	g := &group{key: k, topics: map[*topic]*groupTopic{}, shared: eventSet{intrusive: true}}
	b.groups[k] = g
	b.configureGroup(g, cfg)
	return g
}

// configureGroup applies cfg to g; a wildcard group gets a position in every
// lite topic its main topic already has.
func (b *broker) configureGroup(g *group, cfg groupConfig) {
	g.retryMax = cfg.retryMax
	g.bind = cfg.bind
	g.wildcard = cfg.wildcard
	g.fifo = cfg.fifo
	g.exclusive, g.resetExclusive = cfg.exclusive, cfg.resetExclusive
	g.maxEvents = cfg.maxEvents
	if !g.wildcard || g.bind == "" {
		return
	}
	main := b.topics[resKey{ns: g.key.ns, name: g.bind}]
	if main == nil || main.lite == nil {
		return
	}
	for _, lq := range main.lite {
		c := b.cursor(lq, g) // a new cursor is readied (cursor)
		if b.disp.fast {
			// The shared set must hold the backlog of a group that becomes
			// wildcard too: no join walks the lite topics (wildcardJoined).
			b.liteReady(c)
		}
	}
}

// boundGroups returns the groups bound to the LITE main topic t.
func (b *broker) boundGroups(t *topic) []*group {
	var out []*group
	for _, g := range b.groups {
		if g.bind == t.key.name && g.key.ns == t.key.ns {
			out = append(out, g)
		}
	}
	return out
}

// liteQueue returns the lite topic name of main t, creating it (with a
// position for every wildcard group bound to t) when create is set.
func (b *broker) liteQueue(t *topic, name string, create bool) *liteQueue {
	if lq := t.lite[name]; lq != nil || !create {
		return lq
	}
	lq := &liteQueue{main: t, name: name, q: queue{base: t.liteSeq}}
	t.lite[name] = lq
	for _, g := range b.boundGroups(t) {
		if g.wildcard {
			b.cursor(lq, g)
		}
	}
	for _, sub := range b.liteSubs {
		if _, ok := sub.set[name]; ok && sub.main == t && !sub.wildcard {
			b.cursor(lq, sub.group) // an exact subscriber keeps it from being freed
		}
	}
	return lq
}

// cursor returns g's position in lq, creating it at the oldest retained
// message.
func (b *broker) cursor(lq *liteQueue, g *group) *liteCursor {
	if c := lq.cursorOf(g); c != nil {
		return c
	}
	c := &lq.c0
	if lq.c0.g != nil {
		c = &liteCursor{}
		if lq.more == nil {
			lq.more = new([]*liteCursor)
		}
		*lq.more = append(*lq.more, c)
	}
	*c = liteCursor{lq: lq, g: g, ord: ordered{committed: lq.q.base}}
	b.liteReady(c)
	return c
}

// trimLite frees the messages of lq that every group has committed, and
// drops lq altogether once it is empty and settled.
func (b *broker) trimLite(lq *liteQueue) {
	if lq.c0.g == nil {
		return // no group reads it (yet)
	}
	if wanted := lq.main.liteWanted[lq.name]; len(wanted) > 0 {
		for _, g := range wanted {
			if lq.cursorOf(g) == nil {
				// A group that subscribed this lite topic has not read it
				// yet: when it does, it starts at its first message, as on
				// the broker.
				return
			}
		}
		delete(lq.main.liteWanted, lq.name) // their cursors hold their places now
	}
	low := lq.q.end()
	for c := range lq.all() {
		low = min(low, c.ord.committed)
	}
	lq.q.trim(low)
	if len(lq.q.msgs) > 0 {
		return
	}
	for c := range lq.all() {
		if !c.ord.settled(lq.q.end()) || c.ord.timer != nil {
			return
		}
	}
	if lq.main.liteSeq < lq.q.end() {
		lq.main.liteSeq = lq.q.end()
	}
	b.dropLite(lq)
}

// dropLite removes lq from its main topic.
func (b *broker) dropLite(lq *liteQueue) {
	delete(lq.main.lite, lq.name)
	for c := range lq.all() {
		c.gone = true
		if c.queued {
			c.g.shared.dropped()
		}
	}
}

// consumer returns g's consumption state of topic t, starting at the oldest
// retained message of each queue.
func (b *broker) consumer(g *group, t *topic) *groupTopic {
	if gt := g.topics[t]; gt != nil {
		return gt
	}
	gt := &groupTopic{g: g, t: t, inflight: map[dkey]*delivery{}}
	gt.next = make([]int64, len(t.queues))
	if g.fifo {
		gt.ord = make([]*ordered, len(t.queues))
	}
	for i, q := range t.queues {
		gt.next[i] = q.base
		if g.fifo {
			gt.ord[i] = &ordered{committed: q.base}
		}
	}
	g.topics[t] = gt
	t.consumers[g] = gt
	return gt
}

// position is how far gt has consumed queue i.
func (gt *groupTopic) position(i int) int64 {
	if gt.ord != nil {
		return gt.ord[i].committed
	}
	return gt.next[i]
}

// trimQueue frees the messages of queue i of t that every consuming group
// has taken.
func (b *broker) trimQueue(t *topic, i int) {
	if len(t.consumers) == 0 {
		return
	}
	q := t.queues[i]
	low := q.end()
	for _, gt := range t.consumers {
		low = min(low, gt.position(i))
	}
	q.trim(low)
}
