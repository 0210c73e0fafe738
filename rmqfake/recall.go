package rmqfake

import (
	"encoding/base64"
	"strconv"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// This file emulates RecallMessage (notes/research/sql92-transactions-
// recall-offsets.md §3): a delayed message sent alone whose delivery time
// is still ahead gets a recall handle, base64url (with padding) of
// "v1 <topic> <broker> <ts> <message id>", where ts is the delivery time
// floored to the broker's 1 s timer precision (an exact second is lowered by
// one) plus 1 ms. RecallMessage with that handle before ts takes the message
// off the timer: it is never delivered. As on the broker, a recall answers OK
// with the message id whether or not the message is still there (recalling
// twice, or a well-formed handle of nothing); the broker must run with
// recallMessageEnable=true (5.5.0's default is false: every recall then
// fails "operation is forbidden"), which rmqfake always is.

const recallMaxDelay = 259_200_000 // ms: timerMaxDelaySec, 3 days

// recallHandle is the handle of a delayed message stored in t.
func recallHandle(t *topic, m *message) string {
	at := m.deliverAt().UnixMilli()
	ts := at / 1000 * 1000
	if ts == at {
		ts -= 1000
	}
	ts++
	return base64.URLEncoding.EncodeToString([]byte("v1 " + t.key.name + " " + brokerName + " " + strconv.FormatInt(ts, 10) + " " + m.id))
}

var errRecallInvalid = fail(v2.Code_INTERNAL_SERVER_ERROR, "org.apache.rocketmq.proxy.common.ProxyException: recall handle is invalid")

// recall answers RecallMessage (RecallMessageActivity, RecallMessageProcessor).
func (b *broker) recall(req *v2.RecallMessageRequest, ns string) (string, *failure) {
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return "", f
	}
	k := key(req.GetTopic(), ns)
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[k]
	if t == nil || t.typ != TopicDelay {
		expected := "UNSPECIFIED"
		if t != nil {
			expected = strings.ToUpper(t.typ.String())
		}
		return "", fail(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"org.apache.rocketmq.proxy.common.ProxyException: TopicMessageType validate failed, the expected type is %s, but actual type is DELAY", expected)
	}
	raw, err := base64.URLEncoding.DecodeString(req.GetRecallHandle())
	if err != nil {
		return "", errRecallInvalid
	}
	f := strings.Split(string(raw), " ")
	if len(f) < 5 || f[0] != "v1" {
		return "", errRecallInvalid
	}
	topic, broker, id := f[1], f[2], f[4]
	ts, err := strconv.ParseInt(f[3], 10, 64)
	switch {
	case err != nil:
		return "", errRecallInvalid
	case broker != brokerName:
		return "", fail(v2.Code_INTERNAL_SERVER_ERROR, "recall failed, broker service not available")
	case topic != k.name:
		return "", fail(v2.Code_INTERNAL_SERVER_ERROR, "recall failed, topic not match")
	case ts-b.nowMS() <= 0 || ts-b.nowMS() >= recallMaxDelay:
		return "", fail(v2.Code_INTERNAL_SERVER_ERROR, "recall failed, timestamp invalid")
	}
	for tm, m := range t.scheduled {
		if m.id == id {
			b.stop(tm)
			delete(t.scheduled, tm)
			t.bytes -= m.cost()
			break
		}
	}
	return id, nil
}
