package rmqfake_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFaultErrorRate(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	s.SetFault("SendMessage", rmqfake.Fault{ErrorRate: 1, Code: codes.ResourceExhausted})
	_, err := p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: []byte("x")})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("send with error rate 1: %v, want ResourceExhausted", err)
	}
	if !client.IsRetriable(err) {
		t.Error("an injected ResourceExhausted should be retriable for the client")
	}
	// Other methods are unaffected.
	if _, err := p.QueryRoute(ctxT(t), normalTopic); err != nil {
		t.Fatalf("QueryRoute under a SendMessage fault: %v", err)
	}
	s.SetFault("SendMessage", rmqfake.Fault{ErrorRate: 0.5})
	failed := 0
	for i := 0; i < 200; i++ {
		if _, err := p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: []byte("x")}); status.Code(err) == codes.Unavailable {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if failed < 60 || failed > 140 {
		t.Errorf("error rate 0.5 failed %d of 200 sends", failed)
	}
	s.ClearFaults()
	send(t, p, &client.Message{Topic: normalTopic, Body: []byte("x")})
	if got := s.Stats().Topics[normalTopic].Sent; got != int64(200-failed+1) {
		t.Errorf("topic got %d messages, want %d (failed sends store nothing)", got, 200-failed+1)
	}
}

// Added latency holds calls on the server's clock: with a manual clock the
// call completes only when the clock passes the latency.
func TestFaultLatencyFollowsTheClock(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	p := producer(t, s)
	s.SetFault("QueryRoute", rmqfake.Fault{Latency: 2 * time.Second})
	defer s.ClearFaults()
	done := make(chan error, 1)
	go func() {
		_, err := p.QueryRoute(ctxT(t), normalTopic)
		done <- err
	}()
	if err := clk.WaitPending(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	select {
	case err := <-done:
		t.Fatalf("call returned after 1 s of a 2 s latency: %v", err)
	default:
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("call after the latency: %v", err)
	}
}

func TestInterceptObserveFailReplace(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	c := normalConsumer(t, s)

	var seen atomic.Int32
	var lastClient atomic.Value
	remove := s.Intercept("SendMessage", func(call rmqfake.Call) rmqfake.Verdict {
		seen.Add(1)
		lastClient.Store(call.ClientID)
		if len(call.Request.(*v2.SendMessageRequest).GetMessages()) != 1 {
			t.Errorf("hook saw %T without one message", call.Request)
		}
		return rmqfake.Verdict{}
	})
	send(t, p, &client.Message{Topic: normalTopic, Body: []byte("observed")})
	if seen.Load() != 1 || lastClient.Load() != p.ID() {
		t.Fatalf("hook saw %d calls from %v, want 1 from %s", seen.Load(), lastClient.Load(), p.ID())
	}
	remove()
	send(t, p, &client.Message{Topic: normalTopic, Body: []byte("unobserved")})
	if seen.Load() != 1 {
		t.Fatalf("removed hook still ran (%d calls)", seen.Load())
	}

	// Fail acks with a gRPC error; the message stays in flight.
	remove = s.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict {
		return rmqfake.Verdict{Err: status.Error(codes.DeadlineExceeded, "lost")}
	})
	msgs := receiveNow(t, c, normalReq(time.Minute))
	if _, err := c.Ack(ctxT(t), normalGroup, normalTopic, []client.AckEntry{entry(msgs[0])}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("ack under a failing hook: %v", err)
	}
	if g := s.Stats().Groups[normalGroup]; g.Acked != 0 || g.InFlight != int64(len(msgs)) {
		t.Fatalf("after a failed ack: %+v", g.Counts)
	}
	remove()

	// Replace the response of a call.
	s.Intercept("ChangeInvisibleDuration", func(rmqfake.Call) rmqfake.Verdict {
		return rmqfake.Verdict{Response: &v2.ChangeInvisibleDurationResponse{Status: &v2.Status{Code: v2.Code_TOO_MANY_REQUESTS, Message: "slow down"}}}
	})
	_, err := c.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: normalGroup, Topic: normalTopic,
		MessageID: msgs[0].MessageID, ReceiptHandle: msgs[0].ReceiptHandle, InvisibleDuration: time.Minute})
	if !errors.Is(err, client.ErrTooManyRequests) {
		t.Fatalf("change under a replacing hook: %v, want TOO_MANY_REQUESTS", err)
	}
	ackAll(t, c, normalGroup, normalTopic, msgs)
}

// A broken receive stream delivers its first message and fails; the rest
// come back a second later, the first stays in flight.
func TestBrokenReceiveStream(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	c := normalConsumer(t, s)
	p := producer(t, s)
	var ms []*client.Message
	for _, b := range []string{"a", "b", "c"} {
		ms = append(ms, &client.Message{Topic: normalTopic, Body: []byte(b)})
	}
	send(t, p, ms...) // one batch, one queue
	s.BreakReceiveStreams(1)
	got, err := c.Receive(ctxT(t), normalReq(time.Minute))
	if status.Code(err) != codes.Unavailable || len(got) != 1 {
		t.Fatalf("broken stream: %d messages, %v; want 1 message and Unavailable", len(got), err)
	}
	if g := s.Stats().Groups[normalGroup]; g.InFlight != 3 {
		t.Fatalf("right after the break: %+v, want 3 in flight", g.Counts)
	}
	clk.Advance(time.Second)
	if g := s.Stats().Groups[normalGroup]; g.InFlight != 1 || g.Backlog != 2 {
		t.Fatalf("a second later: %+v, want the 2 unsent back and 1 in flight", g.Counts)
	}
	rest := receiveNow(t, c, normalReq(time.Minute))
	if len(rest) != 2 {
		t.Fatalf("after the break got %d, want the 2 unsent", len(rest))
	}
	ackAll(t, c, normalGroup, normalTopic, append(rest, got...))
}

// Every unsupported call answers Unimplemented with a reason.
func TestUnimplementedCalls(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := newClient(t, s, client.Config{})
	stub := v2.NewMessagingServiceClient(c.Conn())
	ctx := c.OutgoingContext(ctxT(t))
	st, err := stub.PullMessage(ctx, &v2.PullMessageRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("PullMessage: %v", err)
	}
}

// A panic while handling a call becomes a gRPC Internal error; the server
// keeps serving.
func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	c := normalConsumer(t, s)
	remove := s.Intercept("", func(call rmqfake.Call) rmqfake.Verdict {
		if call.Method == "QueryRoute" || call.Method == "ReceiveMessage" {
			panic("boom in " + call.Method)
		}
		return rmqfake.Verdict{}
	})
	if _, err := p.QueryRoute(ctxT(t), normalTopic); status.Code(err) != codes.Internal {
		t.Errorf("QueryRoute with a panicking hook: %v, want Internal", err)
	}
	req := normalReq(time.Minute)
	req.Queue = &v2.MessageQueue{Topic: &v2.Resource{Name: normalTopic}} // no route lookup
	if _, err := c.Receive(ctxT(t), req); status.Code(err) != codes.Internal {
		t.Errorf("ReceiveMessage with a panicking hook: %v, want Internal", err)
	}
	remove()
	if _, err := p.QueryRoute(ctxT(t), normalTopic); err != nil {
		t.Errorf("QueryRoute after the panics: %v", err)
	}
}
