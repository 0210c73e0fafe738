package rmqfake

import (
	"crypto/md5"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// send stores the messages of one SendMessage request, as the 5.5.0 proxy
// validates and the broker stores them: one request is one batch in one queue,
// answered with a single entry; a batch of lite messages is stored in the main
// topic but never dispatched to its lite topics (scenario k).
func (b *broker) send(req *v2.SendMessageRequest, ns, peer string) *v2.SendMessageResponse {
	msgs, k, f := b.buildMessages(req, ns, peer)
	if f != nil {
		return &v2.SendMessageResponse{Status: f.status()}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, f := b.sendTarget(k, msgs[0])
	if f == nil {
		f = b.admit(t, msgs)
	}
	if f != nil {
		return &v2.SendMessageResponse{Status: f.status()}
	}
	now := b.clock.Now()
	for _, m := range msgs {
		b.seq++
		m.seq = b.seq
		m.storedSec, m.storedNanos = now.Unix(), int32(now.Nanosecond())
		m.store = t
		m.hoffset = -1
		m.bornHost = b.intern(m.bornHost)
		if m.lite != "" {
			m.main = t
		}
	}
	t.sent += int64(len(msgs))
	first := msgs[0]
	switch {
	case first.mtype == v2.MessageType_TRANSACTION:
		for _, m := range msgs {
			b.holdHalf(t, m)
		}
	case len(msgs) == 1 && first.lite != "" && t.typ == TopicLite:
		// (A lite topic named on a FIFO or delay message is carried, not
		// dispatched: the message is typed FIFO or DELAY first.)
		lq := b.liteQueue(t, first.lite, true)
		first.lite = lq.name // one string per lite topic
		first.lmq = true     // rendered with INNER_MULTI_DISPATCH (dispatchProps)
		lq.q.push(first)
		t.liteSeq++
		for c := range lq.all() {
			b.liteReady(c)
		}
		b.wake(t)
	case !first.deliverAt().IsZero() && first.deliverAt().After(now):
		for _, m := range msgs {
			b.schedule(t, m)
		}
	default:
		b.append(t, msgs)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.id
	}
	entry := &v2.SendResultEntry{Status: okStatus(), MessageId: strings.Join(ids, ","), Offset: first.offset}
	if len(msgs) > 1 || first.mtype == v2.MessageType_TRANSACTION {
		entry.TransactionId = first.id
	}
	if len(msgs) == 1 && first.lite == "" && first.mtype != v2.MessageType_TRANSACTION && first.deliverAt().After(now) {
		entry.RecallHandle = recallHandle(t, first)
	}
	return &v2.SendMessageResponse{Status: okStatus(), Entries: []*v2.SendResultEntry{entry}}
}

// append stores msgs in one queue of t: the queue of their message group, or
// the next one round-robin.
func (b *broker) append(t *topic, msgs []*message) {
	var qi int
	if g := msgs[0].msgGroup(); g != "" {
		h := fnv.New32a()
		h.Write([]byte(g))
		qi = int(h.Sum32() % uint32(len(t.queues)))
	} else {
		qi = t.rr % len(t.queues)
		t.rr++
	}
	q := t.queues[qi]
	for _, m := range msgs {
		q.push(m)
	}
	b.wake(t)
}

// schedule holds a delayed message until its delivery time.
func (b *broker) schedule(t *topic, m *message) {
	if t.scheduled == nil {
		t.scheduled = map[*btimer]*message{}
	}
	var tm *btimer
	tm = b.after(m.deliverAt().UnixMilli(), func() {
		delete(t.scheduled, tm)
		t.bytes -= m.cost() // counted again once queued
		b.append(t, []*message{m})
	})
	t.scheduled[tm] = m
	t.bytes += m.cost()
}

// sendTarget checks the topic and the message type as the proxy does
// (ProducerProcessor with enableTopicMessageTypeCheck).
func (b *broker) sendTarget(k resKey, m *message) (*topic, *failure) {
	t := b.topics[k]
	if t == nil && !strings.HasPrefix(k.name, dlqPrefix) && !strings.HasPrefix(k.name, retryPrefix) {
		t = b.autoTopic(k, typeOf(m))
	}
	if strings.HasPrefix(k.name, dlqPrefix) || strings.HasPrefix(k.name, retryPrefix) {
		if t == nil {
			return nil, fail(v2.Code_TOPIC_NOT_FOUND, "No topic route info in name server for the topic: %s", k.name)
		}
		return t, nil
	}
	expected := "UNSPECIFIED"
	if t != nil {
		expected = strings.ToUpper(t.typ.String())
	}
	actual := strings.ToUpper(typeOf(m).String())
	if t == nil || t.typ != typeOf(m) {
		full := ""
		if t == nil {
			full = b.autoTopicsFull()
		}
		return nil, fail(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"TopicMessageType validate failed, the expected type is %s, but actual type is %s%s", expected, actual, full)
	}
	return t, nil
}

// typeOf classifies a message the way TopicMessageType.parseFromMessageProperty
// does: delay before FIFO before lite.
func typeOf(m *message) TopicType {
	switch {
	case m.mtype == v2.MessageType_TRANSACTION:
		return TopicTransaction
	case !m.deliverAt().IsZero():
		return TopicDelay
	case m.msgGroup() != "":
		return TopicFIFO
	case m.lite != "":
		return TopicLite
	}
	return TopicNormal
}

// buildMessages validates a request the way SendMessageActivity does and
// converts its messages, all for topic k.
func (b *broker) buildMessages(req *v2.SendMessageRequest, ns, peer string) (msgs []*message, k resKey, _ *failure) {
	if len(req.GetMessages()) == 0 {
		return nil, k, fail(v2.Code_MESSAGE_CORRUPTED, "no message to send")
	}
	first := req.GetMessages()[0].GetTopic()
	if f := checkTopic(first.GetName()); f != nil {
		return nil, k, f
	}
	k = key(first, ns)
	out := make([]*message, 0, len(req.GetMessages()))
	for _, pm := range req.GetMessages() {
		if pm.GetTopic().GetName() != first.GetName() || pm.GetTopic().GetResourceNamespace() != first.GetResourceNamespace() {
			return nil, k, fail(v2.Code_MESSAGE_CORRUPTED, "topic in message is not same")
		}
		m, f := b.buildMessage(pm, peer)
		if f != nil {
			return nil, k, f
		}
		out = append(out, m)
	}
	return out, k, nil
}

func (b *broker) buildMessage(pm *v2.Message, peer string) (*message, *failure) {
	sp := pm.GetSystemProperties()
	body := pm.GetBody()
	switch {
	case len(body) == 0:
		return nil, fail(v2.Code_MESSAGE_BODY_EMPTY, "message body cannot be empty")
	case len(body) > maxBodySize:
		return nil, fail(v2.Code_MESSAGE_BODY_TOO_LARGE, "message body cannot exceed the max %d", maxBodySize)
	}
	if len(pm.GetUserProperties()) > maxUserProps {
		return nil, fail(v2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "too many user properties, max is %d", maxUserProps)
	}
	size := 0
	for k, v := range pm.GetUserProperties() {
		switch {
		case reservedProps[k]:
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property is used by system: %s", k)
		case hasControl(k):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character")
		case hasControl(v):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character")
		}
		size += len(k) + len(v)
	}
	tag := sp.GetTag()
	if tag != "" {
		switch {
		case blank(tag):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
		case strings.Contains(tag, "|"):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
		case hasControl(tag):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")
		}
	}
	size += len(tag)
	for _, k := range sp.GetKeys() {
		if k != "" && (blank(k) || hasControl(k)) {
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace or contain control character")
		}
		size += len(k)
	}
	if size > maxUserPropSize {
		return nil, fail(v2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "the total size of user property is too large, max is %d", maxUserPropSize)
	}
	if blank(sp.GetMessageId()) {
		return nil, fail(v2.Code_ILLEGAL_MESSAGE_ID, "message id cannot be empty")
	}
	m := &message{
		id:       sp.GetMessageId(),
		props:    pm.GetUserProperties(),
		body:     body,
		mtype:    sp.GetMessageType(),
		bornHost: sp.GetBornHost(),
	}
	if tag != "" {
		m.extra().tag = tag
	}
	if keys := sp.GetKeys(); len(keys) > 0 {
		m.extra().keys = keys
	}
	if tc := sp.GetTraceContext(); tc != "" {
		m.extra().trace = tc
	}
	if m.bornHost == "" {
		m.bornHost = peer
	}
	// A born timestamp the client did not send (or the zero time) is
	// rendered as the empty Timestamp.
	if ts := sp.GetBornTimestamp(); ts.IsValid() && !ts.AsTime().IsZero() {
		m.bornSec, m.bornNanos = ts.GetSeconds(), ts.GetNanos()
	}
	if ts := sp.GetDeliveryTimestamp(); sp.DeliveryTimestamp != nil {
		if !ts.IsValid() {
			// The proxy validates the timestamp (protobuf's range, years 1 to
			// 9999) before converting it (scenario p).
			return nil, fail(v2.Code_INTERNAL_SERVER_ERROR, "Timestamp is not valid. See proto definition for valid values. Seconds (%d) must be in range [-62,135,596,800, +253,402,300,799]. Nanos (%d) must be in range [0, +999,999,999].. IllegalArgumentException", ts.GetSeconds(), ts.GetNanos())
		}
		ms, now := ts.GetSeconds()*1000+int64(ts.GetNanos())/1e6, b.clock.Now().UnixMilli()
		if ms-now > maxDelay {
			return nil, fail(v2.Code_ILLEGAL_DELIVERY_TIME, "the max delay time of message is too large, max is %d", maxDelay)
		}
		m.extra().deliverAt = time.UnixMilli(ms) // a time in the past is due at once
	}
	if g := sp.GetMessageGroup(); g != "" {
		switch {
		case blank(g):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace")
		case len(g) >= maxMessageGroupLen:
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_GROUP, "message group exceed the max size %d", maxMessageGroupLen)
		case hasControl(g):
			return nil, fail(v2.Code_ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")
		}
		m.extra().msgGroup = g
	}
	if lt := sp.GetLiteTopic(); lt != "" {
		if f := checkLiteTopic(lt); f != nil {
			return nil, f
		}
		m.lite = lt
	}
	m.sum = md5.Sum(body)
	return m, nil
}

// withProp returns props plus k=v, copying so that the sender's map is not
// shared.
func withProp(props map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(props)+1)
	for pk, pv := range props {
		out[pk] = pv
	}
	out[k] = v
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
