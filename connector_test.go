package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

func conn(t *testing.T) rmqflow.Connection {
	return rmqflow.Connection{Endpoints: rmqtest.Endpoint(t)}
}

// produce sends n messages of run spread over k lite topics "<run>-<i%k>"
// with body "<i>", through a Sink.
func produce(t *testing.T, topic, run string, n, k int) {
	t.Helper()
	ctx := rmqtest.Context(t, 60*time.Second)
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(t), Topic: topic, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	fs := make([]*rmqflow.SendFuture, n)
	for i := range fs {
		fs[i] = sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", run, i%k), Body: []byte(fmt.Sprint(i))})
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// drainOthers acks what a raw consumer of group finds, and fails if any
// message of run shows up within d.
func expectNothingLeft(t *testing.T, topic, group, run string, d time.Duration) {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: rmqtest.Endpoint(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := rmqtest.Context(t, d+10*time.Second)
	if _, err := c.OpenSession(ctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: group,
		Subscriptions: []client.Subscription{{Topic: topic}}, LiteWildcard: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(d)
	for time.Until(deadline) > 6*time.Second {
		msgs, err := c.Receive(ctx, client.ReceiveRequest{Group: group, Topic: topic, Lite: true,
			InvisibleDuration: 30 * time.Second, LongPollingTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			if len(m.LiteTopic) >= len(run) && m.LiteTopic[:len(run)] == run {
				t.Errorf("message %s of %s (attempt %d) was left unacked", m.MessageID, m.LiteTopic, m.DeliveryAttempt)
			}
			_, _ = c.Ack(ctx, group, m.Topic, []client.AckEntry{{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}})
		}
	}
}

func ofRun(run string, m *rmqflow.AckableMessage[string]) bool {
	return len(m.Meta.LiteTopic) >= len(run) && m.Meta.LiteTopic[:len(run)] == run
}

// TestEndToEndLite produces N messages over K lite topics, consumes them with
// a Source, hands them across goroutines by lite topic (a keyed shuffle), and
// acks them through the pool from those goroutines. Every message is seen,
// every ack succeeds, duplicates stay within what can be in flight, and the
// broker has nothing left afterwards.
func TestEndToEndLite(t *testing.T) {
	const topic, group = "rmqflow-lite-e2e", "rmqflow-lite-e2e-g"
	const n, k, workers = 2000, 50, 4
	run := rmqtest.Unique("e2e")
	produce(t, topic, run, n, k)

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection: conn(t), Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		FetchConcurrency: 2, InvisibleDuration: 20 * time.Second, AwaitDuration: 5 * time.Second,
	}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	ctx := rmqtest.Context(t, 2*time.Minute)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	acker := src.Acker()

	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		unique atomic.Int64
		dups   atomic.Int64
		ackErr atomic.Int64
		done   = make(chan struct{})
	)
	shards := make([]chan *rmqflow.AckableMessage[string], workers)
	var wg sync.WaitGroup
	for i := range shards {
		shards[i] = make(chan *rmqflow.AckableMessage[string], 16)
		wg.Add(1)
		go func(in <-chan *rmqflow.AckableMessage[string]) {
			defer wg.Done()
			for m := range in {
				if err := acker.Ack(ctx, m.Handle); err != nil {
					ackErr.Add(1)
					t.Errorf("ack %s: %v", m.Handle, err)
				}
			}
		}(shards[i])
	}
	for unique.Load() < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("next after %d unique: %v", unique.Load(), err)
		}
		if !ofRun(run, m) {
			_ = acker.Ack(ctx, m.Handle) // left over by an earlier run
			continue
		}
		if m.Err != nil || m.Value != string(m.Meta.Body) {
			t.Fatalf("decode: %q %v", m.Value, m.Err)
		}
		mu.Lock()
		seen[m.Meta.MessageID]++
		if seen[m.Meta.MessageID] == 1 {
			unique.Add(1)
		} else {
			dups.Add(1)
		}
		mu.Unlock()
		h := fnv.New32a()
		h.Write([]byte(m.Meta.LiteTopic))
		shards[h.Sum32()%workers] <- m
	}
	close(done)
	for _, s := range shards {
		close(s)
	}
	wg.Wait()
	if err := src.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	// In flight at any moment: the source's queue plus the shard buffers.
	bound := int64(2*32 + workers*16)
	t.Logf("unique %d, duplicates %d (bound %d), ack errors %d", unique.Load(), dups.Load(), bound, ackErr.Load())
	if dups.Load() > bound {
		t.Errorf("%d duplicates, more than could be in flight (%d)", dups.Load(), bound)
	}
	expectNothingLeft(t, topic, group, run, 25*time.Second)
}

// TestQueuedMessagesAreRenewed stalls the consumer for three invisible
// durations: the queued messages are renewed, so another consumer of the
// group never gets them and they are emitted with delivery attempt 1.
func TestQueuedMessagesAreRenewed(t *testing.T) {
	const topic, group = "rmqflow-lite-renew", "rmqflow-lite-renew-g"
	const n = 20
	run := rmqtest.Unique("renew")
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection: conn(t), Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 4 * time.Second, AwaitDuration: 5 * time.Second,
	}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	ctx := rmqtest.Context(t, 2*time.Minute)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	// Produce once subscribed: a backlog that predates the subscription would
	// wait for the broker's full dispatch (scenario m). One message per lite
	// topic: no FIFO blocking.
	produce(t, topic, run, n, n)
	// Wait for the source to hold every message of the run (strays of earlier
	// runs may be queued too; they are acked below).
	waitFor(t, 30*time.Second, func() bool { return src.QueueLen() >= n })
	// Stall for 3× the invisible duration while a rival consumer polls.
	expectNothingLeft(t, topic, group, run, 30*time.Second)
	got := 0
	for got < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ofRun(run, m) {
			got++
			if m.Meta.DeliveryAttempt != 1 {
				t.Errorf("%s emitted with attempt %d, want 1", m.Meta.MessageID, m.Meta.DeliveryAttempt)
			}
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Errorf("ack after renewals: %v", err)
		}
	}
}

// waitFor polls cond every 20 ms until it holds or d passes (there is no
// event to await for "the queue has filled").
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAckBadInput: handles that are malformed, unknown to the broker, or for
// an unreachable endpoint fail with clear errors (TestSinkPerRecordErrors
// covers a real handle under an unknown group).
func TestAckBadInput(t *testing.T) {
	pool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 30*time.Second)
	ep := rmqtest.Endpoint(t)

	if err := pool.Ack(ctx, rmqflow.ReceiptHandle{Group: "g"}); !errors.Is(err, rmqflow.ErrBadHandle) {
		t.Errorf("incomplete handle: %v, want ErrBadHandle", err)
	}
	garbage := rmqflow.ReceiptHandle{Endpoints: ep, Group: "rmqflow-lite-e2e-g", Topic: "rmqflow-lite-e2e", LiteTopic: "x", MessageID: "m", Handle: "garbage"}
	var se *client.StatusError
	if err := pool.Ack(ctx, garbage); !errors.As(err, &se) || se.Code != client.CodeInternalServerError {
		t.Errorf("garbage broker handle: %v, want a StatusError INTERNAL_SERVER_ERROR", err)
	}
	unreachable := garbage
	unreachable.Endpoints = "127.0.0.1:1"
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ack(short, unreachable); err == nil {
		t.Error("ack to an unreachable endpoint succeeded")
	}
}
