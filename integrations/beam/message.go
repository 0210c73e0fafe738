package rmqio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/rmqflow/rmqflow"
)

// AckableMessage is one received message as a Beam element: its payload,
// its metadata, and its receipt handle in rmqflow's binary form, so that Ack
// can ack it on any worker. The handle names no credential.
type AckableMessage struct {
	Payload         []byte
	Topic           string
	LiteTopic       string
	MessageID       string
	Tag             string
	Keys            []string
	Properties      map[string]string
	MessageGroup    string
	BornTime        time.Time
	StoreTime       time.Time
	DeliveryAttempt int32
	// DeadLettered is set for a message read from the group's dead-letter
	// topic (%DLQ%<group>): on RocketMQ 5.5.0 a lite message that exhausted
	// its retries comes back this way, and no ack removes it for good
	// (docs/broker-semantics.md, scenario g). Route it out of the work.
	DeadLettered bool
	// Handle is rmqflow.ReceiptHandle.MarshalBinary of the delivery.
	Handle []byte
}

// ReceiptHandle decodes the message's handle.
func (m AckableMessage) ReceiptHandle() (rmqflow.ReceiptHandle, error) {
	var h rmqflow.ReceiptHandle
	if err := h.UnmarshalBinary(m.Handle); err != nil {
		return h, fmt.Errorf("rmqio: message %s: %w", m.MessageID, err)
	}
	return h, nil
}

// fromRMQ builds the element of a received message.
func fromRMQ(m *rmqflow.AckableMessage[[]byte]) (AckableMessage, error) {
	h, err := m.Handle.MarshalBinary()
	if err != nil {
		return AckableMessage{}, fmt.Errorf("rmqio: serializing the handle of %s: %w", m.Meta.MessageID, err)
	}
	md := m.Meta
	return AckableMessage{
		Payload: m.Value, Topic: md.Topic, LiteTopic: md.LiteTopic, MessageID: md.MessageID, Tag: md.Tag,
		Keys: md.Keys, Properties: md.Properties, MessageGroup: md.MessageGroup, BornTime: md.BornTime,
		StoreTime: md.StoreTime, DeliveryAttempt: md.DeliveryAttempt, DeadLettered: md.DeadLettered(), Handle: h,
	}, nil
}

// codecVersion leads every encoded AckableMessage.
const codecVersion = 1

// encodeMessage is AckableMessage's Beam coder: a version byte, then each
// field length-prefixed (uvarint), times as Unix nanoseconds (varint, 0 for
// the zero time), properties sorted by key so equal messages encode equally.
func encodeMessage(m AckableMessage) []byte {
	var b []byte
	b = append(b, codecVersion)
	putBytes := func(v []byte) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	putString := func(v string) { putBytes([]byte(v)) }
	putTime := func(t time.Time) {
		var n int64
		if !t.IsZero() {
			n = t.UnixNano()
		}
		b = binary.AppendVarint(b, n)
	}
	putBytes(m.Payload)
	putString(m.Topic)
	putString(m.LiteTopic)
	putString(m.MessageID)
	putString(m.Tag)
	b = binary.AppendUvarint(b, uint64(len(m.Keys)))
	for _, k := range m.Keys {
		putString(k)
	}
	keys := make([]string, 0, len(m.Properties))
	for k := range m.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		putString(k)
		putString(m.Properties[k])
	}
	putString(m.MessageGroup)
	putTime(m.BornTime)
	putTime(m.StoreTime)
	b = binary.AppendVarint(b, int64(m.DeliveryAttempt))
	if m.DeadLettered {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	putBytes(m.Handle)
	return b
}

var errCodec = errors.New("rmqio: malformed AckableMessage encoding")

// decodeMessage reverses encodeMessage.
func decodeMessage(b []byte) (AckableMessage, error) {
	var m AckableMessage
	if len(b) == 0 || b[0] != codecVersion {
		return m, fmt.Errorf("%w: unknown version", errCodec)
	}
	b = b[1:]
	var bad bool
	uvarint := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	varint := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	getBytes := func() []byte {
		n := uvarint()
		if bad || n > uint64(len(b)) {
			bad = true
			return nil
		}
		var v []byte
		if n > 0 {
			v = append(v, b[:n]...) // not aliasing the runner's buffer
		}
		b = b[n:]
		return v
	}
	getString := func() string { return string(getBytes()) }
	getTime := func() time.Time {
		n := varint()
		if n == 0 {
			return time.Time{}
		}
		return time.Unix(0, n).UTC()
	}
	m.Payload = getBytes()
	m.Topic = getString()
	m.LiteTopic = getString()
	m.MessageID = getString()
	m.Tag = getString()
	if n := uvarint(); !bad && n > 0 {
		if n > uint64(len(b)) {
			return m, errCodec
		}
		m.Keys = make([]string, 0, n)
		for i := uint64(0); i < n && !bad; i++ {
			m.Keys = append(m.Keys, getString())
		}
	}
	if n := uvarint(); !bad && n > 0 {
		if n > uint64(len(b)) {
			return m, errCodec
		}
		m.Properties = make(map[string]string, n)
		for i := uint64(0); i < n && !bad; i++ {
			k := getString()
			m.Properties[k] = getString()
		}
	}
	m.MessageGroup = getString()
	m.BornTime = getTime()
	m.StoreTime = getTime()
	m.DeliveryAttempt = int32(varint())
	if len(b) == 0 || b[0] > 1 {
		return AckableMessage{}, errCodec
	}
	m.DeadLettered = b[0] == 1
	b = b[1:]
	m.Handle = getBytes()
	if bad || len(b) != 0 {
		return AckableMessage{}, errCodec
	}
	return m, nil
}

func init() {
	beam.RegisterCoder(reflect.TypeOf((*AckableMessage)(nil)).Elem(), encodeMessage, decodeMessage)
}
