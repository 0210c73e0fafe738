package rmqwatermill_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	rmqwatermill "github.com/rmqflow/rmqflow/integrations/watermill"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

func publish(t *testing.T, p message.Publisher, topic string, payloads ...string) []*message.Message {
	t.Helper()
	var msgs []*message.Message
	for _, b := range payloads {
		msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte(b)))
	}
	if err := p.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestNackDefersOnTheBroker: Nack is a deferral the broker keeps, not an
// in-process replay: the subscriber changes the message's invisibility, and
// the message comes back from the broker as its next delivery attempt, with
// the same UUID and payload. After Ack it does not come back.
func TestNackDefersOnTheBroker(t *testing.T) {
	for _, where := range []string{"rmqfake", "broker"} {
		t.Run(where, func(t *testing.T) {
			rmqtest.CheckGoroutines(t)
			var tg *target
			var defers atomic.Int32
			if where == "rmqfake" {
				s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
				if err := s.CreateTopic(wmTopic, rmqfake.TopicLite); err != nil {
					t.Fatal(err)
				}
				if err := s.CreateGroup(wmGroup, rmqfake.LiteBind(wmTopic)); err != nil {
					t.Fatal(err)
				}
				s.Intercept("ChangeInvisibleDuration", func(rmqfake.Call) rmqfake.Verdict {
					defers.Add(1)
					return rmqfake.Verdict{}
				})
				tg = &target{endpoint: s.Addr(), mode: rmqflow.ModeLite}
			} else {
				tg = &target{endpoint: realBroker(t), mode: rmqflow.ModeLite}
			}
			topic := rmqtest.Unique("nack")
			pub := tg.publisher(t)
			defer pub.Close()
			sent := publish(t, pub, topic, "a", "b")
			sub := tg.subscriber(t, wmGroup)
			ch, err := sub.Subscribe(ctxT(t), topic)
			if err != nil {
				t.Fatal(err)
			}
			first := receive(t, ch, 30*time.Second)
			if first.UUID != sent[0].UUID || string(first.Payload) != "a" || first.Metadata.Get(rmqwatermill.MetaDeliveryAttempt) != "1" {
				t.Fatalf("first delivery: %s %q attempt %s", first.UUID, first.Payload, first.Metadata.Get(rmqwatermill.MetaDeliveryAttempt))
			}
			first.Nack()
			// In lite mode the nacked head holds its lite topic back: "a"
			// again, before "b".
			again := receive(t, ch, 30*time.Second)
			if again.UUID != sent[0].UUID || again.Metadata.Get(rmqwatermill.MetaDeliveryAttempt) == "1" {
				t.Fatalf("after Nack got %s %q attempt %s; want %s again as a later attempt", again.UUID, again.Payload,
					again.Metadata.Get(rmqwatermill.MetaDeliveryAttempt), sent[0].UUID)
			}
			if where == "rmqfake" && defers.Load() == 0 {
				t.Fatal("Nack made no ChangeInvisibleDuration: the message was replayed in process, not deferred on the broker")
			}
			again.Ack()
			next := receive(t, ch, 30*time.Second)
			if next.UUID != sent[1].UUID {
				t.Fatalf("after Ack got %s %q, want b", next.UUID, next.Payload)
			}
			next.Ack()
			if err := sub.Close(); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, ch, 10*time.Second)
		})
	}
}

// TestCloseLosesNothing: a subscription closed with a message handed out and
// never acked, and others fetched but not handed out, gives them all back:
// a new subscriber of the group receives every message (lost = 0).
func TestCloseLosesNothing(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	tg := fakeTarget(t, rmqflow.ModeLite)
	tg.tune = func(c *rmqwatermill.SubscriberConfig) { c.CloseTimeout = 200 * time.Millisecond }
	group := tg.group(t, "close-g")
	topic := rmqtest.Unique("close")
	pub := tg.publisher(t)
	defer pub.Close()
	sent := publish(t, pub, topic, "1", "2", "3")

	sub := tg.subscriber(t, group)
	ch, err := sub.Subscribe(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, ch, 10*time.Second) // never acked
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case <-held.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the held message's context was not cancelled when Close began")
	}
	expectClosed(t, ch, 10*time.Second)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}

	sub2 := tg.subscriber(t, group)
	defer sub2.Close()
	ch2, err := sub2.Subscribe(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range sent {
		m := receive(t, ch2, 30*time.Second)
		if m.UUID != want.UUID {
			t.Fatalf("message %d after the restart: %s %q, want %s (in order, none lost)", i, m.UUID, m.Payload, want.UUID)
		}
		m.Ack()
	}
}

// TestSubscribeFailsAtOnce: a subscription the broker refuses fails in
// Subscribe with the broker's typed error, not later on the channel.
func TestSubscribeFailsAtOnce(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t)
	if err := s.CreateGroup("g"); err != nil {
		t.Fatal(err)
	}
	sub, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{
		Connection: rmqflow.Connection{Endpoints: s.Addr()}, Mode: rmqflow.ModeSimple, Group: "g"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	_, err = sub.Subscribe(ctxT(t), "no-such-topic")
	if !errors.Is(err, client.ErrTopicNotFound) || !strings.Contains(err.Error(), "no-such-topic") {
		t.Fatalf("Subscribe to an unknown topic: %v, want TOPIC_NOT_FOUND naming it", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(ctxT(t), "t"); !errors.Is(err, rmqwatermill.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
}

// TestMetadataRoundTrip: metadata travel as user properties; the tag and
// keys keys set the message's tag and keys; the rocketmq_ keys of a received
// message that describe its delivery (handle, message id, attempt) are not
// sent on when it is published again.
func TestMetadataRoundTrip(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	tg := fakeTarget(t, rmqflow.ModeLite)
	tg.tune = func(c *rmqwatermill.SubscriberConfig) {
		c.Unmarshaler = rmqwatermill.DefaultMarshaler{WithHandle: true}
	}
	group := tg.group(t, "meta-g")
	pub := tg.publisher(t)
	defer pub.Close()
	in, out := rmqtest.Unique("in"), rmqtest.Unique("out")
	msg := message.NewMessage(watermill.NewUUID(), []byte("body"))
	msg.Metadata.Set("tenant", "acme")
	msg.Metadata.Set(rmqwatermill.MetaTag, "t1")
	msg.Metadata.Set(rmqwatermill.MetaKeys, "k1 k2")
	// As a FIFO message received elsewhere would carry: a lite message has
	// no group, so the publisher drops it rather than fail the send.
	msg.Metadata.Set(rmqwatermill.MetaMessageGroup, "grp")
	if err := pub.Publish(in, msg); err != nil {
		t.Fatal(err)
	}
	sub := tg.subscriber(t, group)
	defer sub.Close()
	ch, err := sub.Subscribe(ctxT(t), in)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch, 10*time.Second)
	for k, want := range map[string]string{"tenant": "acme", rmqwatermill.MetaTag: "t1", rmqwatermill.MetaKeys: "k1 k2",
		rmqwatermill.MetaLiteTopic: in, rmqwatermill.MetaTopic: wmTopic, rmqwatermill.MetaDeliveryAttempt: "1"} {
		if v := got.Metadata.Get(k); v != want {
			t.Errorf("metadata %s = %q, want %q", k, v, want)
		}
	}
	if v := got.Metadata.Get(rmqwatermill.MetaMessageGroup); v != "" {
		t.Errorf("a lite message arrived with message group %q", v)
	}
	if got.UUID != msg.UUID || string(got.Payload) != "body" {
		t.Errorf("got %s %q, want %s body", got.UUID, got.Payload, msg.UUID)
	}
	if _, ok := got.Metadata[rmqwatermill.UUIDProperty]; ok {
		t.Errorf("the UUID property shows as metadata")
	}
	var h rmqflow.ReceiptHandle
	if err := h.UnmarshalJSON([]byte(got.Metadata.Get(rmqwatermill.MetaHandle))); err != nil || h.Handle == "" {
		t.Fatalf("handle metadata %q: %v", got.Metadata.Get(rmqwatermill.MetaHandle), err)
	}
	// Forward the received message as is.
	if err := pub.Publish(out, got); err != nil {
		t.Fatal(err)
	}
	got.Ack()
	ch2, err := sub.Subscribe(ctxT(t), out)
	if err != nil {
		t.Fatal(err)
	}
	fwd := receive(t, ch2, 10*time.Second)
	defer fwd.Ack()
	if fwd.Metadata.Get("tenant") != "acme" || fwd.Metadata.Get(rmqwatermill.MetaTag) != "t1" || fwd.Metadata.Get(rmqwatermill.MetaLiteTopic) != out {
		t.Errorf("forwarded metadata %v", fwd.Metadata)
	}
	if fwd.Metadata.Get(rmqwatermill.MetaMessageID) == got.Metadata.Get(rmqwatermill.MetaMessageID) {
		t.Errorf("the forwarded message kept the received one's message id")
	}
	if fwd.Metadata.Get(rmqwatermill.MetaHandle) == got.Metadata.Get(rmqwatermill.MetaHandle) {
		t.Errorf("the forwarded message carries the received one's handle")
	}
}

// TestDeadLetterAfterValves: a message nacked until a valve fires goes to
// DeadLetter with ErrNacked as the cause, and is then acked: it does not
// come back.
func TestDeadLetterAfterValves(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	tg := fakeTarget(t, rmqflow.ModeLite)
	var mu sync.Mutex
	var parked []*message.Message
	var causes []error
	tg.tune = func(c *rmqwatermill.SubscriberConfig) {
		c.NackBackoff, c.NackBackoffMax = 10*time.Millisecond, 10*time.Millisecond
		c.Valves = rmqflow.ThrottleConfig{MaxDefers: 2}
		c.DeadLetter = func(_ context.Context, m *message.Message, cause error) error {
			mu.Lock()
			defer mu.Unlock()
			parked, causes = append(parked, m), append(causes, cause)
			return nil
		}
	}
	group := tg.group(t, "dl-g")
	topic := rmqtest.Unique("dl")
	pub := tg.publisher(t)
	defer pub.Close()
	sent := publish(t, pub, topic, "poison", "next")
	sub := tg.subscriber(t, group)
	defer sub.Close()
	ch, err := sub.Subscribe(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	nacks := 0
	for {
		m := receive(t, ch, 30*time.Second)
		if m.UUID == sent[1].UUID {
			m.Ack()
			break
		}
		nacks++
		m.Nack()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(parked) != 1 || parked[0].UUID != sent[0].UUID || !errors.Is(causes[0], rmqwatermill.ErrNacked) {
		t.Fatalf("dead-lettered %d messages (causes %v), want the poison one with ErrNacked", len(parked), causes)
	}
	if nacks != 3 {
		t.Fatalf("the poison message was handed out %d times before DeadLetter, want 3 (MaxDefers 2 deferrals, then the valve)", nacks)
	}
}

// TestConfigErrors: a configuration that cannot work fails in the
// constructor with an error naming the field.
func TestConfigErrors(t *testing.T) {
	conn := rmqflow.Connection{Endpoints: "127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"publisher lite without main topic", func() error {
			_, err := rmqwatermill.NewPublisher(rmqwatermill.PublisherConfig{Sink: rmqflow.SinkConfig{Connection: conn}})
			return err
		}(), "MainTopic"},
		{"publisher with a sink topic", func() error {
			_, err := rmqwatermill.NewPublisher(rmqwatermill.PublisherConfig{Sink: rmqflow.SinkConfig{Connection: conn, Topic: "t"}, MainTopic: "m"})
			return err
		}(), "Sink.Topic"},
		{"subscriber lite with two bindings", func() error {
			_, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{Connection: conn,
				Lite: []rmqflow.LiteBinding{{Topic: "a", Group: "g"}, {Topic: "b", Group: "g"}}}})
			return err
		}(), "exactly one binding"},
		{"subscriber lite with lite topics", func() error {
			_, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{Connection: conn,
				Lite: []rmqflow.LiteBinding{{Topic: "a", Group: "g", LiteTopics: []string{"x"}}}}})
			return err
		}(), "LiteTopics"},
		{"subscriber with DeadLetter and DeadLetterTopic", func() error {
			_, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{Connection: conn,
				Lite: []rmqflow.LiteBinding{{Topic: "a", Group: "g"}}}, DeadLetterTopic: "parked",
				DeadLetter: func(context.Context, *message.Message, error) error { return nil }})
			return err
		}(), "DeadLetterTopic"},
		{"subscriber dropping what it would park", func() error {
			_, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{Connection: conn,
				Lite: []rmqflow.LiteBinding{{Topic: "a", Group: "g"}}}, DeadLetterTopic: "parked",
				Valves: rmqflow.ThrottleConfig{OnValve: rmqflow.ValveAck}})
			return err
		}(), "OnValve"},
		{"subscriber simple without group", func() error {
			_, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{Connection: conn, Mode: rmqflow.ModeSimple}})
			return err
		}(), "Group"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, tc.err, tc.want)
		}
	}
}

// failingUnmarshaler fails on the body "undecodable".
type failingUnmarshaler struct{ rmqwatermill.DefaultMarshaler }

func (f failingUnmarshaler) Unmarshal(m *rmqflow.AckableMessage[[]byte]) (*message.Message, error) {
	if string(m.Value) == "undecodable" {
		return nil, errors.New("not our format")
	}
	return f.DefaultMarshaler.Unmarshal(m)
}

// TestUndecodableReachesDeadLetter: a delivery the Unmarshaler fails on never
// reaches the handler; it is deferred until a valve fires and then reaches
// DeadLetter raw (body, message id as UUID, the error in metadata), instead
// of being deferred for ever; the message behind it in its lite topic is
// handled after it.
func TestUndecodableReachesDeadLetter(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	tg := fakeTarget(t, rmqflow.ModeLite)
	parked := make(chan *message.Message, 1)
	tg.tune = func(c *rmqwatermill.SubscriberConfig) {
		c.Unmarshaler = failingUnmarshaler{}
		c.NackBackoff, c.NackBackoffMax = 10*time.Millisecond, 10*time.Millisecond
		c.Valves = rmqflow.ThrottleConfig{MaxDefers: 1}
		c.DeadLetter = func(_ context.Context, m *message.Message, _ error) error {
			parked <- m
			return nil
		}
	}
	group := tg.group(t, "undecodable-g")
	topic := rmqtest.Unique("undec")
	pub := tg.publisher(t)
	defer pub.Close()
	sent := publish(t, pub, topic, "undecodable", "fine")
	sub := tg.subscriber(t, group)
	defer sub.Close()
	ch, err := sub.Subscribe(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	next := receive(t, ch, 30*time.Second)
	if next.UUID != sent[1].UUID {
		t.Fatalf("the handler got %s %q, want only the decodable message", next.UUID, next.Payload)
	}
	next.Ack()
	select {
	case m := <-parked:
		if string(m.Payload) != "undecodable" || m.Metadata.Get(rmqwatermill.MetaUnmarshalError) == "" ||
			m.UUID != m.Metadata.Get(rmqwatermill.MetaMessageID) {
			t.Fatalf("DeadLetter got %s %q %v", m.UUID, m.Payload, m.Metadata)
		}
	default:
		t.Fatal("the undecodable message never reached DeadLetter, though the one behind it was handled")
	}
}

// TestReservedPropertiesNotMetadata: a producer's properties named like the
// delivery's metadata (rocketmq_dead_lettered, rocketmq_lite_topic,
// rocketmq_handle) do not reach the message's metadata: they would pass for
// the broker's word.
func TestReservedPropertiesNotMetadata(t *testing.T) {
	m := &rmqflow.AckableMessage[[]byte]{Value: []byte("x"), Meta: rmqflow.Metadata{Topic: "t", MessageID: "id1", DeliveryAttempt: 1,
		Properties: map[string]string{"rocketmq_dead_lettered": "true", "rocketmq_lite_topic": "other", "rocketmq_handle": "{}", "kept": "yes", "rocketmq_TRANSACTION_ID": "t1"}}}
	msg, err := rmqwatermill.DefaultMarshaler{}.Unmarshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rocketmq_dead_lettered", "rocketmq_lite_topic", "rocketmq_handle"} {
		if v := msg.Metadata.Get(k); v != "" {
			t.Errorf("metadata %s = %q from a producer's property", k, v)
		}
	}
	if msg.Metadata.Get("kept") != "yes" || msg.Metadata.Get("rocketmq_topic") != "t" || msg.Metadata.Get("rocketmq_TRANSACTION_ID") != "t1" {
		t.Errorf("metadata %v: want the user property kept and the delivery's own", msg.Metadata)
	}
}
