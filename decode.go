package rmqflow

import (
	"encoding/json"
	"unicode/utf8"
)

// Decoder turns a message body into a value. A Decoder's error is reported on
// the message (AckableMessage.Err); it never stops a source. Such a message is
// emitted all the same and never acked by rmqflow; unless a Runner drives the
// source it is not leased or renewed, and it is emitted with at most
// SourceConfig.UndecodableInvisibleDuration (10 s) of invisibility left, so
// that it comes back soon if nobody acts on it (see AckableMessage.Err).
type Decoder[T any] interface {
	Decode(body []byte, meta *Metadata) (T, error)
}

// DecoderFunc adapts a function to a Decoder.
type DecoderFunc[T any] func(body []byte, meta *Metadata) (T, error)

// Decode calls f.
func (f DecoderFunc[T]) Decode(body []byte, meta *Metadata) (T, error) { return f(body, meta) }

// BytesDecoder returns the body itself.
func BytesDecoder() Decoder[[]byte] {
	return DecoderFunc[[]byte](func(b []byte, _ *Metadata) ([]byte, error) { return b, nil })
}

// StringDecoder returns the body as a string; a body that is not valid UTF-8
// is an error.
func StringDecoder() Decoder[string] {
	return DecoderFunc[string](func(b []byte, _ *Metadata) (string, error) {
		if !utf8.Valid(b) {
			return "", &DecodeError{Reason: "body is not valid UTF-8"}
		}
		return string(b), nil
	})
}

// JSONDecoder unmarshals the body as JSON into a T.
func JSONDecoder[T any]() Decoder[T] {
	return DecoderFunc[T](func(b []byte, _ *Metadata) (T, error) {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return v, &DecodeError{Reason: "invalid JSON", Err: err}
		}
		return v, nil
	})
}

// DecodeError is a body that could not be decoded.
type DecodeError struct {
	Reason string
	Err    error
}

func (e *DecodeError) Error() string {
	if e.Err != nil {
		return "rmqflow: decode: " + e.Reason + ": " + e.Err.Error()
	}
	return "rmqflow: decode: " + e.Reason
}

func (e *DecodeError) Unwrap() error { return e.Err }
