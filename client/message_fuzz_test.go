package client

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fullMessage is a received message with every field fromProto reads set.
func fullMessage() *v2.Message {
	s := func(v string) *string { return &v }
	return &v2.Message{
		Topic:          &v2.Resource{ResourceNamespace: "ns", Name: "main"},
		UserProperties: map[string]string{"p": "1", "": ""},
		SystemProperties: &v2.SystemProperties{
			Tag: s("t"), Keys: []string{"k1", "k2"}, MessageId: "01ABCDEF", BodyDigest: &v2.Digest{Type: v2.DigestType_CRC32, Checksum: "0"},
			BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_LITE,
			BornTimestamp: timestamppb.New(time.Unix(1700000000, 5)), BornHost: "h",
			StoreTimestamp: timestamppb.New(time.Unix(1700000001, 0)), StoreHost: "broker-a",
			DeliveryTimestamp: timestamppb.New(time.Unix(1700000002, 0)), ReceiptHandle: s("0 1 2 3"),
			QueueId: 3, QueueOffset: proto.Int64(99), InvisibleDuration: durationpb.New(30 * time.Second), DeliveryAttempt: s2i(2),
			MessageGroup: s("g"), LiteTopic: s("session-1"),
			DeadLetterQueue: &v2.DeadLetterQueue{Topic: "%DLQ%g", MessageId: "01FEDCBA"},
		},
		Body: []byte("body"),
	}
}

func s2i(v int32) *int32 { return &v }

// FuzzReceivedMessageFromProto feeds arbitrary proto bytes, as a broker
// could send them in a ReceiveMessageResponse, to the conversion into a
// ReceivedMessage: it never panics and copies every field it reads as the
// proto holds it (timestamps and durations included, whatever their range).
func FuzzReceivedMessageFromProto(f *testing.F) {
	full, err := proto.Marshal(fullMessage())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte{})
	bad := fullMessage()
	bad.SystemProperties.BornTimestamp = &timestamppb.Timestamp{Seconds: -1 << 62, Nanos: -5}
	bad.SystemProperties.InvisibleDuration = &durationpb.Duration{Seconds: 1 << 62, Nanos: 2e9}
	bad.SystemProperties.DeliveryAttempt = s2i(-7)
	b, _ := proto.Marshal(bad)
	f.Add(b)
	f.Add(full[:len(full)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		var m v2.Message
		if err := proto.Unmarshal(b, &m); err != nil {
			return
		}
		rm := fromProto(&m)
		sp := m.GetSystemProperties()
		want := []any{m.GetTopic().GetName(), sp.GetLiteTopic(), sp.GetMessageId(), sp.GetTag(), sp.GetMessageGroup(),
			sp.GetReceiptHandle(), sp.GetDeliveryAttempt(), sp.GetBornHost(), sp.GetQueueId(), sp.GetQueueOffset(),
			sp.GetDeadLetterQueue().GetTopic(), sp.GetDeadLetterQueue().GetMessageId()}
		got := []any{rm.Topic, rm.LiteTopic, rm.MessageID, rm.Tag, rm.MessageGroup,
			rm.ReceiptHandle, rm.DeliveryAttempt, rm.BornHost, rm.QueueID, rm.QueueOffset,
			rm.DeadLetterTopic, rm.DeadLetterMessageID}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fromProto: got %v, want %v", got, want)
		}
		if !bytes.Equal(rm.Body, m.GetBody()) || len(rm.Keys) != len(sp.GetKeys()) || len(rm.Properties) != len(m.GetUserProperties()) {
			t.Fatalf("fromProto lost body, keys or properties: %+v", rm)
		}
		if d := sp.GetInvisibleDuration(); d != nil && rm.InvisibleDuration != d.AsDuration() {
			t.Fatalf("invisible duration %v, want %v", rm.InvisibleDuration, d.AsDuration())
		}
		for _, c := range []struct {
			got time.Time
			ts  *timestamppb.Timestamp
		}{{rm.BornTime, sp.GetBornTimestamp()}, {rm.StoreTime, sp.GetStoreTimestamp()}, {rm.DeliveryTime, sp.GetDeliveryTimestamp()}} {
			if c.ts == nil && !c.got.IsZero() || c.ts != nil && !c.got.Equal(c.ts.AsTime()) {
				t.Fatalf("timestamp %v became %v", c.ts, c.got)
			}
		}
	})
}
