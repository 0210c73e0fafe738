package rmqflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rmqflow/rmqflow/client"
)

func sampleHandle() ReceiptHandle {
	return ReceiptHandle{
		Endpoints: "127.0.0.1:8081;10.0.0.2:8081", Namespace: "ns", Group: "g", Topic: "main",
		LiteTopic: "session-42", MessageID: "01ABCDEF", Handle: "0 1796040907164 20000 999 0 broker-a 0 0 1995",
		DeliveryAttempt: 3,
	}
}

func TestReceiptHandleBinaryRoundTrip(t *testing.T) {
	for _, h := range []ReceiptHandle{sampleHandle(), {Endpoints: "h:1", Group: "g", Topic: "t", MessageID: "m", Handle: "x"}} {
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got ReceiptHandle
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if got != h {
			t.Fatalf("round trip: got %+v, want %+v", got, h)
		}
		b2, _ := got.MarshalBinary()
		if !bytes.Equal(b, b2) {
			t.Fatal("encoding is not stable")
		}
	}
}

func TestReceiptHandleJSONRoundTrip(t *testing.T) {
	h := sampleHandle()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"v":1`) {
		t.Fatalf("JSON form has no version: %s", b)
	}
	var got ReceiptHandle
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("round trip: got %+v, want %+v", got, h)
	}
}

func TestReceiptHandleRejectsGarbage(t *testing.T) {
	good, _ := sampleHandle().MarshalBinary()
	for name, b := range map[string][]byte{
		"empty":       nil,
		"magic":       []byte("XYZ\x01"),
		"version":     append([]byte("RQH\x09"), good[4:]...),
		"truncated":   good[:len(good)-3],
		"trailing":    append(append([]byte{}, good...), 0),
		"huge length": []byte("RQH\x01\xff\xff\xff\xff\x0f"),
		"non-minimal": append([]byte("RQH\x01\x8f\x00"), good[5:]...),
	} {
		var h ReceiptHandle
		err := h.UnmarshalBinary(b)
		if !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: got %v, want ErrBadHandle", name, err)
		}
	}
	for name, s := range map[string]string{
		"not json":      "nope",
		"no version":    `{"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}`,
		"bad version":   `{"v":2,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x"}`,
		"unknown field": `{"v":1,"endpoints":"h:1","group":"g","topic":"t","messageId":"m","handle":"x","secret":"s"}`,
		"missing group": `{"v":1,"endpoints":"h:1","topic":"t","messageId":"m","handle":"x"}`,
		"bad endpoints": `{"v":1,"endpoints":"nohost","group":"g","topic":"t","messageId":"m","handle":"x"}`,
	} {
		var h ReceiptHandle
		if err := h.UnmarshalJSON([]byte(s)); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: got %v, want ErrBadHandle", name, err)
		}
	}
	if _, err := (ReceiptHandle{}).MarshalBinary(); !errors.Is(err, ErrBadHandle) {
		t.Errorf("empty handle marshalled: %v", err)
	}
}

// TestReceiptHandleCarriesNoSecret configures a source with credentials and
// checks that no encoding of the handles it would emit contains the secret
// or the access key.
func TestReceiptHandleCarriesNoSecret(t *testing.T) {
	const secret, ak = "s3cr3t-VALUE-xyz", "AK-visible-key"
	cfg := SourceConfig{Connection: Connection{Endpoints: "127.0.0.1:1", Credentials: client.Credentials{AccessKey: ak, AccessSecret: secret}},
		Lite: []LiteBinding{{Topic: "main", Group: "g"}}}
	src, err := NewSource(cfg, BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	// Build a handle the way Next does.
	e := &entry{msg: &client.ReceivedMessage{Topic: "main", LiteTopic: "l", MessageID: "m", ReceiptHandle: "rh", DeliveryAttempt: 1},
		bind: src.binds[0], handle: "rh"}
	h := ReceiptHandle{Endpoints: src.cfg.Endpoints, Namespace: src.cfg.Namespace, Group: e.bind.group, Topic: e.msg.Topic,
		LiteTopic: e.msg.LiteTopic, MessageID: e.msg.MessageID, Handle: e.handle, DeliveryAttempt: 1}
	bin, _ := h.MarshalBinary()
	js, _ := json.Marshal(h)
	for _, s := range []string{string(bin), string(js), h.String(), fmt.Sprintf("%v %+v %#v", h, h, h), fmt.Sprintf("%v %+v", cfg, cfg)} {
		if strings.Contains(s, secret) {
			t.Fatalf("secret leaked into %q", s)
		}
	}
	for _, s := range []string{string(bin), string(js), h.String()} {
		if strings.Contains(s, ak) {
			t.Fatalf("access key in a handle encoding: %q", s)
		}
	}
}

func FuzzReceiptHandleUnmarshal(f *testing.F) {
	good, _ := sampleHandle().MarshalBinary()
	f.Add(good)
	f.Add([]byte("RQH\x01"))
	f.Add(append([]byte("RQH\x01\x83\x00"), good[5:]...)) // non-canonical length
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h ReceiptHandle
		if err := h.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrBadHandle) {
				t.Fatalf("error %v does not wrap ErrBadHandle", err)
			}
			return
		}
		// Whatever decodes must re-encode to the same bytes.
		b2, err := h.MarshalBinary()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("decoded %+v re-encodes to %x (%v), want %x", h, b2, err, b)
		}
	})
}
