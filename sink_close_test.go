package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// stalledSink starts rmqfake (manual clock) with topic "t" and a sink of one
// sender and a queue of one record whose SendMessage calls the fake holds for
// an hour of its clock. It returns once the first record is on the wire and
// a second fills the queue; calls reports every SendMessage the fake saw.
func stalledSink(t *testing.T) (*rmqfake.Server, *rmqfake.ManualClock, *rmqflow.Sink, []*rmqflow.SendFuture) {
	t.Helper()
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := rmqfake.NewForTest(t, rmqfake.WithClock(clk))
	if err := s.CreateTopic("t", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	onWire := make(chan struct{}, 16)
	s.Intercept("SendMessage", func(rmqfake.Call) rmqfake.Verdict {
		select {
		case onWire <- struct{}{}:
		default:
		}
		return rmqfake.Verdict{Delay: time.Hour}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), RequestTimeout: time.Minute},
		Topic: "t", Concurrency: 1, BatchSize: 1, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close(context.Background()) })
	first := sink.Write(ctx, rmqflow.Record{Body: []byte("first")})
	select {
	case <-onWire:
	case <-ctx.Done():
		t.Fatal("the first record never reached the fake")
	}
	queued := sink.Write(ctx, rmqflow.Record{Body: []byte("queued")})
	return s, clk, sink, []*rmqflow.SendFuture{first, queued}
}

// blockedWrites starts n writers on a full sink and returns their futures
// once every writer is about to call Write (they then block: the queue is
// full).
func blockedWrites(sink *rmqflow.Sink, n int) func() []*rmqflow.SendFuture {
	var wg sync.WaitGroup
	started := make(chan struct{}, n)
	out := make([]*rmqflow.SendFuture, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			out[i] = sink.Write(context.Background(), rmqflow.Record{Body: []byte(fmt.Sprint("blocked-", i))})
		}()
	}
	for range n {
		<-started
	}
	return func() []*rmqflow.SendFuture { wg.Wait(); return out }
}

// TestSinkCloseWithDeadlineUnderBackpressure (issue 8, #3): Close with a
// short deadline while Writes are blocked on a full queue and the broker
// stalls. Close must not panic ("send on closed channel"), must return by
// about its deadline, every blocked Write ends with ErrSinkClosed, and every
// record accepted before Close has a result when Close returns (sent or
// failed, never dropped): none is stored without being reported sent.
func TestSinkCloseWithDeadlineUnderBackpressure(t *testing.T) {
	s, _, sink, accepted := stalledSink(t)
	wait := blockedWrites(sink, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// More writers race with Close itself.
	waitRacing := blockedWrites(sink, 8)
	start := time.Now()
	err := sink.Close(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close with a 100 ms deadline took %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close past its deadline: %v, want DeadlineExceeded", err)
	}
	for i, f := range append(wait(), waitRacing()...) {
		select {
		case <-f.Done():
		default:
			t.Fatalf("blocked write %d has no result after Close", i)
		}
		if _, err := f.Result(); err != nil && !errors.Is(err, rmqflow.ErrSinkClosed) {
			t.Errorf("blocked write %d: %v, want ErrSinkClosed or success", i, err)
		}
	}
	sent := 0
	for i, f := range accepted {
		select {
		case <-f.Done():
		default:
			t.Fatalf("accepted record %d has no result after Close returned", i)
		}
		id, err := f.Result()
		if err == nil {
			sent++
		} else if !errors.Is(err, rmqflow.ErrSinkClosed) {
			t.Errorf("accepted record %d failed with %v, want an error wrapping ErrSinkClosed", i, err)
		}
		if id == "" {
			t.Errorf("accepted record %d has no message id", i)
		}
	}
	if got := s.Stats().Topics["t"].Sent; got != int64(sent) {
		t.Errorf("the fake stored %d messages, the sink reported %d sent", got, sent)
	}
	if _, err := sink.Write(context.Background(), rmqflow.Record{Body: []byte("late")}).Result(); !errors.Is(err, rmqflow.ErrSinkClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

// TestSinkCloseSendsWhatItAccepted: Close without a deadline fails the
// Writes blocked on the full queue at once with ErrSinkClosed and then sends
// every record it had accepted, once the broker answers.
func TestSinkCloseSendsWhatItAccepted(t *testing.T) {
	s, clk, sink, accepted := stalledSink(t)
	blocked := blockedWrites(sink, 4)
	closed := make(chan error, 1)
	go func() { closed <- sink.Close(context.Background()) }()
	for _, f := range blocked() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := f.Wait(ctx)
		cancel()
		if !errors.Is(err, rmqflow.ErrSinkClosed) {
			t.Fatalf("write blocked on a full queue during Close: %v, want ErrSinkClosed", err)
		}
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the accepted records were sent", err)
	default:
	}
	// Let the broker answer: the held call, then the queued record's call
	// once it is held in turn.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range accepted {
		if err := clk.WaitPending(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return after the broker answered")
	}
	for i, f := range accepted {
		if id, err := f.Result(); err != nil || id == "" {
			t.Errorf("accepted record %d: %q, %v; want sent", i, id, err)
		}
	}
	if got := s.Stats().Topics["t"].Sent; got != int64(len(accepted)) {
		t.Errorf("the fake stored %d messages, want %d", got, len(accepted))
	}
}
