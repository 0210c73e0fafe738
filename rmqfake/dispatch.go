package rmqfake

// The broker learns which lite topics have something for a wildcard group
// from dispatch events: a message arriving while a client of the group is
// subscribed is dispatched at once; a backlog that built up while none was
// subscribed is found only by a full dispatch, which a client's joining
// schedules (LiteEventDispatcher: 5 s after it, run by a scan every 10 s).
// 5.5.0 also schedules one 10 s after an event that members of the group
// all refused (their event queues full); rmqfake's clients take every event,
// so it has no such case. docs/broker-semantics.md, scenarios m and v.

const (
	fullDispatchOnRegister = 5_000  // ms
	dispatchScan           = 10_000 // ms, liteEventCheckInterval
)

// FastLiteDispatch makes a lite backlog reach a wildcard consumer as soon as
// it subscribes, instead of after the broker's periodic full dispatch (5 to
// 15 s). Convenient for tests that produce before they consume; the default
// reproduces the broker.
func FastLiteDispatch() Option { return func(c *config) { c.fastDispatch = true } }

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
	sub.group.wildSubs++
	if b.fastDispatch {
		b.fullDispatch(sub.group)
		return
	}
	b.scheduleFullDispatch(sub.group, fullDispatchOnRegister)
}

// dropLiteSub forgets clientID's lite subscription. Call it with b.mu held.
func (b *broker) dropLiteSub(clientID string) {
	old := b.liteSubs[clientID]
	if old == nil {
		return
	}
	if old.wildcard {
		old.group.wildSubs--
	}
	delete(b.liteSubs, clientID)
}

// scheduleFullDispatch arranges a full dispatch of group g after delay ms, at
// the next scan; one is pending at a time.
func (b *broker) scheduleFullDispatch(g *group, delay int64) {
	if g.fullDispatch != nil {
		return
	}
	now := b.nowMS()
	at := now + delay
	if rem := (at - b.start) % dispatchScan; rem != 0 {
		at += dispatchScan - rem
	}
	g.fullDispatch = b.after(at, func() {
		g.fullDispatch = nil
		b.fullDispatch(g)
	})
}

// fullDispatch makes every lite topic with a backlog for wildcard group g
// ready, if a client of g is subscribed to receive it.
func (b *broker) fullDispatch(g *group) {
	if g.wildSubs <= 0 {
		return
	}
	main := b.topics[resKey{ns: g.key.ns, name: g.bind}]
	if main == nil {
		return
	}
	for _, lq := range main.lite {
		if c := lq.cursorOf(g); c != nil {
			b.liteReady(c)
		}
	}
	b.wake(main)
}
