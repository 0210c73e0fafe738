package rmqflow_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerParksOnceDespiteFailedAck: a message the dead-letter function
// parked (DeadLetterToSink returned nil) is parked once. When the ack that
// follows fails, the message comes back, and the runner acks it again
// rather than running it through the valves and parking it a second time
// (a duplicate in the user's dead-letter topic from an ordinary transient
// ack failure, as a first version did).
func TestRunnerParksOnceDespiteFailedAck(t *testing.T) {
	t.Parallel() // its own emulator; mostly waiting
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
	var failAcks atomic.Int32 // AckMessage calls still to fail
	fake.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict {
		if failAcks.Add(-1) >= 0 {
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "test: ack lost")}
		}
		return rmqfake.Verdict{}
	})
	var (
		mu     sync.Mutex
		parked int
	)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		return rmqflow.Decision{}, errors.New("cannot parse")
	}, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}})
	must(t, err)
	park := rmqflow.DeadLetterToSink[string](dlq)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		err := park(ctx, m, cause)
		if err == nil {
			mu.Lock()
			parked++
			if parked == 1 {
				failAcks.Store(3) // the ack that follows fails, retries included
			}
			mu.Unlock()
		}
		return err
	})
	rctx, stop := context.WithTimeout(ctx, 25*time.Second)
	defer stop()
	must(t, r.Run(rctx))
	mu.Lock()
	defer mu.Unlock()
	if parked != 1 {
		t.Errorf("the message was parked %d times, want once (its ack failed once after parking)", parked)
	}
}
