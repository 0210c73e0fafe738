package rmqfake

// This file models how RocketMQ 5.5.0 pops an ordered queue (a lite topic,
// or a queue of a FIFO group): one batch in flight per queue, a consume offset
// committed only up to the first unacked message of the batch, and delivery
// attempts derived from how often each offset was popped before
// (QueueLevelConsumerManager.OrderInfo). The attempt rules reproduce what
// docs/broker-semantics.md pins in scenarios c, e, f and g.

// ordered is a group's position in one ordered queue.
type ordered struct {
	committed int64
	batch     *batch
	timer     *btimer // fires when the batch stops blocking the queue
}

// batch is the last pop of an ordered queue.
type batch struct {
	attemptID   string
	popTime     int64 // ms
	invisible   int64 // ms, from popTime
	start       int64 // offset of msgs[0]; the batch covers consecutive offsets
	msgs        []*message
	acked       uint64          // bit i: offset start+i acked
	nextVisible map[int64]int64 // per-offset override set by ChangeInvisibleDuration
	counts      map[int64]int   // how often each offset was popped before this pop
}

func (b *batch) contains(off int64) bool { return off >= b.start && off < b.start+int64(len(b.msgs)) }

func (b *batch) isAcked(i int) bool { return b.acked&(1<<uint(i)) != 0 }

func (b *batch) visibleAt(i int) int64 {
	if t, ok := b.nextVisible[b.start+int64(i)]; ok {
		return t
	}
	return b.popTime + b.invisible
}

// blocked reports whether the queue may not be popped at now (ms): some
// message of the last batch is unacked and still invisible. A retried poll
// with the same attempt id is never blocked by its own batch.
func (o *ordered) blocked(now int64, attemptID string) bool {
	b := o.batch
	if b == nil {
		return false
	}
	if attemptID != "" && attemptID == b.attemptID {
		return false
	}
	for i := range b.msgs {
		if !b.isAcked(i) && now < b.visibleAt(i) {
			return true
		}
	}
	return false
}

// unblockAt returns when the queue stops being blocked (ms), or 0 if it is
// not blocked at now.
func (o *ordered) unblockAt(now int64) int64 {
	b := o.batch
	if b == nil {
		return 0
	}
	var at int64
	for i := range b.msgs {
		if v := b.visibleAt(i); !b.isAcked(i) && now < v && v > at {
			at = v
		}
	}
	return at
}

// pop takes up to n messages of q from the committed offset as a new batch.
// It returns the messages and, per message, the attempts already made. With
// liteRule, the counts apply only when every offset of the batch was popped
// before (otherwise all count as first deliveries), as the lite path of 5.5.0
// does; without it each offset keeps its own count (FIFO queues).
func (o *ordered) pop(q *queue, n int, now, invisible int64, attemptID string, liteRule bool) ([]*message, []int32) {
	if o.committed < q.base {
		o.committed = q.base
	}
	avail := q.end() - o.committed
	if n <= 0 || avail <= 0 || o.blocked(now, attemptID) {
		return nil, nil
	}
	k := min(int64(n), avail, 64)
	nb := &batch{attemptID: attemptID, popTime: now, invisible: invisible, start: o.committed, msgs: make([]*message, k)}
	for i := range nb.msgs {
		nb.msgs[i] = q.at(o.committed + int64(i))
	}
	if prev := o.batch; prev != nil {
		if attemptID != "" && attemptID == prev.attemptID {
			nb.counts = prev.counts
		} else {
			for off := nb.start; off < nb.start+k; off++ {
				if prev.contains(off) {
					if nb.counts == nil {
						nb.counts = map[int64]int{} // only when offsets repeat
					}
					nb.counts[off] = prev.counts[off] + 1
				}
			}
		}
	}
	o.batch = nb
	attempts := make([]int32, k)
	all := len(nb.counts) == int(k)
	for i := range attempts {
		c, ok := nb.counts[nb.start+int64(i)]
		if ok && (all || !liteRule) {
			attempts[i] = int32(c)
		}
	}
	return nb.msgs, attempts
}

// ackResult is the outcome of acking one offset of an ordered queue.
type ackResult int

const (
	ackNoop      ackResult = iota // answered OK, nothing changes
	ackCommitted                  // answered OK, the offset is acked
	ackIllegal                    // the offset is not part of the batch
)

// ack acks offset off of the batch popped at popTime (ms); end is the
// queue's next offset. An offset the queue never had is illegal, as the
// broker's "offset is illegal" check of an ack (a forged handle must not
// commit past the stored messages).
func (o *ordered) ack(off, popTime, end int64) ackResult {
	if off < 0 || off >= end {
		return ackIllegal
	}
	if off < o.committed {
		return ackNoop
	}
	b := o.batch
	if b == nil {
		// The broker commits past an offset it has no batch for.
		o.committed = off + 1
		return ackCommitted
	}
	if b.popTime != popTime {
		return ackNoop
	}
	if !b.contains(off) {
		return ackIllegal
	}
	b.acked |= 1 << uint(off-b.start)
	next := b.start + int64(len(b.msgs))
	for i := range b.msgs {
		if !b.isAcked(i) {
			next = b.start + int64(i)
			break
		}
	}
	if next > o.committed {
		o.committed = next
	}
	return ackCommitted
}

// change applies ChangeInvisibleDuration to offset off of the batch popped
// at popTime: the message becomes visible at until (ms). With suspend the
// whole batch is pushed back and its pop counts drop by one, as
// MemoryConsumerOrderInfoManager.suspendQueue does.
func (o *ordered) change(off, popTime, until int64, suspend bool) {
	b := o.batch
	if off < o.committed || b == nil || b.popTime != popTime {
		return
	}
	if suspend {
		for k, v := range b.counts {
			if v > 0 {
				b.counts[k] = v - 1
			}
		}
		b.nextVisible = nil
		b.invisible = until - b.popTime
		return
	}
	if b.nextVisible == nil {
		b.nextVisible = map[int64]int64{}
	}
	b.nextVisible[off] = until
}

// inflight counts the unacked messages of the batch still invisible at now.
func (o *ordered) inflight(now int64) int {
	b := o.batch
	if b == nil {
		return 0
	}
	n := 0
	for i := range b.msgs {
		if !b.isAcked(i) && b.start+int64(i) >= o.committed && now < b.visibleAt(i) {
			n++
		}
	}
	return n
}

// settled reports whether nothing of the batch is outstanding.
func (o *ordered) settled(end int64) bool {
	return o.committed >= end && (o.batch == nil || o.batch.start+int64(len(o.batch.msgs)) <= o.committed)
}
