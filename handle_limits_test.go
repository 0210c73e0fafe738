package rmqflow

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestHandleNegativeAttemptRejected (issue 8, #13, #21): a negative delivery
// attempt is outside the limits both encodings share: neither encoder
// produces it and neither decoder accepts it.
func TestHandleNegativeAttemptRejected(t *testing.T) {
	h := sampleHandle()
	h.DeliveryAttempt = -1
	if b, err := h.MarshalBinary(); !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalBinary of attempt -1: %x, %v; want ErrBadHandle", b, err)
	}
	if b, err := json.Marshal(h); err == nil || !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalJSON of attempt -1: %s, %v; want ErrBadHandle", b, err)
	}
	js := `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","deliveryAttempt":-1}`
	var got ReceiptHandle
	if err := json.Unmarshal([]byte(js), &got); !errors.Is(err, ErrBadHandle) {
		t.Errorf("JSON with attempt -1 decoded to %+v, %v; want ErrBadHandle", got, err)
	}
}

// TestHandleFieldLimitShared (#21): a field over 64 KiB is rejected by both
// encoders and both decoders.
func TestHandleFieldLimitShared(t *testing.T) {
	big := strings.Repeat("x", maxHandleField+1)
	h := sampleHandle()
	h.Handle = big
	if _, err := h.MarshalBinary(); !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalBinary of a %d-byte field: %v; want ErrBadHandle", len(big), err)
	}
	if _, err := json.Marshal(h); !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalJSON of a %d-byte field: %v; want ErrBadHandle", len(big), err)
	}
	js := `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"` + big + `"}`
	var got ReceiptHandle
	if err := json.Unmarshal([]byte(js), &got); !errors.Is(err, ErrBadHandle) {
		t.Errorf("JSON with a %d-byte field: %v; want ErrBadHandle", len(big), err)
	}
	// Exactly at the limit is fine in both forms.
	h.Handle = big[:maxHandleField]
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := got.UnmarshalBinary(b); err != nil || got != h {
		t.Fatalf("binary at the limit: %v", err)
	}
	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &got); err != nil || got != h {
		t.Fatalf("JSON at the limit: %v", err)
	}
}

// TestHandleJSONStrictKeys (#21): keys match exactly (encoding/json would
// take "Group" or "GROUP" for "group"), a key given twice is an error (it
// would keep the last), and every decode error wraps ErrBadHandle, from
// UnmarshalJSON, json.Unmarshal (for syntactically valid JSON) and
// ParseReceiptHandleJSON (for anything).
func TestHandleJSONStrictKeys(t *testing.T) {
	for name, s := range map[string]string{
		"upper-case key":    `{"v":1,"endpoints":"h:1","Group":"g","topic":"t","messageId":"m","handle":"x"}`,
		"all caps key":      `{"V":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}`,
		"duplicate key":     `{"v":1,"endpoints":"h:1","group":"g","group":"other","topic":"t","messageId":"m","handle":"x"}`,
		"duplicate v":       `{"v":1,"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}`,
		"trailing brace":    `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}}`,
		"second object":     `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"} {}`,
		"null string":       `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","liteTopic":null}`,
		"fractional":        `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","deliveryAttempt":1.5}`,
		"attempt overflow":  `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","deliveryAttempt":2147483648}`,
		"not an object":     `[1]`,
		"invalid utf-8":     "{\"v\":1,\"endpoints\":\"h:1\",\"group\":\"g\xff\",\"topic\":\"t\",\"messageId\":\"m\",\"handle\":\"x\"}",
		"string for number": `{"v":"1","endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}`,
	} {
		var h ReceiptHandle
		if err := h.UnmarshalJSON([]byte(s)); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: UnmarshalJSON: %v, want ErrBadHandle", name, err)
		}
		if _, err := ParseReceiptHandleJSON([]byte(s)); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: ParseReceiptHandleJSON: %v, want ErrBadHandle", name, err)
		}
		if json.Valid([]byte(s)) {
			if err := json.Unmarshal([]byte(s), &h); !errors.Is(err, ErrBadHandle) {
				t.Errorf("%s: json.Unmarshal: %v, want ErrBadHandle", name, err)
			}
		}
	}
	for name, s := range map[string]string{"truncated": `{"v":1,"endpoints":"h:1"`, "not json": "nope", "empty": ""} {
		if _, err := ParseReceiptHandleJSON([]byte(s)); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: ParseReceiptHandleJSON: %v, want ErrBadHandle", name, err)
		}
		// json.Unmarshal checks syntax before it calls UnmarshalJSON: its
		// error is a *json.SyntaxError, as documented on UnmarshalJSON.
		var h ReceiptHandle
		var se *json.SyntaxError
		if err := json.Unmarshal([]byte(s), &h); !errors.As(err, &se) && !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: json.Unmarshal: %v", name, err)
		}
	}
	// The key order and whitespace are free; what decodes is the handle.
	h, err := ParseReceiptHandleJSON([]byte(` { "handle":"x", "messageId":"m","topic":"t","group":"g","endpoints":"h:1","v":1,"deliveryAttempt":2 } `))
	if err != nil || h != (ReceiptHandle{Endpoints: "h:1", Group: "g", Topic: "t", MessageID: "m", Handle: "x", DeliveryAttempt: 2}) {
		t.Fatalf("reordered keys: %+v, %v", h, err)
	}
}

// TestHandleInvalidUTF8Rejected: the JSON form cannot carry a string that
// is not UTF-8, so neither form accepts one (else binary → JSON → binary
// would change the handle).
func TestHandleInvalidUTF8Rejected(t *testing.T) {
	h := sampleHandle()
	h.MessageID = "m\xff"
	if _, err := h.MarshalBinary(); !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalBinary of invalid UTF-8: %v; want ErrBadHandle", err)
	}
	if _, err := json.Marshal(h); !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalJSON of invalid UTF-8: %v; want ErrBadHandle", err)
	}
}
