package rmqbenthos

import (
	"context"
	"errors"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestOutputSlowTopicDoesNotStallOthers: with an interpolated topic, a topic
// whose producer takes long to open (its settings go unanswered here) holds
// up only its own messages: the output held its lock across the open, so
// every other topic's batch waited for it.
func TestOutputSlowTopicDoesNotStallOthers(t *testing.T) {
	fake := rmqfake.NewForTest(t, rmqfake.Addr("127.0.0.1:0"))
	for _, topic := range []string{"slow", "fast", "late"} {
		if err := fake.CreateTopic(topic, rmqfake.TopicNormal); err != nil {
			t.Fatal(err)
		}
	}
	slowSeen, lateSeen := make(chan struct{}, 8), make(chan struct{}, 8)
	fake.Intercept("Telemetry", func(c rmqfake.Call) rmqfake.Verdict {
		cmd, _ := c.Request.(*v2.TelemetryCommand)
		for _, tp := range cmd.GetSettings().GetPublishing().GetTopics() {
			switch tp.GetName() {
			case "slow":
				select {
				case slowSeen <- struct{}{}:
				default:
				}
				return rmqfake.Verdict{Delay: time.Hour}
			case "late":
				select {
				case lateSeen <- struct{}{}:
				default:
				}
				return rmqfake.Verdict{Delay: 2 * time.Second}
			}
		}
		return rmqfake.Verdict{}
	})
	conf, err := outputSpec().ParseYAML("endpoints: "+fake.Addr()+"\nrequest_timeout: 2m\ntopic: '${! meta(\"t\") }'\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _, _, err := newOutput(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	o := out.(*output)
	msg := func(topic string) service.MessageBatch {
		m := service.NewMessage([]byte("x"))
		m.MetaSetMut("t", topic)
		return service.MessageBatch{m}
	}
	slowCtx, cancelSlow := context.WithCancel(t.Context())
	slowDone := make(chan error, 1)
	go func() { slowDone <- o.WriteBatch(slowCtx, msg("slow")) }()
	select {
	case <-slowSeen: // the slow topic's producer is opening
	case <-time.After(10 * time.Second):
		t.Fatal("the slow topic's producer settings never reached the server")
	}
	fastCtx, cancelFast := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelFast()
	if err := o.WriteBatch(fastCtx, msg("fast")); err != nil {
		t.Fatalf("a batch for another topic while one opens: %v", err)
	}
	select {
	case err := <-slowDone:
		t.Fatalf("the slow topic's batch ended (%v) before the other topic's was sent: it was not still opening", err)
	default:
	}
	if got := fake.Stats().Topics["fast"]; got.Sent != 1 {
		t.Fatalf("topic fast got %d messages, want 1", got.Sent)
	}
	cancelSlow()
	if err := <-slowDone; err == nil {
		t.Error("the slow topic's batch succeeded although its producer never opened")
	}
	// Close while a producer opens: Close waits for it, and the producer,
	// opened after Close began, is closed, not used.
	lateDone := make(chan error, 1)
	go func() { lateDone <- o.WriteBatch(t.Context(), msg("late")) }()
	select {
	case <-lateSeen:
	case <-time.After(10 * time.Second):
		t.Fatal("the late topic's producer settings never reached the server")
	}
	if err := o.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every producer told the server it left before Close returned.
	if n := fake.Stats().Sessions; n != 0 {
		t.Errorf("%d producer sessions left when Close returned (the one it overtook closed after it?)", n)
	}
	select {
	case err := <-lateDone:
		if !errors.Is(err, service.ErrNotConnected) {
			t.Errorf("a batch whose producer opened after Close began: %v, want ErrNotConnected", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late topic's batch did not end after Close")
	}
	if got := fake.Stats().Topics["late"]; got.Sent != 0 {
		t.Errorf("topic late got %d messages after Close", got.Sent)
	}
	if _, err := o.sink(t.Context(), "fast"); err != service.ErrNotConnected {
		t.Errorf("a sink after Close: %v, want ErrNotConnected", err)
	}
}
