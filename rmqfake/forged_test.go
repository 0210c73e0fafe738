package rmqfake_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// forge rewrites field i (0 kind, 1 pop time, 2 invisible, 3 queue,
// 4 offset, 5 sequence) of a real handle ("F1 k pop inv queue offset seq").
func forge(t *testing.T, h string, i int, v string) string {
	t.Helper()
	f := strings.Split(h, " ")
	if len(f) != 7 {
		t.Fatalf("handle %q: want 7 fields", h)
	}
	f[i+1] = v
	return strings.Join(f, " ")
}

// TestForgedHandlesNeverStall sends acks and invisibility changes with forged
// handles of every kind (a queue of -1, one that wraps to -1, one past the
// topic's queues, offsets before and past the stored messages, kinds that do
// not match the group) and checks that each gets an in-band answer, that
// nothing stored is skipped (the backlog stays right and never goes
// negative), that the server keeps serving other requests and that Stop
// returns. One such ack used to panic with the broker's lock held and hang
// every later RPC and Stop for good.
func TestForgedHandlesNeverStall(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-fifo", rmqfake.TopicFIFO, rmqfake.Queues(1)))
	must(t, s.CreateGroup("g-fifo", rmqfake.FIFO()))
	p := producer(t, s)
	for _, b := range []string{"1", "2", "3"} {
		send(t, p, &client.Message{Topic: "t-fifo", MessageGroup: "o", Body: []byte(b)})
	}
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "l1", Body: []byte("lite")})
	fifo := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-fifo", Subscriptions: []client.Subscription{{Topic: "t-fifo"}}})
	req := client.ReceiveRequest{Group: "g-fifo", Topic: "t-fifo", BatchSize: 1, InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second}
	first := receiveNow(t, fifo, req)[0]
	lite := liteConsumer(t, s)
	lm := receiveNow(t, lite, liteReq(10*time.Second))[0]

	fh, lh := first.ReceiptHandle, lm.ReceiptHandle
	type forged struct {
		name, group, topic, liteTopic, handle string
	}
	var cases []forged
	for _, q := range []string{"-1", "4294967295", "2147483647", "-2147483648", "1", "9223372036854775807"} {
		cases = append(cases, forged{"fifo queue " + q, "g-fifo", "t-fifo", "", forge(t, fh, 3, q)})
	}
	for _, off := range []string{"-1", "3", "4", "1000", "9223372036854775807", "-9223372036854775808"} {
		cases = append(cases, forged{"fifo offset " + off, "g-fifo", "t-fifo", "", forge(t, fh, 4, off)})
		cases = append(cases, forged{"lite offset " + off, liteGroup, liteTopic, "l1", forge(t, lh, 4, off)})
	}
	for _, k := range []string{"n", "r", "l", "x"} {
		cases = append(cases, forged{"fifo handle as kind " + k, "g-fifo", "t-fifo", "", forge(t, fh, 0, k)})
	}
	cases = append(cases,
		forged{"fifo handle on a lite topic", liteGroup, liteTopic, "l1", fh},
		forged{"lite handle on the fifo group", "g-fifo", "t-fifo", "", lh},
		forged{"lite handle, other lite topic", liteGroup, liteTopic, "nope", lh},
		forged{"fifo pop time in the far future", "g-fifo", "t-fifo", "", forge(t, forge(t, fh, 1, "9223372036854775807"), 3, "-1")},
		forged{"fifo invisible overflows", "g-fifo", "t-fifo", "", forge(t, forge(t, fh, 2, "9223372036854775807"), 4, "1000")},
	)
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := fifo.Ack(ctx, c.group, c.topic, []client.AckEntry{{MessageID: first.MessageID, ReceiptHandle: c.handle, LiteTopic: c.liteTopic}})
		if err != nil && !isStatus(err) {
			t.Errorf("%s: ack: %v (want an in-band answer)", c.name, err)
		}
		for _, r := range res {
			if r.Err != nil && !isStatus(r.Err) {
				t.Errorf("%s: ack entry: %v", c.name, r.Err)
			}
		}
		_, err = fifo.ChangeInvisibleDuration(ctx, client.ChangeInvisibleRequest{Group: c.group, Topic: c.topic, MessageID: first.MessageID,
			ReceiptHandle: c.handle, LiteTopic: c.liteTopic, InvisibleDuration: time.Second})
		if err != nil && !isStatus(err) {
			t.Errorf("%s: change: %v (want an in-band answer)", c.name, err)
		}
		err = fifo.ForwardToDeadLetterQueue(ctx, client.DeadLetterRequest{Group: c.group, Topic: c.topic, MessageID: first.MessageID,
			ReceiptHandle: c.handle, LiteTopic: c.liteTopic})
		if err != nil && !isStatus(err) {
			t.Errorf("%s: forward: %v (want an in-band answer)", c.name, err)
		}
		cancel()
		if g := s.Stats().Groups["g-fifo"]; g.Backlog+g.InFlight != 3 || g.Acked > 0 {
			t.Fatalf("after %s: g-fifo %+v: a forged handle skipped or acked a stored message", c.name, g.Counts)
		}
	}
	// Everything stored is still delivered, in order, to the same group.
	clk.Advance(time.Minute)
	var got []string
	for len(got) < 3 {
		ms := receiveNow(t, fifo, req)
		got = append(got, bodies(ms)...)
		ackAll(t, fifo, "g-fifo", "t-fifo", ms)
	}
	if fmtSlice(got) != "[1 2 3]" {
		t.Errorf("after the forged requests the FIFO group got %v, want [1 2 3]", got)
	}
	if g := s.Stats().Groups["g-fifo"]; g.Backlog != 0 || g.Acked != 3 {
		t.Errorf("g-fifo after the drain: %+v", g.Counts)
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return after the forged requests: the broker's lock is held")
	}
}

// isStatus reports whether err is an in-band RocketMQ status (not a failed
// RPC such as the Internal error of a recovered panic).
func isStatus(err error) bool {
	var se *client.StatusError
	return errors.As(err, &se)
}

// TestRetryMaxBounds: a RetryMax whose max attempts (RetryMax+1) would
// overflow the wire's int32 is refused, by CreateGroup and by the fixture
// parser, instead of sending every message to the DLQ.
func TestRetryMaxBounds(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	for _, n := range []int{math.MaxInt32, math.MaxInt32 + 1, math.MaxInt64, -1} {
		if err := s.CreateGroup("g-big", rmqfake.RetryMax(n)); err == nil {
			t.Errorf("RetryMax(%d) accepted", n)
		}
		if _, err := rmqfake.ParseFixture(fmt.Sprintf("group g-big retry=%d", n)); err == nil {
			t.Errorf("retry=%d accepted by the fixture parser", n)
		}
	}
	must(t, s.CreateGroup("g-big", rmqfake.RetryMax(math.MaxInt32-1)))
	if _, err := rmqfake.ParseFixture(fmt.Sprintf("group g-big retry=%d", math.MaxInt32-1)); err != nil {
		t.Errorf("the largest retry refused: %v", err)
	}
	must(t, s.CreateTopic("t-big", rmqfake.TopicNormal))
	p := producer(t, s)
	send(t, p, &client.Message{Topic: "t-big", Body: []byte("x")})
	c := session(t, s, client.SessionConfig{Type: client.SimpleConsumer, Group: "g-big", Subscriptions: []client.Subscription{{Topic: "t-big"}}})
	ms := receiveNow(t, c, client.ReceiveRequest{Group: "g-big", Topic: "t-big", InvisibleDuration: 10 * time.Second, LongPollingTimeout: 5 * time.Second})
	if len(ms) != 1 || ms[0].DeliveryAttempt != 1 {
		t.Fatalf("largest RetryMax: got %d messages, attempt %d; want the message on attempt 1", len(ms), ms[0].DeliveryAttempt)
	}
	if g := s.Stats().Groups["g-big"]; g.DeadLettered != 0 {
		t.Errorf("largest RetryMax: %d sent to the DLQ", g.DeadLettered)
	}
}

// TestDeliveryTimestampExtremes: a delivery time of ±MaxInt64 seconds does not
// wrap to the past (the message would be delivered at once): a timestamp
// outside protobuf's range is INTERNAL_SERVER_ERROR, as the proxy's
// validation answers (conformance scenario p); one beyond the max delay is
// ILLEGAL_DELIVERY_TIME.
func TestDeliveryTimestampExtremes(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	must(t, s.CreateTopic("t-delay", rmqfake.TopicDelay))
	p := producer(t, s)
	for _, sec := range []int64{math.MaxInt64, math.MinInt64, math.MaxInt64 / 999, -math.MaxInt64 / 999, 1e15, 253402300800} {
		res, err := p.Send(ctxT(t), &client.Message{Topic: "t-delay", Body: []byte("x"), DeliveryTime: time.Unix(sec, 0)})
		if err == nil && len(res) == 1 {
			err = res[0].Err
		}
		var se *client.StatusError
		if !errors.As(err, &se) || se.Code != client.CodeInternalServerError {
			t.Errorf("delivery at %ds: %v, want INTERNAL_SERVER_ERROR", sec, err)
		}
	}
	far := clk.Now().Add(100 * 24 * time.Hour)
	res, err := p.Send(ctxT(t), &client.Message{Topic: "t-delay", Body: []byte("x"), DeliveryTime: far})
	if err == nil && len(res) == 1 {
		err = res[0].Err
	}
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != client.CodeIllegalDeliveryTime {
		t.Errorf("delivery in 100 days: %v, want ILLEGAL_DELIVERY_TIME", err)
	}
	if st := s.Stats().Topics["t-delay"]; st.Stored != 0 {
		t.Fatalf("refused messages stored: %+v", st)
	}
}

// TestBlankAsJavaSeesIt: the proxy's blank checks (StringUtils.isBlank) do
// not count the non-breaking spaces U+00A0, U+2007 and U+202F as whitespace,
// where strings.TrimSpace does: a tag, key or message group made of them is
// stored; one of U+3000 (an ideographic space) is refused. Found by FuzzNames
// against the real broker.
func TestBlankAsJavaSeesIt(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	must(t, s.CreateTopic("t-fifo", rmqfake.TopicFIFO))
	p := producer(t, s)
	for _, tc := range []struct {
		name string
		m    *client.Message
		ok   bool
	}{
		{"tag U+00A0", &client.Message{Topic: normalTopic, Tag: "\u00a0", Body: []byte("x")}, true},
		{"key U+2007", &client.Message{Topic: normalTopic, Keys: []string{"\u2007"}, Body: []byte("x")}, true},
		{"group U+202F", &client.Message{Topic: "t-fifo", MessageGroup: "\u202f", Body: []byte("x")}, true},
		{"tag U+3000", &client.Message{Topic: normalTopic, Tag: "\u3000", Body: []byte("x")}, false},
		{"group U+3000", &client.Message{Topic: "t-fifo", MessageGroup: "\u3000", Body: []byte("x")}, false},
	} {
		res, err := p.Send(ctxT(t), tc.m)
		if err == nil && len(res) == 1 {
			err = res[0].Err
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
