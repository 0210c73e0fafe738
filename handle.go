package rmqflow

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rmqflow/rmqflow/client"
)

// ReceiptHandle is everything needed to ack or change the invisibility of one
// delivery of one message, from any process: where (endpoints, namespace,
// consumer group) and what (topic, lite topic, message id, the broker's receipt
// handle, the delivery attempt it came with). It carries no credentials and no
// body: the process that acks supplies its own credentials (see AckPool).
//
// It has a stable, versioned binary encoding (MarshalBinary) and a JSON form
// (MarshalJSON); both round-trip exactly and their decoders reject anything
// malformed with an error wrapping ErrBadHandle.
type ReceiptHandle struct {
	// Endpoints is the access point the message was received from,
	// "host:port" or "host:port;host:port".
	Endpoints string `json:"endpoints"`
	// Namespace is the namespace of topic and group; empty for none.
	Namespace string `json:"namespace,omitempty"`
	// Group is the consumer group the message was received by.
	Group string `json:"group"`
	// Topic is the topic the message was delivered from (the LITE main topic
	// for lite messages).
	Topic string `json:"topic"`
	// LiteTopic is the lite topic; empty for normal messages.
	LiteTopic string `json:"liteTopic,omitempty"`
	// MessageID is the message's id.
	MessageID string `json:"messageId"`
	// Handle is the broker's receipt handle for this delivery.
	Handle string `json:"handle"`
	// DeliveryAttempt is the attempt this delivery carried (1 on first).
	DeliveryAttempt int32 `json:"deliveryAttempt"`

	// owner, when set, is the in-process lease table that keeps this
	// delivery invisible. It is never serialized: encoding a handle hands
	// the delivery off (see forWire).
	owner handOffer
}

// handOffer is implemented by the in-process lease table of the source that
// emitted a handle. handOff ends the delivery's lease and returns the handle
// with the newest broker receipt handle: from then on the delivery belongs to
// whoever holds the encoded handle.
type handOffer interface {
	handOff(h ReceiptHandle) ReceiptHandle
}

// forWire is h as it leaves the process: with the newest receipt handle, its
// lease ended, and no owner.
func (h ReceiptHandle) forWire() ReceiptHandle {
	if h.owner != nil {
		h = h.owner.handOff(h)
	}
	h.owner = nil
	return h
}

// ErrBadHandle is wrapped by every error decoding a ReceiptHandle.
var ErrBadHandle = errors.New("rmqflow: malformed receipt handle")

// handleMagic starts every binary handle: "RQH" and a version byte.
const (
	handleMagic   = "RQH"
	handleVersion = 1
	// maxHandleField bounds each string field so that a corrupt length cannot
	// make the decoder allocate without limit.
	maxHandleField = 64 << 10
)

// Validate reports whether h has every field an ack needs.
func (h ReceiptHandle) Validate() error {
	var missing []string
	if h.Endpoints == "" {
		missing = append(missing, "endpoints")
	}
	if h.Group == "" {
		missing = append(missing, "group")
	}
	if h.Topic == "" {
		missing = append(missing, "topic")
	}
	if h.MessageID == "" {
		missing = append(missing, "messageId")
	}
	if h.Handle == "" {
		missing = append(missing, "handle")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrBadHandle, strings.Join(missing, ", "))
	}
	if _, err := client.ParseEndpoints(h.Endpoints); err != nil {
		return fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	return nil
}

func (h *ReceiptHandle) fields() []*string {
	return []*string{&h.Endpoints, &h.Namespace, &h.Group, &h.Topic, &h.LiteTopic, &h.MessageID, &h.Handle}
}

// MarshalBinary encodes h as "RQH", a version byte, seven length-prefixed
// strings (endpoints, namespace, group, topic, lite topic, message id, handle)
// and the delivery attempt, all lengths and numbers as uvarints.
func (h ReceiptHandle) MarshalBinary() ([]byte, error) {
	h = h.forWire()
	if err := h.Validate(); err != nil {
		return nil, err
	}
	size := len(handleMagic) + 1 + binary.MaxVarintLen32
	for _, f := range h.fields() {
		size += binary.MaxVarintLen32 + len(*f)
	}
	b := make([]byte, 0, size)
	b = append(b, handleMagic...)
	b = append(b, handleVersion)
	for _, f := range h.fields() {
		b = binary.AppendUvarint(b, uint64(len(*f)))
		b = append(b, *f...)
	}
	b = binary.AppendUvarint(b, uint64(uint32(h.DeliveryAttempt)))
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary produced. Trailing bytes, an
// unknown version or a truncated field are errors wrapping ErrBadHandle.
func (h *ReceiptHandle) UnmarshalBinary(b []byte) error {
	if len(b) < len(handleMagic)+1 || string(b[:len(handleMagic)]) != handleMagic {
		return fmt.Errorf("%w: not a receipt handle encoding", ErrBadHandle)
	}
	if v := b[len(handleMagic)]; v != handleVersion {
		return fmt.Errorf("%w: unsupported version %d", ErrBadHandle, v)
	}
	b = b[len(handleMagic)+1:]
	var out ReceiptHandle
	for i, f := range out.fields() {
		n, k := binary.Uvarint(b)
		if k <= 0 || k != uvarintLen(n) || n > maxHandleField || n > uint64(len(b)-k) {
			return fmt.Errorf("%w: field %d truncated", ErrBadHandle, i)
		}
		*f = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || k != uvarintLen(n) || n > 1<<31-1 {
		return fmt.Errorf("%w: delivery attempt truncated", ErrBadHandle)
	}
	out.DeliveryAttempt = int32(n)
	if len(b) != k {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadHandle, len(b)-k)
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*h = out
	return nil
}

// uvarintLen is the length of n's canonical uvarint: any other length is a
// non-canonical encoding, which the decoder rejects so that decoding and
// encoding stay inverse.
func uvarintLen(n uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], n)
}

// handleJSON is the JSON form with a version field.
type handleJSON struct {
	V int `json:"v"`
	receiptHandleAlias
}

type receiptHandleAlias ReceiptHandle

// MarshalJSON encodes h as a JSON object with a version field "v": 1.
func (h ReceiptHandle) MarshalJSON() ([]byte, error) {
	h = h.forWire()
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(handleJSON{V: handleVersion, receiptHandleAlias: receiptHandleAlias(h)})
}

// UnmarshalJSON decodes what MarshalJSON produced; unknown fields, a missing
// or unknown version and missing fields are errors wrapping ErrBadHandle.
func (h *ReceiptHandle) UnmarshalJSON(b []byte) error {
	var j handleJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data", ErrBadHandle)
	}
	if j.V != handleVersion {
		return fmt.Errorf("%w: unsupported version %d", ErrBadHandle, j.V)
	}
	out := ReceiptHandle(j.receiptHandleAlias)
	if err := out.Validate(); err != nil {
		return err
	}
	*h = out
	return nil
}

// String is a short description for logs: no broker handle, no credentials.
func (h ReceiptHandle) String() string {
	if h.LiteTopic != "" {
		return fmt.Sprintf("%s/%s/%s@%s#%d", h.Group, h.Topic, h.LiteTopic, h.MessageID, h.DeliveryAttempt)
	}
	return fmt.Sprintf("%s/%s@%s#%d", h.Group, h.Topic, h.MessageID, h.DeliveryAttempt)
}

// ackEntry is the client entry acking this handle.
func (h ReceiptHandle) ackEntry() client.AckEntry {
	return client.AckEntry{MessageID: h.MessageID, ReceiptHandle: h.Handle, LiteTopic: h.LiteTopic}
}
