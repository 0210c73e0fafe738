package rmqfake

import (
	"fmt"
	"math"
	"time"
)

// Lite dispatch of wildcard groups, as the 5.5.0 broker's LiteEventDispatcher
// does it (docs/broker-semantics.md, "Lite dispatch in the 5.5.0 broker"):
//
//   - A wildcard client pops only the lite topics in its own event set. An
//     event (a message stored, an ack or an unblock that leaves a backlog,
//     a full dispatch) puts the lite topic into the set of one client of the
//     group, tried in turn from a rotating start (the broker: a random one),
//     whether or not another client's set holds it already (a set holds a
//     lite topic once, and accepts it again without adding it, as the
//     broker's ClientEventSet does); a set holds at most its cap, read when
//     the set is created: the group's
//     lite.sub.client.max.event.cnt (LiteMaxEventCount), else the server's
//     MaxClientEventCount (the broker's maxClientEventCount, 100).
//   - An event no client takes is lost, and schedules a full dispatch of the
//     group LiteFullDispatchDelay later (liteEventFullDispatchDelayTimeForWildcardGroup,
//     10 s), run by the next scan (liteEventCheckInterval, 10 s, counted from
//     the server's start). One is pending per group at a time.
//   - A client joining the group schedules one 5 s later (a constant on the
//     broker). A message that finds the group without clients schedules
//     nothing.
//   - A full dispatch offers every lite topic with a backlog (unacked ones
//     too) until one is refused (which schedules the next).
//   - A popped event whose lite topic is empty, blocked or gone is dropped.
//   - A set that holds events its client has not taken from for 10 s is
//     taken from it at a scan: its events go to the group's other clients
//     (the client itself as the last resort), and the client gets no new
//     event for 10 s (the broker's blacklist).
//
// FastLiteDispatch replaces all of this with one unbounded set per group,
// shared by its clients, that holds every lite topic of the group with a
// backlog whether or not a client is there (so a joining client needs no
// full dispatch): everything reaches a consumer as soon as it can.

const (
	// DefaultMaxClientEventCount is the broker's maxClientEventCount: how
	// many lite topics a client's event set holds when its group sets no
	// lite.sub.client.max.event.cnt.
	DefaultMaxClientEventCount = 100
	// MinLiteMaxEventCount is the smallest lite.sub.client.max.event.cnt the
	// broker accepts.
	MinLiteMaxEventCount = 10
	// DefaultLiteEventCheckInterval is the broker's liteEventCheckInterval:
	// how often its lite event scan runs.
	DefaultLiteEventCheckInterval = 10 * time.Second
	// DefaultLiteFullDispatchDelay is the broker's
	// liteEventFullDispatchDelayTimeForWildcardGroup.
	DefaultLiteFullDispatchDelay = 10 * time.Second

	fullDispatchOnRegister = 5_000  // ms, LiteCtlListenerImpl.onRegister
	minFullDispatchDelay   = 50     // ms, scheduleFullDispatchForClient
	clientInactive         = 10_000 // ms, CLIENT_INACTIVE_INTERVAL
	blacklistFor           = 10_000 // ms, BLACKLIST_EXPIRE_SECONDS
)

// dispatchConfig is the server's lite dispatch settings, in ms.
type dispatchConfig struct {
	fast      bool  // FastLiteDispatch
	maxEvents int   // 0: unbounded
	scan      int64 // liteEventCheckInterval
	wildDelay int64 // liteEventFullDispatchDelayTimeForWildcardGroup
}

func defaultDispatch() dispatchConfig {
	return dispatchConfig{maxEvents: DefaultMaxClientEventCount,
		scan: DefaultLiteEventCheckInterval.Milliseconds(), wildDelay: DefaultLiteFullDispatchDelay.Milliseconds()}
}

// FastLiteDispatch makes a lite backlog reach a wildcard consumer as soon as
// it subscribes, instead of after the broker's full dispatch (5 to 15 s), and
// puts no cap on the lite topics waiting for a group's clients. Convenient
// for tests that produce before they consume; the default reproduces the
// broker.
func FastLiteDispatch() Option { return func(c *config) { c.dispatch.fast = true } }

// MaxClientEventCount sets how many lite topics a wildcard client's event
// set holds when its group sets no LiteMaxEventCount (the broker's
// maxClientEventCount). Default 100; 0 or less: no cap.
func MaxClientEventCount(n int) Option {
	return func(c *config) { c.dispatch.maxEvents = max(n, 0) }
}

// LiteEventCheckInterval sets how often the lite event scan runs (the
// broker's liteEventCheckInterval): a scheduled full dispatch waits for the
// next scan. Default 10 s; 0 or less: the default.
func LiteEventCheckInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.dispatch.scan = max(d.Milliseconds(), 1)
		}
	}
}

// LiteFullDispatchDelay sets how long after an event no client of a
// wildcard group could take its full dispatch is due (the broker's
// liteEventFullDispatchDelayTimeForWildcardGroup). Default 10 s; at least
// 50 ms, as on the broker; less than 0: the default.
func LiteFullDispatchDelay(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.dispatch.wildDelay = d.Milliseconds()
		}
	}
}

// LiteMaxEventCount sets a wildcard group's lite.sub.client.max.event.cnt:
// how many lite topics each of its clients' event sets holds (read when a
// set is created: a client's first event after it joined). At least 10
// (MinLiteMaxEventCount), as the broker accepts; 0: unset, the server's
// MaxClientEventCount.
func LiteMaxEventCount(n int) GroupOption {
	return groupOpt(func(c *groupConfig) { c.maxEvents = n })
}

func checkMaxEvents(n int) error {
	if n != 0 && (n < MinLiteMaxEventCount || n > math.MaxInt32) {
		return fmt.Errorf("lite.sub.client.max.event.cnt %d: want %d to %d (0: unset)", n, MinLiteMaxEventCount, math.MaxInt32)
	}
	return nil
}

// eventSet is a client's event set (ClientEventSet): lite topics that may
// have something to deliver, in the order they came, each once (another
// client's set may hold it too). The group's shared set of FastLiteDispatch
// (intrusive) marks its members with liteCursor.queued instead of a map: a
// cursor belongs to one group, and a group has one shared set.
type eventSet struct {
	cap       int // 0: unbounded
	q         []*liteCursor
	head      int
	has       map[*liteCursor]struct{}
	intrusive bool
	// stale counts the cursors in q whose lite topic was dropped
	// (intrusive sets: dropLiteQueue); past half of q they are swept out.
	stale int
	// taken is when the client last took an event (ms); check is the scan
	// that looks at it while the set holds events.
	taken int64
	check *btimer
}

func (s *eventSet) len() int { return len(s.q) - s.head }

// holds reports whether c waits in the set.
func (s *eventSet) holds(c *liteCursor) bool {
	if s.intrusive {
		return c.queued
	}
	_, ok := s.has[c]
	return ok
}

// push adds c unless the set holds it already.
func (s *eventSet) push(c *liteCursor) {
	if s.holds(c) {
		return
	}
	if s.intrusive {
		c.queued = true
	} else {
		if s.has == nil {
			s.has = map[*liteCursor]struct{}{}
		}
		s.has[c] = struct{}{}
	}
	s.q = append(s.q, c)
}

// next takes the oldest event, or nil.
func (s *eventSet) next() *liteCursor {
	if s.head >= len(s.q) {
		return nil
	}
	c := s.q[s.head]
	s.q[s.head] = nil
	s.head++
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	} else if s.head > 1024 && s.head > len(s.q)/2 {
		s.q = append([]*liteCursor(nil), s.q[s.head:]...)
		s.head = 0
	}
	if s.intrusive {
		if s.stale > 0 && c.dropped() {
			s.stale--
		}
		c.queued = false
	} else {
		delete(s.has, c)
	}
	return c
}

// dropped notes that c's lite topic was dropped while c waits in the
// intrusive set s; once most of s is such cursors, they are swept out, so
// that a group nobody consumes does not keep dropped lite topics.
func (s *eventSet) dropped() {
	s.stale++
	if s.stale <= 64 || s.stale <= s.len()/2 {
		return
	}
	live := s.q[:0]
	for _, c := range s.q[s.head:] {
		if c.dropped() {
			c.queued = false
			continue
		}
		live = append(live, c)
	}
	clear(s.q[len(live):])
	s.q, s.head, s.stale = live, 0, 0
}

// drain empties the set and returns its events.
func (s *eventSet) drain() []*liteCursor {
	var out []*liteCursor
	for c := s.next(); c != nil; c = s.next() {
		out = append(out, c)
	}
	return out
}

// events returns the set a wildcard client pops: its own, or its group's
// with FastLiteDispatch. nil: none yet.
func (b *broker) events(sub *liteSub) *eventSet {
	if b.disp.fast {
		return &sub.group.shared
	}
	return sub.events
}

// setLiteSub records sub as clientID's lite subscription. Call it with b.mu
// held.
func (b *broker) setLiteSub(clientID string, sub *liteSub) {
	old := b.liteSubs[clientID]
	if old == sub {
		return
	}
	b.dropLiteSub(clientID)
	b.liteSubs[clientID] = sub
	if sub.wildcard {
		b.wildcardJoined(sub)
	}
}

// markWildcard turns sub (already recorded) into a wildcard subscription.
func (b *broker) markWildcard(sub *liteSub) {
	if sub.wildcard {
		return
	}
	sub.wildcard = true
	b.wildcardJoined(sub)
}

func (b *broker) wildcardJoined(sub *liteSub) {
	g := sub.group
	g.clients = append(g.clients, sub)
	if b.disp.fast {
		// The shared set holds the group's backlog already (liteReady).
		b.wake(sub.main)
		return
	}
	b.scheduleFullDispatch(g, fullDispatchOnRegister)
}

// dropLiteSub forgets clientID's lite subscription; the events of its set go
// to the group's other clients. Call it with b.mu held.
func (b *broker) dropLiteSub(clientID string) {
	old := b.liteSubs[clientID]
	if old == nil {
		return
	}
	delete(b.liteSubs, clientID)
	if !old.wildcard {
		return
	}
	g := old.group
	for i, s := range g.clients {
		if s == old {
			g.clients = append(g.clients[:i:i], g.clients[i+1:]...)
			break
		}
	}
	if set := old.events; set != nil {
		old.events = nil
		b.stop(set.check)
		for _, c := range set.drain() {
			b.liteReady(c)
		}
	}
}

// liteReady dispatches an event for c: its lite topic may have something for
// its wildcard group. Call it with b.mu held.
func (b *broker) liteReady(c *liteCursor) {
	if !c.g.wildcard || c.gone {
		return
	}
	if c.ord.committed >= c.lq.q.end() {
		return
	}
	if b.disp.fast {
		// The group's shared set takes it whether or not a client is there
		// yet: the set always holds every lite topic of the group with a
		// backlog that is not blocked (a blocked one comes back when it
		// unblocks: settleLite), so a client that joins finds them all
		// without a walk of every lite topic.
		if !c.ord.blocked(b.nowMS(), "") {
			c.g.shared.push(c)
		}
		return
	}
	b.dispatch(c, nil)
}

// dispatch offers c's lite topic to one client of its group
// (selectAndDispatch): each in turn from a rotating start, skipping
// blacklisted ones and keeping except for the last resort. When none takes
// it, a full dispatch of the group is scheduled. It reports whether one took
// it. Call it with b.mu held.
func (b *broker) dispatch(c *liteCursor, except *liteSub) bool {
	g := c.g
	n := len(g.clients)
	if n == 0 {
		return false // a wildcard group without clients has no subscriber: nothing is scheduled
	}
	now := b.nowMS()
	start := g.next % n
	g.next++
	var last *liteSub
	for i := range n {
		sub := g.clients[(start+i)%n]
		switch {
		case sub == except:
			last = sub
		case sub.blacklisted > now:
		case b.offer(sub, c, now):
			return true
		}
	}
	if last != nil && b.offer(last, c, now) {
		return true
	}
	b.scheduleFullDispatch(g, b.disp.wildDelay)
	return false
}

// offer puts c into sub's event set, creating the set with its cap, unless
// the set is full; a set that holds c already accepts it without adding it
// (a full one refuses it, as the broker's does).
func (b *broker) offer(sub *liteSub, c *liteCursor, now int64) bool {
	set := sub.events
	if set == nil {
		set = &eventSet{cap: b.disp.maxEvents, taken: now}
		if n := sub.group.maxEvents; n > 0 {
			set.cap = n
		}
		sub.events = set
	}
	if set.cap > 0 && set.len() >= set.cap {
		return false
	}
	set.push(c)
	b.armInactive(sub, set)
	return true
}

// armInactive arranges the scan that looks at sub's set once its client has
// taken nothing for clientInactive (maybeBlock): the first scan after now
// that is past that (a scan hands out the events of the sets it drops after
// it looked at every set).
func (b *broker) armInactive(sub *liteSub, set *eventSet) {
	if set.check != nil {
		return
	}
	at := b.nextScan(max(set.taken+clientInactive, b.nowMS()) + 1)
	set.check = b.after(at, func() {
		set.check = nil
		b.scanAt = at
		defer func() { b.scanAt = 0 }()
		if sub.events != set || set.len() == 0 {
			return
		}
		now := b.nowMS()
		if now-set.taken <= clientInactive {
			b.armInactive(sub, set)
			return
		}
		// Removed, blacklisted, its events dispatched again with the client
		// as the last resort.
		sub.events = nil
		sub.blacklisted = now + blacklistFor
		for _, c := range set.drain() {
			b.dispatch(c, sub)
		}
		b.wake(sub.main)
	})
}

// nextScan is the first scan at or after at (ms): scans run every
// liteEventCheckInterval from the server's start.
func (b *broker) nextScan(at int64) int64 {
	if rem := (at - b.start) % b.disp.scan; rem != 0 {
		at += b.disp.scan - rem
	}
	return at
}

// scheduleFullDispatch arranges a full dispatch of group g after delay ms, at
// the next scan; one is pending at a time.
func (b *broker) scheduleFullDispatch(g *group, delay int64) {
	if g.fullDispatch != nil {
		return
	}
	now := b.nowMS()
	if b.scanAt != 0 {
		now = b.scanAt
	}
	at := b.nextScan(now + max(delay, minFullDispatchDelay))
	g.fullDispatch = b.after(at, func() {
		g.fullDispatch = nil
		b.scanAt = at
		defer func() { b.scanAt = 0 }()
		b.fullDispatch(g)
	})
}

// fullDispatch offers every lite topic with a backlog for wildcard group g
// to its clients, until one is refused (doFullDispatchForWildcardGroup).
// FastLiteDispatch needs none: its shared sets hold every backlog.
func (b *broker) fullDispatch(g *group) {
	if len(g.clients) == 0 {
		return
	}
	main := b.topics[resKey{ns: g.key.ns, name: g.bind}]
	if main == nil {
		return
	}
	for _, lq := range main.lite {
		c := lq.cursorOf(g)
		if c == nil || c.ord.committed >= lq.q.end() {
			continue
		}
		if !b.dispatch(c, nil) {
			break
		}
	}
	b.wake(main)
}

// popEvents pops, for wildcard client sub, the lite topics of its event set
// until it has r.batch messages; an event whose lite topic is gone, empty or
// blocked is dropped.
func (b *broker) popEvents(r *popRequest, t *topic, sub *liteSub) []delivered {
	set := b.events(sub)
	if set == nil {
		return nil
	}
	var out []delivered
	if set.len() > 0 {
		set.taken = b.nowMS()
	}
	for guard := set.len() + 4*maxBatch; len(out) < r.batch && guard > 0; guard-- {
		c := set.next()
		if c == nil {
			break
		}
		if c.gone {
			continue // the lite topic was dropped while idle
		}
		out = b.popCursor(r, c, out)
	}
	if set.len() == 0 {
		b.stop(set.check)
		set.check = nil
	}
	return out
}

// liteEvents counts the lite topics waiting in the event sets of g's
// clients (Stats).
func (b *broker) liteEvents(g *group) int {
	if b.disp.fast {
		return g.shared.len() - g.shared.stale
	}
	n := 0
	for _, sub := range g.clients {
		if sub.events != nil {
			n += sub.events.len()
		}
	}
	return n
}
