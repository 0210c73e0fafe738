package rmqflow

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rmqflow/rmqflow/client"
)

// ReceiptHandle is everything needed to ack or change the invisibility of one
// delivery of one message, from any process: where (endpoints, namespace,
// consumer group) and what (topic, lite topic, message id, the broker's receipt
// handle, the delivery attempt it came with). It carries no credentials and no
// body: the process that acks supplies its own credentials (see AckPool).
//
// It has a stable, versioned binary encoding (MarshalBinary) and a JSON form
// (MarshalJSON). Both forms share one set of limits, checked by Validate in
// both encoders and both decoders (every string field valid UTF-8 and at most
// 64 KiB, DeliveryAttempt not negative, the fields an ack needs present), so
// a handle that one form encodes the other encodes too, and decoding either
// form then encoding it in the other gives the same handle. Their decoders
// reject anything malformed with an error wrapping ErrBadHandle.
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

// Validate reports whether h has every field an ack needs and is within the
// limits both encodings share: every string field valid UTF-8 and at most
// 64 KiB, DeliveryAttempt not negative, Endpoints parseable.
func (h ReceiptHandle) Validate() error {
	for i, f := range h.fields() {
		if len(*f) > maxHandleField {
			return fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrBadHandle, handleFieldNames[i], len(*f), maxHandleField)
		}
		if !utf8.ValidString(*f) {
			return fmt.Errorf("%w: %s is not valid UTF-8", ErrBadHandle, handleFieldNames[i])
		}
	}
	if h.DeliveryAttempt < 0 {
		return fmt.Errorf("%w: negative delivery attempt %d", ErrBadHandle, h.DeliveryAttempt)
	}
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

// handleFieldNames are the JSON keys of fields(), in the same order.
var handleFieldNames = [...]string{"endpoints", "namespace", "group", "topic", "liteTopic", "messageId", "handle"}

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

// UnmarshalJSON decodes what MarshalJSON produced: one JSON object whose keys
// are exactly (case included) "v", the field names of MarshalJSON and
// nothing else, each at most once, in any order; strings as strings, "v" and
// "deliveryAttempt" as integers. Unknown, duplicate or differently cased
// keys, a missing or unknown version, null values, trailing data and
// anything outside Validate's limits are errors wrapping ErrBadHandle.
//
// json.Unmarshal checks the syntax of its whole input before it calls
// UnmarshalJSON, so for input that is not JSON at all it returns a bare
// *json.SyntaxError; use ParseReceiptHandleJSON to get ErrBadHandle for every
// malformed input.
func (h *ReceiptHandle) UnmarshalJSON(b []byte) error {
	out, err := ParseReceiptHandleJSON(b)
	if err != nil {
		return err
	}
	*h = out
	return nil
}

// ParseReceiptHandleJSON decodes the JSON form of a handle (see
// UnmarshalJSON). Every error, a syntax error included, wraps ErrBadHandle.
func ParseReceiptHandleJSON(b []byte) (ReceiptHandle, error) {
	var h ReceiptHandle
	if err := decodeHandleJSON(b, &h); err != nil {
		return ReceiptHandle{}, fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	if err := h.Validate(); err != nil {
		return ReceiptHandle{}, err
	}
	return h, nil
}

func decodeHandleJSON(b []byte, h *ReceiptHandle) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return err
	} else if tok != json.Delim('{') {
		return fmt.Errorf("want an object, got %v", tok)
	}
	strs := map[string]*string{}
	for i, f := range h.fields() {
		strs[handleFieldNames[i]] = f
	}
	seen := map[string]bool{}
	version := int64(-1)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // a key inside an object is always a string
		if seen[key] {
			return fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		if tok, err = dec.Token(); err != nil {
			return err
		}
		switch key {
		case "v", "deliveryAttempt":
			num, ok := tok.(json.Number)
			if !ok {
				return fmt.Errorf("%s: want an integer, got %T", key, tok)
			}
			n, err := strconv.ParseInt(string(num), 10, 32)
			if err != nil {
				return fmt.Errorf("%s: want a 32-bit integer, got %s", key, num)
			}
			if key == "v" {
				version = n
			} else {
				h.DeliveryAttempt = int32(n)
			}
		default:
			f, known := strs[key]
			if !known {
				return fmt.Errorf("unknown key %q", key)
			}
			s, ok := tok.(string)
			if !ok {
				if d, isDelim := tok.(json.Delim); isDelim {
					return fmt.Errorf("%s: want a string, got %v", key, d)
				}
				return fmt.Errorf("%s: want a string, got %T", key, tok)
			}
			*f = s
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the object")
	}
	if version != handleVersion {
		if version < 0 {
			return errors.New("no version")
		}
		return fmt.Errorf("unsupported version %d", version)
	}
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
