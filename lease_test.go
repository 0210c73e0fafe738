package rmqflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestLeasesKeepEmittedMessages: with leases on, messages emitted but not
// acked are renewed for 2.5 invisible durations (no other consumer of the
// group gets them), and the Acker acks with the newest handle.
func TestLeasesKeepEmittedMessages(t *testing.T) {
	const topic, group, n = "rmqflow-lite-lease", "rmqflow-lite-lease-g", 5
	ep := rmqtest.Endpoint(t)
	ctx := rmqtest.Context(t, 2*time.Minute)
	run := rmqtest.Unique("lease")
	sink, err := NewSink(ctx, SinkConfig{Connection: Connection{Endpoints: ep}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, Record{LiteTopic: fmt.Sprintf("%s-%d", run, i), Body: []byte("x")}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink.Close(ctx)
	src, err := NewSource(SourceConfig{Connection: Connection{Endpoints: ep}, Lite: []LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 4 * time.Second, AwaitDuration: 5 * time.Second,
		Leases: LeaseConfig{Enabled: true}}, StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	var mine []*AckableMessage[string]
	for len(mine) < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Meta.LiteTopic) > len(run) && m.Meta.LiteTopic[:len(run)] == run {
			mine = append(mine, m)
		} else {
			_ = src.Acker().Ack(ctx, m.Handle)
		}
	}
	// A rival consumer of the group polls for 25 s and must get none of them.
	rival, err := client.New(client.Config{Endpoints: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close(context.Background())
	if _, err := rival.OpenSession(ctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(25 * time.Second)
	for time.Until(deadline) > 6*time.Second {
		msgs, err := rival.Receive(ctx, client.ReceiveRequest{Group: group, Topic: topic, Lite: true, InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if len(m.LiteTopic) > len(run) && m.LiteTopic[:len(run)] == run {
				t.Fatalf("leased message %s reached another consumer (attempt %d)", m.MessageID, m.DeliveryAttempt)
			}
			_, _ = rival.Ack(ctx, group, m.Topic, []client.AckEntry{{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}})
		}
	}
	renewed := 0
	for _, m := range mine {
		if src.Acker().leases.take(m.Handle, false).Handle != m.Handle.Handle {
			renewed++
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Errorf("ack after renewals: %v", err)
		}
	}
	if renewed != n {
		t.Errorf("%d of %d leases carry a renewed handle", renewed, n)
	}
	if l := src.Acker().leases.len(); l != 0 {
		t.Errorf("%d leases left after acking", l)
	}
}
