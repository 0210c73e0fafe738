package rmqflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestDeadLetterToSinkDropsSystemProperties: DeadLetterToSink does not copy
// the broker-reserved properties of the received message, such as a lite
// message's INNER_MULTI_DISPATCH. The broker acts on that property when a
// message carries it (client.IsSystemProperty; scenario g: it is why a DLQ
// copy is dispatched into its lite topic again), so a parked copy carrying
// it would go back into the original lite topic on the real broker: not
// parked at all. rmqfake does not act on it for a plain send, so this test
// checks the properties themselves.
func TestDeadLetterToSinkDropsSystemProperties(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	fake := fakeLite(t)
	must(t, fake.CreateTopic("parked", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("parked-g"))
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	must(t, err)
	defer sink.Close(context.Background())
	dlq, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "parked"})
	must(t, err)
	defer dlq.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "k", Body: []byte("poison")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	parkedOnce := make(chan struct{})
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		return rmqflow.Decision{}, errors.New("cannot parse")
	}, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}})
	must(t, err)
	park := rmqflow.DeadLetterToSink[string](dlq)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		err := park(ctx, m, cause)
		if err == nil {
			close(parkedOnce)
		}
		return err
	})
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-parkedOnce:
	case <-ctx.Done():
		t.Fatal("never parked")
	}
	stop()
	must(t, <-ran)
	parked, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Mode: rmqflow.ModeSimple, Topic: "parked", Group: "parked-g",
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	defer parked.Close(context.Background())
	must(t, parked.Start(ctx))
	m, err := parked.Next(ctx)
	must(t, err)
	for k, v := range m.Meta.Properties {
		if client.IsSystemProperty(k) {
			t.Errorf("the parked copy carries the broker-reserved property %s=%q", k, v)
		}
	}
}
