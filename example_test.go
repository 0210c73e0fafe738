package rmqflow_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// startFake starts the embedded emulator with a LITE main topic "chat" and
// its wildcard group "chat-workers" (against a real broker, create them with
// mqadmin instead).
func startFake() *rmqfake.Server {
	s, err := rmqfake.New(rmqfake.FastLiteDispatch())
	if err != nil {
		log.Fatal(err)
	}
	if err := s.CreateTopic("chat", rmqfake.TopicLite); err != nil {
		log.Fatal(err)
	}
	if err := s.CreateGroup("chat-workers", rmqfake.LiteBind("chat"), rmqfake.Wildcard()); err != nil {
		log.Fatal(err)
	}
	return s
}

// Example shows the heart of rmqflow: a source that never acks, work done in
// other goroutines, and acks from there.
func Example() {
	broker := startFake()
	defer broker.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := rmqflow.Connection{Endpoints: broker.Addr()}

	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "chat"})
	if err != nil {
		log.Fatal(err)
	}
	for _, session := range []string{"alice", "bob", "carol"} {
		sink.Write(ctx, rmqflow.Record{LiteTopic: session, Body: []byte("hello from " + session)})
	}
	if err := sink.Close(ctx); err != nil { // flushes
		log.Fatal(err)
	}

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection: conn,
		Lite:       []rmqflow.LiteBinding{{Topic: "chat", Group: "chat-workers"}},
	}, rmqflow.StringDecoder())
	if err != nil {
		log.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer src.Close(context.Background())

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		replies []string
	)
	for i := 0; i < 3; i++ {
		m, err := src.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() { // the work finishes elsewhere; the handle goes with it
			defer wg.Done()
			mu.Lock()
			replies = append(replies, m.Meta.LiteTopic+": "+m.Value)
			mu.Unlock()
			if err := src.Acker().Ack(ctx, m.Handle); err != nil {
				log.Print(err)
			}
		}()
	}
	wg.Wait()
	sort.Strings(replies)
	for _, r := range replies {
		fmt.Println(r)
	}
	// Output:
	// alice: hello from alice
	// bob: hello from bob
	// carol: hello from carol
}

// ExampleReceiptHandle_MarshalBinary moves a handle to another process: the
// bytes carry no credentials, and an AckPool there acks with its own.
func ExampleReceiptHandle_MarshalBinary() {
	h := rmqflow.ReceiptHandle{Endpoints: "127.0.0.1:8081", Group: "chat-workers", Topic: "chat",
		LiteTopic: "alice", MessageID: "01A2B3", Handle: "broker-handle", DeliveryAttempt: 1}
	b, err := h.MarshalBinary()
	if err != nil {
		log.Fatal(err)
	}
	// ... send b anywhere; on the other side:
	var got rmqflow.ReceiptHandle
	if err := got.UnmarshalBinary(b); err != nil {
		log.Fatal(err)
	}
	fmt.Println(got == h, got.String())
	// Output: true chat-workers/chat/alice@01A2B3#1
}

// ExampleRunner runs a handler over a lite topic with a fair-share throttle
// in front of it, then shuts down.
func ExampleRunner() {
	broker := startFake()
	defer broker.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := rmqflow.Connection{Endpoints: broker.Addr()}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "chat"})
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("session-%d", i), Body: []byte("hi")})
	}
	_ = sink.Close(ctx)

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn,
		Lite: []rmqflow.LiteBinding{{Topic: "chat", Group: "chat-workers"}}}, rmqflow.StringDecoder())
	if err != nil {
		log.Fatal(err)
	}
	handled := make(chan string, 5)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		handled <- m.Meta.LiteTopic
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{Concurrency: 2})
	if err != nil {
		log.Fatal(err)
	}
	fair, _ := rmqflow.FairShare[string](rmqflow.FairShareConfig{})
	th, err := rmqflow.NewThrottle(src.Acker(), fair, rmqflow.ThrottleConfig{})
	if err != nil {
		log.Fatal(err)
	}
	r.SetThrottle(th)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	var sessions []string
	for len(sessions) < 5 {
		sessions = append(sessions, <-handled)
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	sort.Strings(sessions)
	fmt.Println(sessions)
	// Output: [session-0 session-1 session-2 session-3 session-4]
}
