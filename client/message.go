package client

import (
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// Message is a message to send. Topic and Body are required.
type Message struct {
	// Topic is the destination topic; for a lite message, the LITE main topic.
	Topic string
	// LiteTopic routes the message to a lite (sub) topic of a LITE main topic.
	LiteTopic string
	// Tag is the message tag, used by TAG filters. Optional.
	Tag string
	// Keys are message keys for lookup. Optional.
	Keys []string
	// Properties are user properties. Optional.
	Properties map[string]string
	// MessageGroup makes this a FIFO message of that group. Optional.
	MessageGroup string
	// DeliveryTime makes this a delayed message delivered at that time. Optional.
	DeliveryTime time.Time
	// Body is the payload.
	Body []byte
	// MessageID is the id to send the message under. Empty: Send makes a
	// fresh one (NewMessageID) for each call. Set it (for instance to
	// NewMessageID()) before the first attempt and keep it for every retry,
	// so that a retry after a lost response stores a copy under the same id
	// and consumers can drop it by id.
	MessageID string
}

// messageType derives the protocol message type from the fields set.
func (m *Message) messageType() v2.MessageType {
	switch {
	case m.LiteTopic != "":
		return v2.MessageType_LITE
	case m.MessageGroup != "":
		return v2.MessageType_FIFO
	case !m.DeliveryTime.IsZero():
		return v2.MessageType_DELAY
	default:
		return v2.MessageType_NORMAL
	}
}

// ReceivedMessage is a message handed out by ReceiveMessage. Its ReceiptHandle,
// with Topic, LiteTopic and MessageID, is all that AckMessage and
// ChangeInvisibleDuration need, from any client of the same group.
type ReceivedMessage struct {
	Topic        string
	LiteTopic    string
	MessageID    string
	Tag          string
	Keys         []string
	Properties   map[string]string
	MessageGroup string
	// ReceiptHandle identifies this delivery for ack and change-invisible.
	ReceiptHandle string
	// DeliveryAttempt is 1 on first delivery and grows with each redelivery.
	DeliveryAttempt int32
	// InvisibleDuration is the invisibility granted with this delivery.
	InvisibleDuration time.Duration
	BornTime          time.Time
	BornHost          string
	StoreTime         time.Time
	// DeliveryTime is the scheduled delivery time of a delayed message.
	DeliveryTime time.Time
	QueueID      int32
	QueueOffset  int64
	// DeadLetterTopic and DeadLetterMessageID are set on a message read from a
	// dead-letter queue: where it came from.
	DeadLetterTopic     string
	DeadLetterMessageID string
	Body                []byte
}

func fromProto(m *v2.Message) *ReceivedMessage {
	sp := m.GetSystemProperties()
	rm := &ReceivedMessage{
		Topic:               m.GetTopic().GetName(),
		LiteTopic:           sp.GetLiteTopic(),
		MessageID:           sp.GetMessageId(),
		Tag:                 sp.GetTag(),
		Keys:                sp.GetKeys(),
		Properties:          m.GetUserProperties(),
		MessageGroup:        sp.GetMessageGroup(),
		ReceiptHandle:       sp.GetReceiptHandle(),
		DeliveryAttempt:     sp.GetDeliveryAttempt(),
		BornHost:            sp.GetBornHost(),
		QueueID:             sp.GetQueueId(),
		QueueOffset:         sp.GetQueueOffset(),
		DeadLetterTopic:     sp.GetDeadLetterQueue().GetTopic(),
		DeadLetterMessageID: sp.GetDeadLetterQueue().GetMessageId(),
		Body:                m.GetBody(),
	}
	if d := sp.GetInvisibleDuration(); d != nil {
		rm.InvisibleDuration = d.AsDuration()
	}
	if t := sp.GetBornTimestamp(); t != nil {
		rm.BornTime = t.AsTime()
	}
	if t := sp.GetStoreTimestamp(); t != nil {
		rm.StoreTime = t.AsTime()
	}
	if t := sp.GetDeliveryTimestamp(); t != nil {
		rm.DeliveryTime = t.AsTime()
	}
	return rm
}

// FilterType selects how a FilterExpression is read.
type FilterType int32

const (
	// FilterTag matches tags: "*" for all, or "a||b".
	FilterTag = FilterType(v2.FilterType_TAG)
	// FilterSQL is an SQL92 expression over user properties.
	FilterSQL = FilterType(v2.FilterType_SQL)
)

// Filter is a subscription filter. The zero Filter matches every message
// (TAG "*").
type Filter struct {
	Type       FilterType
	Expression string
}

// TagFilter returns a TAG filter ("*" or "a||b").
func TagFilter(expr string) Filter { return Filter{Type: FilterTag, Expression: expr} }

// SQLFilter returns an SQL92 filter.
func SQLFilter(expr string) Filter { return Filter{Type: FilterSQL, Expression: expr} }

func (f Filter) proto() *v2.FilterExpression {
	if f.Expression == "" {
		return &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"}
	}
	t := v2.FilterType(f.Type)
	if f.Type == 0 {
		t = v2.FilterType_TAG
	}
	return &v2.FilterExpression{Type: t, Expression: f.Expression}
}
