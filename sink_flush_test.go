package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// holdBodies makes s hold each SendMessage call carrying a body of delays
// for that long of s's clock (a manual clock holds it until it is advanced),
// and reports each such body on wire once its call arrived.
func holdBodies(s *rmqfake.Server, delays map[string]time.Duration) (wire <-chan string) {
	ch := make(chan string, 16)
	s.Intercept("SendMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, m := range c.Request.(*v2.SendMessageRequest).GetMessages() {
			if d, ok := delays[string(m.GetBody())]; ok {
				ch <- string(m.GetBody())
				return rmqfake.Verdict{Delay: d}
			}
		}
		return rmqfake.Verdict{}
	})
	return ch
}

// TestSinkFlushWaitsOnlyForEarlierRecords: Flush waits for the records
// written before it began, not for those written meanwhile. r0 is on the wire
// when Flush begins; r1, written after, stays on the wire for good. Flush
// returns once r0 has its result.
func TestSinkFlushWaitsOnlyForEarlierRecords(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	clk := rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := rmqfake.NewForTest(t, rmqfake.WithClock(clk))
	must(t, s.CreateTopic("t", rmqfake.TopicNormal))
	wire := holdBodies(s, map[string]time.Duration{"r0": time.Second, "r1": time.Hour})
	ctx := rmqtest.Context(t, time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), RequestTimeout: time.Minute},
		Topic: "t", Concurrency: 2, BatchSize: 1, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // r1 stays on the wire: Close gives up on it at once
		cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_ = sink.Close(cctx)
	}()
	base := clk.Pending() // timers on the clock before r0 and r1 are held
	r0 := sink.Write(ctx, rmqflow.Record{Body: []byte("r0")})
	if b := <-wire; b != "r0" {
		t.Fatalf("on the wire: %s", b)
	}
	sealed := make(chan struct{})
	var once sync.Once
	rmqflow.SetSinkFlushHook(sink, func() { once.Do(func() { close(sealed) }) })
	flushed := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		flushed <- sink.Flush(fctx)
	}()
	<-sealed
	r1 := sink.Write(ctx, rmqflow.Record{Body: []byte("r1")})
	if b := <-wire; b != "r1" {
		t.Fatalf("on the wire: %s", b)
	}
	// Both holds on the clock (the fake arms a hold after its interceptor
	// returned) before it moves.
	if err := clk.WaitPending(ctx, base+2); err != nil {
		t.Fatalf("r0 and r1 held on the clock: %v (%d timers)", err, clk.Pending())
	}
	clk.Advance(2 * time.Second) // r0's delay ends; r1's does not
	if err := <-flushed; err != nil {
		t.Fatalf("Flush: %v (it waited for r1, written after it began)", err)
	}
	if _, err := r0.Wait(ctx); err != nil {
		t.Fatalf("r0: %v", err)
	}
	select {
	case <-r1.Done():
		t.Fatal("r1 has a result: its call was to stay on the wire")
	default:
	}
}

// TestSinkFlushConcurrentWithWrite: Flush with short deadlines while writers
// write never panics (it once shared a WaitGroup with Write: Add during Wait),
// leaves no goroutine behind, and every record gets its result.
func TestSinkFlushConcurrentWithWrite(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic("t", rmqfake.TopicNormal))
	ctx := rmqtest.Context(t, time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "t", Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 300
	var wg sync.WaitGroup
	futures := make([][]*rmqflow.SendFuture, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				futures[w] = append(futures[w], sink.Write(ctx, rmqflow.Record{Body: []byte(fmt.Sprint(w, "-", i))}))
			}
		}()
	}
	stop := make(chan struct{})
	flushes := make(chan int)
	go func() {
		n := 0
		defer func() { flushes <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			fctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			if err := sink.Flush(fctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Flush: %v", err)
			}
			cancel()
			n++
		}
	}()
	wg.Wait()
	close(stop)
	n := <-flushes
	if err := sink.Flush(ctx); err != nil {
		t.Fatalf("final Flush: %v", err)
	}
	for w := range writers {
		for i, f := range futures[w] {
			select {
			case <-f.Done():
			default:
				t.Fatalf("record %d-%d has no result after Flush", w, i)
			}
			if _, err := f.Result(); err != nil {
				t.Fatalf("record %d-%d: %v", w, i, err)
			}
		}
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Topics["t"].Sent; got != writers*each {
		t.Fatalf("stored %d of %d", got, writers*each)
	}
	t.Logf("%d flushes beside %d writes", n, writers*each)
}

// TestSinkWaitTimeoutKeepsTheID: a Wait whose ctx ends before the result
// returns the id the record was accepted under, with ctx's error: the record
// is still being sent and may be stored under that id, which the final
// result reports.
func TestSinkWaitTimeoutKeepsTheID(t *testing.T) {
	_, _, sink, fs := stalledSink(t)
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	id, err := fs[0].Wait(wctx)
	if !errors.Is(err, context.DeadlineExceeded) || id == "" {
		t.Fatalf("Wait = %q, %v; want the accepted id and DeadlineExceeded", id, err)
	}
	// Close gives up on the held call at once: the result is a failure
	// under the id Wait reported.
	cctx, ccancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer ccancel()
	_ = sink.Close(cctx)
	final, err := fs[0].Result()
	if !errors.Is(err, rmqflow.ErrSinkClosed) || final != id {
		t.Fatalf("result %q, %v; want %q and ErrSinkClosed", final, err, id)
	}
}

// TestSinkMaxAttemptsAcrossIsolation: MaxAttempts bounds the calls that may
// store a record. r1 and r2 share a call that fails retriably (it may have
// stored them), then one refused as a whole (which stores nothing), then go
// one per call; r1 keeps failing retriably. With MaxAttempts 3, r1 is sent
// 4 times: 3 calls that may store it and the refused one. Before, the
// isolation started its count afresh and r1 went 5 times.
func TestSinkMaxAttemptsAcrossIsolation(t *testing.T) {
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic("t", rmqfake.TopicNormal))
	var mu sync.Mutex
	calls := map[string]int{} // body -> calls carrying it
	batchCalls := 0
	s.Intercept("SendMessage", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		defer mu.Unlock()
		msgs := c.Request.(*v2.SendMessageRequest).GetMessages()
		for _, m := range msgs {
			calls[string(m.GetBody())]++
		}
		if len(msgs) > 1 {
			batchCalls++
			if batchCalls == 1 {
				return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "try again")}
			}
			return rmqfake.Verdict{Err: status.Error(codes.InvalidArgument, "one bad record refuses the call")}
		}
		if string(msgs[0].GetBody()) == "r1" {
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "try again")}
		}
		return rmqfake.Verdict{}
	})
	ctx := rmqtest.Context(t, time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Topic: "t", Concurrency: 1, BatchSize: 2, Linger: time.Minute, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	ids, errs := sink.Send(ctx, rmqflow.Record{Body: []byte("r1")}, rmqflow.Record{Body: []byte("r2")})
	if errs[0] == nil || errs[1] != nil {
		t.Fatalf("results %v, %v; want r1 failed, r2 stored", errs[0], errs[1])
	}
	mu.Lock()
	defer mu.Unlock()
	if batchCalls != 2 || calls["r1"] != 4 || calls["r2"] != 3 {
		t.Fatalf("%d batch calls; r1 in %d calls, r2 in %d; want 2, 4 (3 that may store it) and 3", batchCalls, calls["r1"], calls["r2"])
	}
	if ids[1] == "" {
		t.Fatal("r2 has no id")
	}
}

// TestSinkWriteWithEndedContextSendsNothing: a Write whose ctx has ended
// queues nothing, even with room in the queue: the caller gave up, and a
// record sent anyway while its future reports the ctx's error would be a
// duplicate when the caller writes it again (a Watermill poison queue
// publishing on a cancelled message context did so).
func TestSinkWriteWithEndedContextSendsNothing(t *testing.T) {
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic("t", rmqfake.TopicNormal))
	ctx := rmqtest.Context(t, time.Minute)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	f := sink.Write(ended, rmqflow.Record{Body: []byte("late")})
	id, err := f.Wait(ctx)
	if !errors.Is(err, context.Canceled) || id != "" {
		t.Fatalf("Write with an ended ctx: %q, %v; want no id and context.Canceled", id, err)
	}
	if _, err := sink.Write(ctx, rmqflow.Record{Body: []byte("next")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Topics["t"].Sent; n != 1 {
		t.Fatalf("%d messages stored, want only the one written with a live ctx", n)
	}
}
