package rmqflow

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// AckableMessage is a decoded message plus the ReceiptHandle that acks it from
// anywhere. Hand it on by value or pointer; ack it when the work is done with
// an Acker (or, in another process, an AckPool and the handle alone).
type AckableMessage[T any] struct {
	// Value is the decoded body; the zero value when Err is set.
	Value T
	// Err is the decoder's error for this message, nil when it decoded. A
	// message that failed to decode is neither acked nor lost: the caller
	// decides — ack it to drop it, park it somewhere and ack it, extend it
	// (ChangeInvisibleDuration) to keep it longer, or do nothing. Unless a
	// Runner drives the source it is not leased or renewed and has at most
	// SourceConfig.UndecodableInvisibleDuration (10 s) of invisibility left,
	// so that doing nothing gives it back soon: it comes back counting a
	// delivery, and after the group's retries goes to its dead-letter queue,
	// instead of holding its lite topic (or FIFO message group) for
	// InvisibleDuration on each delivery. Under a Runner it is leased like
	// any other message until the handler's decision.
	Err error
	// Handle routes acks and invisibility changes for this delivery.
	Handle ReceiptHandle
	// Meta is the message's metadata.
	Meta Metadata

	lease *lease // the source's lease of this delivery, if leased
}

// lostDelivery reports whether the broker has let this delivery go while it
// was leased (a renewal refused as expired, or a newer delivery of the
// message received): it comes back, or has already, and acking or changing
// it can no longer work.
func (m *AckableMessage[T]) lostDelivery() bool { return m.lease != nil && m.lease.lost.Load() }

// Metadata describes a delivered message. Keys and Properties are the
// message's own copies. Body is not copied: it is the received body itself,
// which a Decoder's value may share (BytesDecoder returns it as is), so treat
// it as read-only.
type Metadata struct {
	Topic        string
	LiteTopic    string
	MessageID    string
	Tag          string
	Keys         []string
	Properties   map[string]string
	MessageGroup string
	// BornTime is when the producer created the message.
	BornTime time.Time
	// BornHost is the producer's host as the broker recorded it.
	BornHost string
	// StoreTime is when the broker stored the message.
	StoreTime time.Time
	// DeliveryAttempt is 1 on first delivery (see docs/broker-semantics.md
	// scenarios e and f for how far it can be trusted on lite topics).
	DeliveryAttempt int32
	// ReceivedAt is when this process received the delivery.
	ReceivedAt time.Time
	// Body is the raw body the value was decoded from.
	Body []byte
}

// DeadLettered reports whether the message was delivered from a dead-letter
// topic (%DLQ%<group>). On RocketMQ 5.5.0 a lite message that exhausted its
// retries comes back this way and cannot be acked for good
// (docs/broker-semantics.md, scenario g): park it somewhere and let it be.
func (m Metadata) DeadLettered() bool { return strings.HasPrefix(m.Topic, "%DLQ%") }

func metadataOf(rm *client.ReceivedMessage, now time.Time) Metadata {
	return Metadata{
		Topic:           rm.Topic,
		LiteTopic:       rm.LiteTopic,
		MessageID:       rm.MessageID,
		Tag:             rm.Tag,
		Keys:            slices.Clone(rm.Keys),
		Properties:      maps.Clone(rm.Properties),
		MessageGroup:    rm.MessageGroup,
		BornTime:        rm.BornTime,
		BornHost:        rm.BornHost,
		StoreTime:       rm.StoreTime,
		DeliveryAttempt: rm.DeliveryAttempt,
		ReceivedAt:      now,
		Body:            rm.Body,
	}
}
