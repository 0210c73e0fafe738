package rmqflow

import (
	"strconv"
	"strings"
	"time"
)

// The names Metadata.Attributes gives a delivery's metadata: the form in
// which message-oriented engines carry it as string metadata (Benthos,
// Watermill and eKuiper integrations use them as they are).
const (
	AttrTopic           = "rocketmq_topic"
	AttrLiteTopic       = "rocketmq_lite_topic"
	AttrMessageID       = "rocketmq_message_id"
	AttrTag             = "rocketmq_tag"
	AttrKeys            = "rocketmq_keys" // space-separated
	AttrMessageGroup    = "rocketmq_message_group"
	AttrDeliveryAttempt = "rocketmq_delivery_attempt"
	AttrBornTime        = "rocketmq_born_time"  // RFC 3339 with nanoseconds, UTC
	AttrStoreTime       = "rocketmq_store_time" // RFC 3339 with nanoseconds, UTC
	AttrBornHost        = "rocketmq_born_host"
	AttrDeadLettered    = "rocketmq_dead_lettered" // "true" for a copy read from a %DLQ% topic
	// AttrHandle is where integrations put the receipt handle as JSON
	// (ReceiptHandle.MarshalJSON). Attributes never sets it: a handle is
	// handed on only where the caller chose to.
	AttrHandle = "rocketmq_handle"
	// AttrPrefix starts every name above.
	AttrPrefix = "rocketmq_"
)

// IsAttribute reports whether name is one of the Attr* names above (not
// any name with AttrPrefix): an integration that puts user properties and
// Attributes into one metadata map drops a user property of such a name, so
// that a producer cannot make a message pass for, say, a dead-lettered one.
func IsAttribute(name string) bool {
	switch name {
	case AttrTopic, AttrLiteTopic, AttrMessageID, AttrTag, AttrKeys, AttrMessageGroup, AttrDeliveryAttempt,
		AttrBornTime, AttrStoreTime, AttrBornHost, AttrDeadLettered, AttrHandle:
		return true
	}
	return false
}

// Attributes returns the delivery's metadata under the Attr* names: topic,
// message id and delivery attempt always; lite topic, tag, keys, message
// group, born host, born and store time when set; dead_lettered "true" for a
// message read from a dead-letter topic. The user properties are not in it
// (they are Properties, under their own names).
func (m Metadata) Attributes() map[string]string {
	out := map[string]string{
		AttrTopic:           m.Topic,
		AttrMessageID:       m.MessageID,
		AttrDeliveryAttempt: strconv.Itoa(int(m.DeliveryAttempt)),
	}
	for k, v := range map[string]string{AttrLiteTopic: m.LiteTopic, AttrTag: m.Tag, AttrKeys: strings.Join(m.Keys, " "),
		AttrMessageGroup: m.MessageGroup, AttrBornHost: m.BornHost} {
		if v != "" {
			out[k] = v
		}
	}
	for k, t := range map[string]time.Time{AttrBornTime: m.BornTime, AttrStoreTime: m.StoreTime} {
		if !t.IsZero() {
			out[k] = t.UTC().Format(time.RFC3339Nano)
		}
	}
	if m.DeadLettered() {
		out[AttrDeadLettered] = "true"
	}
	return out
}
