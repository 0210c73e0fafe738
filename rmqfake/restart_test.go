package rmqfake_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Restart keeps stored messages and makes in-flight ones deliverable again;
// clients reconnect to the same address and send their settings again.
func TestRestartKeepsMessages(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	addr := s.Addr()
	p := producer(t, s)
	for i := 0; i < 6; i++ {
		send(t, p, &client.Message{Topic: normalTopic, Body: []byte(fmt.Sprint("n", i))})
	}
	// One by one: the client sends a batch of lite messages concurrently.
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "conv", Body: []byte("l0")})
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "conv", Body: []byte("l1")})

	c := normalConsumer(t, s)
	lc := liteConsumer(t, s)
	req := normalReq(30 * time.Minute)
	req.BatchSize = 2
	inflight := receiveNow(t, c, req)
	lone := liteReq(30 * time.Minute)
	lone.BatchSize = 1
	liteHead := receiveNow(t, lc, lone)
	ackAll(t, c, normalGroup, normalTopic, inflight[:1]) // one acked before the restart

	must(t, s.Restart())
	if s.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, s.Addr())
	}
	if n := s.Stats().Sessions; n != 0 {
		t.Fatalf("%d sessions survived the restart", n)
	}
	// Fresh clients (the old ones would reconnect by themselves, after a backoff).
	c2 := normalConsumer(t, s)
	lc2 := liteConsumer(t, s)
	var got []string
	attempts := map[string]int32{}
	for len(got) < 5 {
		msgs := receiveNow(t, c2, normalReq(time.Minute))
		for _, m := range msgs {
			got = append(got, string(m.Body))
			attempts[string(m.Body)] = m.DeliveryAttempt
		}
		ackAll(t, c2, normalGroup, normalTopic, msgs)
	}
	sort.Strings(got)
	want := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	want = remove(want, string(inflight[0].Body))
	if fmtSlice(got) != fmtSlice(want) {
		t.Fatalf("after the restart got %v, want %v", got, want)
	}
	if a := attempts[string(inflight[1].Body)]; a != 2 {
		t.Errorf("the message in flight at the restart came back with attempt %d, want 2", a)
	}
	lite := receiveNow(t, lc2, liteReq(time.Minute))
	if fmtSlice(bodies(lite)) != "[l0 l1]" || lite[0].MessageID != liteHead[0].MessageID {
		t.Fatalf("lite after the restart: %v, want [l0 l1] from the head", bodies(lite))
	}
	ackAll(t, lc2, liteGroup, liteTopic, lite)
	if st := s.Stats(); st.Held != 0 {
		t.Errorf("%d messages held after acking everything", st.Held)
	}
}

// A client that was connected before the restart recovers by itself: its
// Telemetry stream reconnects and sends its settings again.
func TestRestartClientsReconnect(t *testing.T) {
	t.Parallel()
	s := rmqfake.NewForTest(t, rmqfake.WithFixtures(rmqfake.Fixture{Name: "t", Type: rmqfake.TopicNormal}, rmqfake.Fixture{Group: true, Name: "g", RetryMax: -1}))
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g", Subscriptions: []client.Subscription{{Topic: "t"}}})
	p := producer(t, s)
	must(t, s.Restart())
	// The client's Telemetry stream reconnects and sends its settings again
	// (two sessions: the consumer and the producer).
	must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Sessions == 2 }))
	send(t, p, &client.Message{Topic: "t", Body: []byte("after")})
	msgs := receiveNow(t, c, client.ReceiveRequest{Group: "g", Topic: "t", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if len(msgs) != 1 || string(msgs[0].Body) != "after" {
		t.Fatalf("the old client received %v after the restart", bodies(msgs))
	}
}

func remove(s []string, x string) []string {
	out := s[:0:0]
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// Restart completes while clients keep calling (handlers never wait on the
// server's own lock).
func TestRestartUnderLoad(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := newClient(t, s, client.Config{RequestTimeout: time.Second})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = c.QueryRoute(ctxT(t), normalTopic)
		}
	}()
	for i := 0; i < 5; i++ {
		restarted := make(chan error, 1)
		go func() { restarted <- s.Restart() }()
		select {
		case err := <-restarted:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Restart did not return under load")
		}
	}
	close(stop)
	<-done
}
