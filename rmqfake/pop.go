package rmqfake

import (
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// filter is a TAG filter (a nil set matches every message) or an SQL92
// filter (sql92.go).
type filter struct {
	tags map[string]bool
	sql  *sqlExpr
}

// parseFilter reads a filter expression as FilterAPI.build does, and
// compiles an SQL92 one as the broker's pop does: an empty expression is
// the proxy's ILLEGAL_FILTER_EXPRESSION, one the broker cannot compile its
// SUBSCRIPTION_PARSE_FAILED, which the proxy answers as
// INTERNAL_SERVER_ERROR (scenario q).
func parseFilter(fe *v2.FilterExpression) (filter, *failure) {
	expr := fe.GetExpression()
	if fe.GetType() == v2.FilterType_SQL {
		if expr == "" {
			return filter{}, fail(v2.Code_ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92")
		}
		e, err := compileSQL92(expr)
		if err != nil {
			return filter{}, fail(v2.Code_INTERNAL_SERVER_ERROR, "parse the consumer's subscription failed")
		}
		return filter{sql: e}, nil
	}
	if expr == "" || expr == "*" {
		return filter{}, nil
	}
	parts := strings.Split(expr, "||")
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1] // Java's split drops trailing empty strings
	}
	if len(parts) == 0 {
		return filter{}, fail(v2.Code_ILLEGAL_FILTER_EXPRESSION, "subString split error")
	}
	f := filter{tags: map[string]bool{}}
	for _, p := range parts {
		if p = javaTrim(p); p != "" {
			f.tags[p] = true
		}
	}
	if len(f.tags) == 0 {
		f.tags = nil
	}
	return f, nil
}

// match reports whether m passes f. Lite pops do not filter by SQL92 (the
// broker's PopLiteMessageProcessor has no filter code).
func (f filter) match(m *message) bool {
	if f.sql != nil {
		return (m.main != nil && m.main.typ == TopicLite) || f.sql.matches(sqlMessageProps(m))
	}
	return f.tags == nil || f.tags[m.tag()]
}

// popRequest is one ReceiveMessage, validated.
type popRequest struct {
	clientID  string
	lite      bool // the session is a lite consumer: pop lite topics
	group     resKey
	topic     resKey
	batch     int
	invisible int64 // ms
	filter    filter
	attemptID string
	autoRenew bool     // auto_renew=true: held for the client (renew.go)
	filterErr *failure // an SQL92 filter the broker cannot compile: answered after the route checks
}

// delivered is one message handed out by a pop.
type delivered struct {
	m       *message
	handle  handle
	attempt int32
}

// target resolves the topic and group of a pop with the checks of the proxy
// (route lookup) and the broker (PopMessageProcessor, PopLiteMessageProcessor
// preCheck). Call it with b.mu held.
func (b *broker) target(r *popRequest) (*topic, *group, *failure) {
	t := b.topics[r.topic]
	if t == nil {
		typ := TopicNormal
		if r.lite {
			typ = TopicLite
		}
		t = b.autoTopic(r.topic, typ) // nil without AutoCreate or past MaxAutoTopics
	}
	if t == nil {
		return nil, nil, fail(v2.Code_TOPIC_NOT_FOUND, "No topic route info in name server for the topic: %s", r.topic.name)
	}
	g := b.groups[r.group]
	if g == nil && b.auto {
		cfg := groupConfig{retryMax: defaultRetryMax}
		if r.lite {
			cfg.bind, cfg.wildcard = r.topic.name, true
		}
		g = b.newGroup(r.group, cfg)
	}
	if g == nil {
		return nil, nil, fail(v2.Code_CONSUMER_GROUP_NOT_FOUND, "subscription group [%s] not exist", r.group.name)
	}
	if r.lite {
		if t.typ != TopicLite {
			return nil, nil, fail(v2.Code_INTERNAL_SERVER_ERROR, "the topic [%s] message type not match", t.key.name)
		}
		if g.bind != t.key.name {
			return nil, nil, fail(v2.Code_INTERNAL_SERVER_ERROR, "subscription bind topic not match, %s", g.key.name)
		}
	}
	return t, g, nil
}

// pop takes up to r.batch messages for r. Call it with b.mu held.
func (b *broker) pop(r *popRequest, t *topic, g *group) []delivered {
	if r.lite {
		return b.popLite(r, t, g)
	}
	gt := b.consumer(g, t)
	if g.fifo {
		return b.popFIFO(r, gt)
	}
	return b.popNormal(r, gt)
}

// popNormal pops the group's retry queue first, then the topic's queues
// round-robin; every message gets a checkpoint that expires it.
func (b *broker) popNormal(r *popRequest, gt *groupTopic) []delivered {
	now := b.nowMS()
	var out []delivered
	t := gt.t
	touched := false
	for len(out) < r.batch {
		var m *message
		var k dkey
		if len(gt.retry) > 0 {
			m = gt.retry[0]
			gt.retry[0] = nil
			gt.retry = gt.retry[1:]
			if len(gt.retry) == 0 {
				gt.retry = nil
			}
			k = dkey{retry: true, queue: m.queueID, offset: m.offset}
		} else {
			for i := 0; i < len(t.queues) && m == nil; i++ {
				qi := (t.rr + i) % len(t.queues)
				q := t.queues[qi]
				if gt.next[qi] < q.base {
					gt.next[qi] = q.base
				}
				if gt.next[qi] < q.end() {
					m = q.at(gt.next[qi])
					gt.next[qi]++
					k = dkey{queue: q.id, offset: m.offset}
					touched = true
				}
			}
			if m == nil {
				break
			}
		}
		switch {
		case !r.filter.match(m):
			continue // filtered: consumed without delivery
		case m.reconsume >= gt.g.maxAttempts():
			b.deadLetter(gt.g, m)
			gt.dlq++
			continue
		}
		d := &delivery{key: k, msg: m, reconsume: m.reconsume}
		ck := b.checkpoint(gt, d, now, r.invisible)
		gt.inflight[k] = d
		kind := byte(kindQueue)
		if k.retry {
			kind = kindRetry
		}
		out = append(out, delivered{m: m, attempt: m.reconsume + 1,
			handle: handle{kind: kind, popTime: now, invisible: r.invisible, queue: k.queue, offset: k.offset, seq: ck.seq}})
	}
	if touched {
		t.rr++
		for i := range t.queues {
			b.trimQueue(t, i)
		}
	}
	return out
}

// checkpoint puts d in flight from now (ms) for invisible ms.
func (b *broker) checkpoint(gt *groupTopic, d *delivery, now, invisible int64) *checkpoint {
	b.ckSeq++
	ck := &checkpoint{seq: b.ckSeq, popTime: now, until: now + invisible}
	ck.timer = b.after(ck.until, func() { b.revive(gt, d, ck) })
	d.cks = append(d.cks, ck)
	return ck
}

// revive ends checkpoint ck of d: like the broker's revive service, it puts
// a copy of the message into the group's retry queue with one more attempt.
func (b *broker) revive(gt *groupTopic, d *delivery, ck *checkpoint) {
	ck.timer = nil
	if !d.dropCheckpoint(ck.seq) {
		return
	}
	if len(d.cks) == 0 {
		delete(gt.inflight, d.key)
	}
	b.retryCopy(gt, d)
}

// retryCopy queues a copy of d's message for redelivery with one more
// attempt.
func (b *broker) retryCopy(gt *groupTopic, d *delivery) {
	cp := *d.msg
	cp.reconsume = d.reconsume + 1
	gt.retrySeq++
	cp.queueID, cp.offset, cp.hoffset = 0, gt.retrySeq, gt.retrySeq
	gt.retry = append(gt.retry, &cp)
	b.wake(gt.t)
}

// dropCheckpoint removes checkpoint seq from d and reports whether it was
// there.
func (d *delivery) dropCheckpoint(seq uint64) bool {
	for i, ck := range d.cks {
		if ck.seq == seq {
			d.cks = append(d.cks[:i], d.cks[i+1:]...)
			return true
		}
	}
	return false
}

// popFIFO pops the queues of a FIFO group in order, one batch per queue.
func (b *broker) popFIFO(r *popRequest, gt *groupTopic) []delivered {
	now := b.nowMS()
	var out []delivered
	t := gt.t
	for i := 0; i < len(t.queues) && len(out) < r.batch; i++ {
		qi := (t.rr + i) % len(t.queues)
		o := gt.ord[qi]
		msgs, attempts := o.pop(t.queues[qi], r.batch-len(out), now, r.invisible, r.attemptID, false)
		for j, m := range msgs {
			switch {
			case !r.filter.match(m):
				o.ack(m.hoffset, now, t.queues[qi].end())
				continue
			case attempts[j] >= gt.g.maxAttempts():
				b.deadLetter(gt.g, m)
				gt.dlq++
				o.ack(m.hoffset, now, t.queues[qi].end())
				continue
			}
			out = append(out, delivered{m: m, attempt: attempts[j] + 1,
				handle: handle{kind: kindFIFO, popTime: now, invisible: r.invisible, queue: int32(qi), offset: m.hoffset, seq: m.seq}})
		}
		if len(msgs) > 0 {
			b.armFIFO(gt, qi)
		}
	}
	t.rr++
	return out
}

// armFIFO wakes the topic's long polls when queue qi of a FIFO group stops
// being blocked, and frees what the group committed.
func (b *broker) armFIFO(gt *groupTopic, qi int) {
	o := gt.ord[qi]
	b.trimQueue(gt.t, qi)
	b.stop(o.timer)
	o.timer = nil
	if at := o.unblockAt(b.nowMS()); at != 0 {
		o.timer = b.after(at, func() { o.timer = nil; b.armFIFO(gt, qi) })
		return
	}
	b.wake(gt.t)
}

// popLite pops the lite topics a lite consumer may read: every lite topic of
// the main topic for a wildcard group (once the client synced its
// subscription), its own exact lite topics otherwise.
func (b *broker) popLite(r *popRequest, t *topic, g *group) []delivered {
	sub := b.liteSubs[r.clientID]
	if sub == nil || sub.group != g || sub.main != t {
		return nil // not subscribed: the dispatcher has nothing for this client
	}
	var out []delivered
	if g.wildcard {
		if !sub.wildcard {
			return nil // bound only by COMPLETE_ADD
		}
		return b.popEvents(r, t, sub)
	}
	n := len(sub.names)
	for i := 0; i < n && len(out) < r.batch; i++ {
		name := sub.names[(sub.rr+i)%n]
		lq := t.lite[name]
		if lq == nil {
			continue
		}
		out = b.popCursor(r, b.cursor(lq, g), out)
	}
	sub.rr++
	return out
}

// popCursor pops one lite topic for group c.g, appending to out.
func (b *broker) popCursor(r *popRequest, c *liteCursor, out []delivered) []delivered {
	now := b.nowMS()
	inv := r.invisible
	if r.autoRenew {
		// The 5.5.0 proxy renews an auto_renew receive's messages without
		// their lite topic, which the broker does not apply to the lite
		// topic (renew.go): a lite message keeps the pop's 60 s
		// (conformance scenario z), not rmqfake's 3 h.
		inv = renewPopInvisible
	}
	msgs, attempts := c.ord.pop(&c.lq.q, r.batch-len(out), now, inv, r.attemptID, true)
	for i, m := range msgs {
		switch {
		case !r.filter.match(m):
			c.ord.ack(m.hoffset, now, c.lq.q.end())
			continue
		case attempts[i] >= c.g.maxAttempts():
			// The proxy forwards it to the DLQ and acks it by its handle.
			b.deadLetter(c.g, m)
			c.dlq++
			c.g.liteDLQ++
			c.ord.ack(m.hoffset, now, c.lq.q.end())
			continue
		}
		out = append(out, delivered{m: m, attempt: attempts[i] + 1,
			handle: handle{kind: kindLite, popTime: now, invisible: inv, offset: m.hoffset, seq: m.seq}})
	}
	if len(msgs) > 0 {
		b.settleLite(c)
	}
	return out
}

// settleLite re-arms c after its batch changed: frees what every group has
// committed and schedules (or signals) the moment the lite topic unblocks.
func (b *broker) settleLite(c *liteCursor) {
	b.stop(c.ord.timer)
	c.ord.timer = nil
	if at := c.ord.unblockAt(b.nowMS()); at != 0 {
		c.ord.timer = b.after(at, func() { c.ord.timer = nil; b.settleLite(c) })
		return
	}
	b.liteReady(c)
	b.wake(c.lq.main)
	b.trimLite(c.lq)
}

// deadLetter stores a copy of m in the group's dead-letter topic (creating
// it). A lite message keeps its lite dispatch property, so the broker also
// dispatches the copy into its lite topic again, under the DLQ topic's name
// and with the original's handle offset (scenario g).
func (b *broker) deadLetter(g *group, m *message) {
	k := dlqKey(g.key)
	t := b.topics[k]
	if t == nil {
		t = b.newTopic(k, TopicNormal, 1)
	}
	b.seq++
	cp := *m
	now := b.clock.Now()
	// One more reconsume than the message it copies, as the broker's send-back.
	cp.seq, cp.store, cp.hoffset, cp.reconsume = b.seq, t, -1, m.reconsume+1
	cp.storedSec, cp.storedNanos = now.Unix(), int32(now.Nanosecond())
	b.append(t, []*message{&cp})
	t.sent++
	if m.lite == "" {
		return
	}
	main := m.main
	if main == nil || main.lite == nil || b.topics[main.key] != main {
		return
	}
	b.seq++
	lc := cp
	lc.seq, lc.hoffset = b.seq, m.hoffset
	lq := b.liteQueue(main, m.lite, true)
	lq.q.push(&lc)
	main.liteSeq++
	for c := range lq.all() {
		b.liteReady(c)
	}
	b.wake(main)
}

// javaTrim is Java's String.trim: it strips the characters up to U+0020 from
// both ends (FilterAPI trims each tag so), not Unicode spaces.
func javaTrim(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
}
