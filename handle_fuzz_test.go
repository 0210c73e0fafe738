package rmqflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// jsonSeeds are JSON inputs for FuzzReceiptHandleJSON: good handles and the
// malformed shapes the decoder must reject (issue 8, #21).
var jsonSeeds = []string{
	`{"v":1,"endpoints":"127.0.0.1:8081;10.0.0.2:8081","namespace":"ns","group":"g","topic":"main","liteTopic":"session-42","messageId":"01ABCDEF","handle":"0 1796040907164 20000 999 0 broker-a 0 0 1995","deliveryAttempt":3}`,
	`{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}`,
	`{"v":1,"endpoints":"[::1]:8081","group":"g\u00e9","topic":"t","messageId":"m","handle":"\u0000<&>"}`,
	`{"v":1,"endpoints":"h:1","Group":"g","topic":"t","messageId":"m","handle":"x"}`,
	`{"v":1,"endpoints":"h:1","group":"g","group":"g","topic":"t","messageId":"m","handle":"x"}`,
	`{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","deliveryAttempt":-1}`,
	`{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","deliveryAttempt":1e0}`,
	`{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}}`,
	`{"v":2}`, `[]`, `nope`, ``, `{`, `null`,
}

// FuzzReceiptHandleJSON: every JSON input either decodes to a handle that
// both forms encode and that survives JSON → binary → JSON unchanged, or
// fails with ErrBadHandle from every decoding path.
func FuzzReceiptHandleJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseReceiptHandleJSON(b)
		var viaMethod ReceiptHandle
		errMethod := viaMethod.UnmarshalJSON(b)
		if (err == nil) != (errMethod == nil) || h != viaMethod {
			t.Fatalf("ParseReceiptHandleJSON (%+v, %v) and UnmarshalJSON (%+v, %v) disagree", h, err, viaMethod, errMethod)
		}
		var viaStd ReceiptHandle
		errStd := json.Unmarshal(b, &viaStd)
		if err != nil {
			if !errors.Is(err, ErrBadHandle) {
				t.Fatalf("error %v does not wrap ErrBadHandle", err)
			}
			var se *json.SyntaxError
			if errStd == nil || (!errors.Is(errStd, ErrBadHandle) && !(errors.As(errStd, &se) && !json.Valid(b))) {
				t.Fatalf("json.Unmarshal of a rejected input: %v (valid JSON: %v)", errStd, json.Valid(b))
			}
			return
		}
		if errStd != nil || viaStd != h {
			t.Fatalf("json.Unmarshal disagrees: %+v, %v; want %+v", viaStd, errStd, h)
		}
		checkCrossForm(t, h)
	})
}

// FuzzReceiptHandleBinaryCrossForm: whatever the binary decoder accepts
// re-encodes to the same bytes and survives binary → JSON → binary.
func FuzzReceiptHandleBinaryCrossForm(f *testing.F) {
	good, _ := sampleHandle().MarshalBinary()
	f.Add(good)
	min, _ := (ReceiptHandle{Endpoints: "h:1", Group: "g", Topic: "t", MessageID: "m", Handle: "x"}).MarshalBinary()
	f.Add(min)
	f.Add(append(bytes.Clone(good[:len(good)-1]), 0xff, 0xff, 0xff, 0xff, 0x0f)) // attempt -1 as MarshalBinary once wrote it
	f.Add([]byte("RQH\x01\x03h:1\x00\x01g\x01t\x00\x02m\xff\x01x\x01"))          // invalid UTF-8 message id
	f.Add([]byte("RQH\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h ReceiptHandle
		if err := h.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrBadHandle) {
				t.Fatalf("error %v does not wrap ErrBadHandle", err)
			}
			return
		}
		b2, err := h.MarshalBinary()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("decoded %+v re-encodes to %x (%v), want %x", h, b2, err, b)
		}
		checkCrossForm(t, h)
	})
}

// checkCrossForm: a handle one decoder accepted encodes in both forms, and
// each encoding decodes back to it (in both directions).
func checkCrossForm(t *testing.T, h ReceiptHandle) {
	t.Helper()
	if err := h.Validate(); err != nil {
		t.Fatalf("decoded handle %+v does not validate: %v", h, err)
	}
	bin, err := h.MarshalBinary()
	if err != nil {
		t.Fatalf("decoded handle %+v does not encode in binary: %v", h, err)
	}
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatalf("decoded handle %+v does not encode in JSON: %v", h, err)
	}
	var fromBin ReceiptHandle
	if err := fromBin.UnmarshalBinary(bin); err != nil || fromBin != h {
		t.Fatalf("binary round trip: %+v, %v; want %+v", fromBin, err, h)
	}
	fromJSON, err := ParseReceiptHandleJSON(js)
	if err != nil || fromJSON != h {
		t.Fatalf("JSON round trip of %s: %+v, %v; want %+v", js, fromJSON, err, h)
	}
	// binary → JSON → binary gives the same bytes.
	js2, _ := json.Marshal(fromBin)
	back, err := ParseReceiptHandleJSON(js2)
	if err != nil {
		t.Fatal(err)
	}
	if bin2, _ := back.MarshalBinary(); !bytes.Equal(bin, bin2) {
		t.Fatalf("binary → JSON → binary changed the bytes: %x → %s → %x", bin, js2, bin2)
	}
	if strings.Contains(string(js), `"owner"`) {
		t.Fatalf("JSON form carries the owner: %s", js)
	}
}
