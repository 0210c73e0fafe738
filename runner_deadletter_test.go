package rmqflow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerDeadLetterFailureRetries: docs/grpc-connector.md says the
// dead-letter function's message is acked when the function returns nil and
// retried later when it fails. Here it fails once, panics once (recovered:
// a failure too), then returns nil. Nothing acks the message before the nil;
// each retry comes after the deferral of min(ErrorBackoffMax,
// MaxDeferDuration) (300 ms), well before the 10 s invisibility would have
// brought it back, and after the handler failed again on the returned
// message; the message is acked once, after the nil.
func TestRunnerDeadLetterFailureRetries(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	fake := fakeLite(t)
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	ctx := rmqtest.Context(t, 30*time.Second)

	const backoffMax = 300 * time.Millisecond
	var (
		mu      sync.Mutex
		id      string      // the message's id, once the handler saw it
		calls   []time.Time // dead-letter calls
		ok      bool        // the dead-letter function is returning nil
		handled int         // handler calls
		early   int         // ack entries for id before that
		acks    int         // ack entries for id in all
		settled = make(chan struct{})
	)
	fake.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Request.(*v2.AckMessageRequest).GetEntries() {
			if id == "" || e.GetMessageId() != id {
				continue
			}
			acks++
			if !ok {
				early++
			}
			if acks == 1 && ok {
				close(settled)
			}
		}
		return rmqfake.Verdict{}
	})

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		mu.Lock()
		id = m.Meta.MessageID
		handled++
		mu.Unlock()
		return rmqflow.Decision{}, errors.New("always fails")
	}, rmqflow.RunnerConfig{ErrorBackoff: 100 * time.Millisecond, ErrorBackoffMax: backoffMax,
		ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}})
	must(t, err)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		if acks > 0 {
			t.Errorf("dead-letter call %d: the message was already acked %d times", n, acks)
		}
		ok = n == 3
		mu.Unlock()
		switch n {
		case 1:
			return errors.New("parking failed")
		case 2:
			panic("parking panicked")
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	must(t, err)
	defer sink.Close(context.Background())
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "a", Body: []byte("m")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settled:
	case <-ctx.Done():
		t.Error("the message was not acked after the dead-letter function returned nil")
	}
	time.Sleep(500 * time.Millisecond) // a second ack would come now
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("dead-letter function called %d times, want 3 (error, panic, nil)", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap < backoffMax*8/10 || gap > 5*time.Second {
			t.Errorf("dead-letter call %d came %v after the one before, want about ErrorBackoffMax (%v), not the 10 s invisibility", i+1, gap, backoffMax)
		}
	}
	if handled != 4 {
		t.Errorf("handler called %d times, want 4: once deferred, then once before each dead-letter call (the message comes back through it)", handled)
	}
	if early != 0 || acks != 1 {
		t.Errorf("ack entries for the message: %d before the function returned nil, %d in all; want 0 and 1", early, acks)
	}
	if st := fake.Stats().Groups["g"]; st.Acked != 1 || st.InFlight != 0 || st.Backlog != 0 {
		t.Errorf("group counts %+v, want the one message acked", st.Counts)
	}
}
