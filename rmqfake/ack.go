package rmqfake

import (
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

var errAbnormal = fail(v2.Code_INTERNAL_SERVER_ERROR, "ack failed: status is abnormal")

// ack answers one AckMessage. Entries are acked one by one; the response
// status is OK when all are OK, the common code when all share one, and
// MULTIPLE_RESULTS otherwise (AckMessageActivity).
func (b *broker) ack(req *v2.AckMessageRequest, ns string) *v2.AckMessageResponse {
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return &v2.AckMessageResponse{Status: f.status()}
	}
	if f := checkGroup(req.GetGroup().GetName()); f != nil {
		return &v2.AckMessageResponse{Status: f.status()}
	}
	if len(req.GetEntries()) == 0 {
		return &v2.AckMessageResponse{Status: fail(v2.Code_INTERNAL_SERVER_ERROR, "ack message result is empty").status()}
	}
	gk, tk := key(req.GetGroup(), ns), key(req.GetTopic(), ns)
	resp := &v2.AckMessageResponse{}
	codes := map[v2.Code]bool{}
	b.locked(func() {
		for _, e := range req.GetEntries() {
			st := okStatus()
			if f := b.ackOne(gk, tk, e); f != nil {
				st = f.status()
			}
			codes[st.Code] = true
			resp.Entries = append(resp.Entries, &v2.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: st})
		}
	})
	if len(codes) == 1 {
		for c := range codes {
			resp.Status = &v2.Status{Code: c, Message: c.String()}
		}
	} else {
		resp.Status = &v2.Status{Code: v2.Code_MULTIPLE_RESULTS, Message: v2.Code_MULTIPLE_RESULTS.String()}
	}
	return resp
}

// ackOne acks one entry. Call it with b.mu held.
func (b *broker) ackOne(gk, tk resKey, e *v2.AckMessageEntry) (f *failure) {
	if rn := b.stopRenewal(e.GetReceiptHandle(), gk); rn != nil {
		defer func() {
			// A lite message acked without its lite topic is not acked
			// (the broker's AckMessageProcessor takes its lite path only
			// with one), and the proxy has stopped renewing it.
			if f != nil || (rn.lite != "" && e.GetLiteTopic() == "") {
				b.unsettled(rn)
			}
		}()
	}
	h, f := parseHandle(e.GetReceiptHandle())
	if f != nil {
		return f
	}
	if h.expired(b.nowMS()) {
		return errExpired
	}
	if e.LiteTopic != nil && e.GetLiteTopic() != "" {
		return b.ackLite(gk, tk, e.GetLiteTopic(), h)
	}
	t, g := b.topics[tk], b.groups[gk]
	if t == nil {
		return fail(v2.Code_TOPIC_NOT_FOUND, "topic[%s] not exist, apply first please!", tk.name)
	}
	if g == nil {
		// The broker records an ack for a group it has no subscription of and
		// answers OK; the message stays in flight for its own group (scenario p).
		return nil
	}
	gt := g.consumerOf(t)
	if gt == nil {
		return nil // the broker records the ack; there is nothing to apply it to
	}
	switch h.kind {
	case kindQueue, kindRetry:
		d := gt.inflight[dkey{retry: h.kind == kindRetry, queue: h.queue, offset: h.offset}]
		if d == nil {
			return nil // acked before, or its checkpoint was replaced: OK, as on the broker
		}
		for _, ck := range d.cks {
			if ck.seq == h.seq {
				b.stop(ck.timer)
				d.dropCheckpoint(h.seq)
				if len(d.cks) == 0 {
					delete(gt.inflight, d.key)
					gt.acked++
				}
				break
			}
		}
		return nil
	case kindFIFO:
		if gt.ord == nil {
			return nil
		}
		if h.queue < 0 || int(h.queue) >= len(gt.ord) {
			return errAbnormal // the broker's "queueId is illegal"
		}
		switch gt.ord[h.queue].ack(h.offset, h.popTime, t.queues[h.queue].end()) {
		case ackIllegal:
			return errAbnormal
		case ackCommitted:
			gt.acked++
			b.armFIFO(gt, int(h.queue))
		}
	}
	return nil
}

// consumerOf returns g's state for t, or nil (g may be nil).
func (g *group) consumerOf(t *topic) *groupTopic {
	if g == nil {
		return nil
	}
	return g.topics[t]
}

// ackLite acks a lite message: it commits the lite topic's offset up to the
// first unacked message of the batch (AckMessageProcessor.ackLite). The
// request's topic must be the group's bind topic; a handle at or below the
// committed offset answers OK and changes nothing.
func (b *broker) ackLite(gk, tk resKey, lite string, h handle) *failure {
	g := b.groups[gk]
	if g == nil || g.bind != tk.name {
		return errAbnormal
	}
	c := b.liteCursorOf(tk, lite, g)
	if c == nil {
		return nil
	}
	switch c.ord.ack(h.offset, h.popTime, c.lq.q.end()) {
	case ackIllegal:
		return errAbnormal
	case ackCommitted:
		c.acked++
		g.liteAcked++
		b.settleLite(c)
	}
	return nil
}

func (b *broker) liteCursorOf(tk resKey, lite string, g *group) *liteCursor {
	t := b.topics[tk]
	if t == nil || t.lite == nil {
		return nil
	}
	lq := t.lite[lite]
	if lq == nil {
		return nil
	}
	return lq.cursorOf(g)
}

// changeInvisible applies ChangeInvisibleDuration and returns the new handle.
// Validation and session checks are done by the caller.
func (b *broker) changeInvisible(gk, tk resKey, lite string, h handle, invisible int64, suspend bool) (string, *failure) {
	now := b.nowMS()
	if h.expired(now) {
		return "", errExpired
	}
	until := now + invisible
	if lite != "" {
		// The lite path keeps the pop time: the new handle differs only in its
		// invisible time, which is why the old handle still acks (scenario d)
		// until its own invisible time ends (scenario n: ackOne checks it).
		if g := b.groups[gk]; g != nil {
			if c := b.liteCursorOf(tk, lite, g); c != nil {
				c.ord.change(h.offset, h.popTime, until, suspend)
				b.settleLite(c)
			}
		}
		nh := h
		nh.invisible = until - h.popTime
		return nh.String(), nil
	}
	t, g := b.topics[tk], b.groups[gk]
	if t == nil {
		return "", fail(v2.Code_TOPIC_NOT_FOUND, "topic[%s] not exist, apply first please!", tk.name)
	}
	gt := g.consumerOf(t)
	switch h.kind {
	case kindFIFO:
		if gt != nil && gt.ord != nil {
			if h.queue < 0 || int(h.queue) >= len(gt.ord) {
				return "", errAbnormal // the broker's "queueId is illegal"
			}
			gt.ord[h.queue].change(h.offset, h.popTime, until, suspend)
			b.armFIFO(gt, int(h.queue))
		}
		nh := h
		nh.invisible = until - h.popTime
		return nh.String(), nil
	case kindQueue, kindRetry:
		nh := h
		nh.popTime, nh.invisible = now, invisible
		var d *delivery
		if gt != nil {
			d = gt.inflight[dkey{retry: h.kind == kindRetry, queue: h.queue, offset: h.offset}]
		}
		if d == nil {
			// Acked already: rmqfake keeps no copy to bring back (the broker
			// would re-read it from its log and deliver it again).
			b.ckSeq++
			nh.seq = b.ckSeq
			return nh.String(), nil
		}
		for _, old := range d.cks {
			if old.seq == h.seq {
				b.stop(old.timer)
				break
			}
		}
		if invisible <= 0 {
			// Released at once: it goes back like an expired checkpoint.
			b.ckSeq++
			nh.seq = b.ckSeq
			if d.dropCheckpoint(h.seq) && len(d.cks) == 0 {
				delete(gt.inflight, d.key)
			}
			b.retryCopy(gt, d)
			return nh.String(), nil
		}
		// A new checkpoint, then the old one is acked: changing a stale handle
		// therefore adds a second checkpoint, as on the broker.
		ck := b.checkpoint(gt, d, now, invisible)
		d.dropCheckpoint(h.seq)
		nh.seq = ck.seq
		return nh.String(), nil
	}
	// A lite handle changed without naming its lite topic: the broker treats
	// it as a normal message it cannot find.
	nh := h
	nh.invisible = until - h.popTime
	return nh.String(), nil
}

// forward moves a received message to the group's DLQ and acks it
// (ForwardMessageToDeadLetterQueue, and what the proxy does past the group's
// max attempts).
func (b *broker) forward(gk, tk resKey, lite string, h handle) *failure {
	g, t := b.groups[gk], b.topics[tk]
	if g == nil {
		return fail(v2.Code_CONSUMER_GROUP_NOT_FOUND, "subscription group [%s] not exist", gk.name)
	}
	if lite != "" {
		c := b.liteCursorOf(tk, lite, g)
		var m *message
		// The handle's offset names the message, as for the ack that follows
		// (its sequence number is not checked: the proxy does not read one).
		if c != nil && c.ord.batch != nil && c.ord.batch.contains(h.offset) && c.ord.batch.popTime == h.popTime &&
			h.offset >= c.ord.committed && !c.ord.batch.isAcked(int(h.offset-c.ord.batch.start)) {
			m = c.ord.batch.msgs[h.offset-c.ord.batch.start]
		}
		if m == nil {
			return fail(v2.Code_MESSAGE_NOT_FOUND, "rmqfake: the message of this handle is not in flight")
		}
		b.deadLetter(g, m)
		c.dlq++
		g.liteDLQ++
		if !h.expired(b.nowMS()) {
			_ = b.ackLite(gk, tk, lite, h)
		}
		return nil
	}
	gt := g.consumerOf(t)
	if gt != nil && h.kind == kindFIFO {
		return b.forwardFIFO(g, gt, h)
	}
	if gt == nil || (h.kind != kindQueue && h.kind != kindRetry) {
		return fail(v2.Code_MESSAGE_NOT_FOUND, "rmqfake: the message of this handle is not in flight")
	}
	d := gt.inflight[dkey{retry: h.kind == kindRetry, queue: h.queue, offset: h.offset}]
	if d == nil {
		return fail(v2.Code_MESSAGE_NOT_FOUND, "rmqfake: the message of this handle is not in flight")
	}
	b.deadLetter(g, d.msg)
	gt.dlq++
	if !h.expired(b.nowMS()) {
		for _, ck := range d.cks {
			if ck.seq == h.seq {
				b.stop(ck.timer)
				d.dropCheckpoint(h.seq)
				break
			}
		}
		if len(d.cks) == 0 {
			delete(gt.inflight, d.key)
		}
	}
	return nil
}

// forwardFIFO dead-letters a message of a FIFO group's queue (what the
// official FIFO push consumers ask once their own retries are used up) and
// acks it, so that the queue moves on. Call it with b.mu held.
func (b *broker) forwardFIFO(g *group, gt *groupTopic, h handle) *failure {
	if gt.ord == nil || h.queue < 0 || int(h.queue) >= len(gt.ord) {
		return errAbnormal
	}
	o := gt.ord[h.queue]
	if o.batch == nil || !o.batch.contains(h.offset) || o.batch.popTime != h.popTime ||
		h.offset < o.committed || o.batch.isAcked(int(h.offset-o.batch.start)) {
		// Acked or forwarded already: no second dead-letter copy.
		return fail(v2.Code_MESSAGE_NOT_FOUND, "rmqfake: the message of this handle is not in flight")
	}
	b.deadLetter(g, o.batch.msgs[h.offset-o.batch.start])
	gt.dlq++
	if o.ack(h.offset, h.popTime, gt.t.queues[h.queue].end()) == ackCommitted {
		gt.acked++
		b.armFIFO(gt, int(h.queue))
	}
	return nil
}
