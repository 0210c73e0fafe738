package rmqwatermill

import (
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Metadata keys of received messages. They describe the delivery the message
// came from; DefaultMarshaler sends none of them on, except MetaTag, MetaKeys
// and MetaMessageGroup, which a forwarded message keeps.
// They are rmqflow's attribute names (rmqflow.Metadata.Attributes).
const (
	MetaTopic           = rmqflow.AttrTopic
	MetaLiteTopic       = rmqflow.AttrLiteTopic
	MetaMessageID       = rmqflow.AttrMessageID
	MetaTag             = rmqflow.AttrTag
	MetaKeys            = rmqflow.AttrKeys // space-separated
	MetaMessageGroup    = rmqflow.AttrMessageGroup
	MetaDeliveryAttempt = rmqflow.AttrDeliveryAttempt
	MetaBornTime        = rmqflow.AttrBornTime  // RFC 3339, UTC
	MetaStoreTime       = rmqflow.AttrStoreTime // RFC 3339, UTC
	MetaBornHost        = rmqflow.AttrBornHost
	MetaDeadLettered    = rmqflow.AttrDeadLettered // "true" for a copy read from a %DLQ% topic
	// MetaHandle is the receipt handle as JSON (rmqflow.ReceiptHandle's
	// MarshalJSON): another process can ack the message with it through an
	// rmqflow.AckPool. It holds no credential.
	MetaHandle = rmqflow.AttrHandle
)

// UUIDProperty is the user property that carries a Watermill message's UUID.
// A message without it (sent by another producer) gets its RocketMQ message
// id as UUID.
const UUIDProperty = "_watermill_message_uuid"

const metaPrefix = rmqflow.AttrPrefix

// Marshaler turns a Watermill message into an rmqflow record.
type Marshaler interface {
	Marshal(topic string, msg *message.Message) (rmqflow.Record, error)
}

// Unmarshaler turns a received message into a Watermill message.
type Unmarshaler interface {
	Unmarshal(m *rmqflow.AckableMessage[[]byte]) (*message.Message, error)
}

// DefaultMarshaler is the Marshaler and Unmarshaler the Publisher and
// Subscriber use unless told otherwise. The payload is the body; metadata
// are user properties, except the keys starting with "rocketmq_" and the
// properties the broker reserves (client.IsSystemProperty, such as the
// INNER_MULTI_DISPATCH a received lite message carries): of the "rocketmq_"
// keys, MetaTag, MetaKeys and MetaMessageGroup set the message's tag, keys
// and message group, and the others (which describe a received delivery)
// are dropped, as are the broker's. The UUID travels in UUIDProperty. Received messages get every user
// property as metadata, plus the Meta* keys.
type DefaultMarshaler struct {
	// WithHandle sets MetaHandle on received messages (off by default: the
	// Subscriber acks them itself when the handler calls Ack).
	WithHandle bool
}

// Marshal implements Marshaler.
func (DefaultMarshaler) Marshal(_ string, msg *message.Message) (rmqflow.Record, error) {
	rec := rmqflow.Record{Body: msg.Payload, Properties: make(map[string]string, len(msg.Metadata)+1)}
	for k, v := range msg.Metadata {
		switch {
		case k == MetaTag:
			rec.Tag = v
		case k == MetaKeys:
			rec.Keys = strings.Fields(v)
		case k == MetaMessageGroup:
			rec.MessageGroup = v
		case strings.HasPrefix(k, metaPrefix), client.IsSystemProperty(k):
		case k == UUIDProperty:
			return rec, fmt.Errorf("rmqwatermill: metadata key %q is reserved for the message's UUID", k)
		default:
			rec.Properties[k] = v
		}
	}
	rec.Properties[UUIDProperty] = msg.UUID
	return rec, nil
}

// Unmarshal implements Unmarshaler.
func (d DefaultMarshaler) Unmarshal(m *rmqflow.AckableMessage[[]byte]) (*message.Message, error) {
	meta := m.Meta
	uuid := meta.Properties[UUIDProperty]
	if uuid == "" {
		uuid = meta.MessageID
	}
	msg := message.NewMessage(uuid, m.Value)
	for k, v := range meta.Properties {
		// A producer's property named like the delivery's metadata
		// (rocketmq_dead_lettered, rocketmq_lite_topic, ...) must not pass
		// for it.
		if k != UUIDProperty && !rmqflow.IsAttribute(k) {
			msg.Metadata.Set(k, v)
		}
	}
	for k, v := range meta.Attributes() {
		msg.Metadata.Set(k, v)
	}
	if d.WithHandle {
		b, err := m.Handle.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("rmqwatermill: serializing the receipt handle of %s: %w", meta.MessageID, err)
		}
		msg.Metadata.Set(MetaHandle, string(b))
	}
	return msg, nil
}
