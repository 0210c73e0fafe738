package rmqflow_test

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestHandleAckedFromAnotherProcess pins the README's "a ReceiptHandle
// marshals to bytes without credentials, so another process acks it through
// its own AcquireAckPool": a source on a broker that requires credentials
// receives a message and marshals its handle; a child process (this test
// binary, run again) acks the bytes through AcquireAckPool + NewAcker with a
// CredentialsResolver. The message is acked once; a child whose resolver
// gives the wrong secret fails, so the child's own credentials are what
// signed the ack.
func TestHandleAckedFromAnotherProcess(t *testing.T) {
	if hexHandle := os.Getenv("RMQFLOW_CLAIMS_CHILD_HANDLE"); hexHandle != "" {
		childAck(t, hexHandle)
		return
	}
	const ak, secret = "AK-CHILD", "secret-child"
	s := fakeNormal(t, rmqfake.Credentials(ak, secret))
	ctx := rmqtest.Context(t, time.Minute)
	cr := client.Credentials{AccessKey: ak, AccessSecret: secret}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), Credentials: cr}, Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(ctx, rmqflow.Record{Body: []byte("x")}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_ = sink.Close(ctx)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr(), Credentials: cr},
		Mode: rmqflow.ModeSimple, Topic: "t", Group: "g", AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Handle.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	child := func(secret string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHandleAckedFromAnotherProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "RMQFLOW_CLAIMS_CHILD_HANDLE="+hex.EncodeToString(b),
			"RMQFLOW_CLAIMS_CHILD_AK="+ak, "RMQFLOW_CLAIMS_CHILD_SECRET="+secret)
		return cmd.CombinedOutput()
	}
	if out, err := child("wrong-secret"); err == nil {
		t.Errorf("a child signing with the wrong secret acked:\n%s", out)
	}
	if got := s.Stats().Groups["g"].Acked; got != 0 {
		t.Fatalf("acked %d after the refused child, want 0", got)
	}
	if out, err := child(secret); err != nil {
		t.Fatalf("the child process failed to ack: %v\n%s", err, out)
	}
	if got := s.Stats().Groups["g"].Acked; got != 1 {
		t.Errorf("acked %d after the child, want 1", got)
	}
}

// childAck is the child side of TestHandleAckedFromAnotherProcess.
func childAck(t *testing.T, hexHandle string) {
	b, err := hex.DecodeString(hexHandle)
	if err != nil {
		t.Fatal(err)
	}
	var h rmqflow.ReceiptHandle
	if err := h.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	cr := client.Credentials{AccessKey: os.Getenv("RMQFLOW_CLAIMS_CHILD_AK"), AccessSecret: os.Getenv("RMQFLOW_CLAIMS_CHILD_SECRET")}
	pool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Name: "child", AllowedEndpoints: []string{h.Endpoints},
		Credentials: func(endpoints string) (client.Credentials, error) {
			if endpoints != h.Endpoints {
				return client.Credentials{}, errors.New("unknown endpoints")
			}
			return cr, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 20*time.Second)
	if err := rmqflow.NewAcker(pool).Ack(ctx, h); err != nil {
		t.Fatalf("ack in the child: %v", err)
	}
}

// TestDisableQueueRenewal pins SourceConfig.DisableQueueRenewal: a queued
// message is not renewed while it waits, nor when it is emitted, so one
// emitted after its invisibility ended can no longer be acked.
func TestDisableQueueRenewal(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	mc := rmqfake.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := fakeNormal(t, rmqfake.WithClock(mc))
	cid, _ := countCID(s)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Mode: rmqflow.ModeSimple,
		Topic: "t", Group: "g", InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second, AwaitDuration: 5 * time.Second,
		DisableQueueRenewal: true}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	rmqflow.SetSourceClock(src, mc.Now, func(d time.Duration, f func()) func() bool { return mc.AfterFunc(d, f).Stop })
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	sendBodies(t, ctx, s.Addr(), "t", false, "m")
	waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 1 })
	mc.Advance(11 * time.Second) // past the 10 s invisibility, queued all along
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Meta.DeliveryAttempt != 1 {
		t.Fatalf("emitted attempt %d first, want the queued attempt 1", m.Meta.DeliveryAttempt)
	}
	if n := cid.Load(); n != 0 {
		t.Errorf("%d ChangeInvisibleDuration calls with DisableQueueRenewal, want 0", n)
	}
	if err := src.Acker().Ack(ctx, m.Handle); err == nil {
		t.Error("the expired handle acked: the message was renewed after all")
	}
}

// TestReleaseInvisibleDuration pins SourceConfig.ReleaseInvisibleDuration:
// Close gives every queued message back with that invisibility (not 0).
func TestReleaseInvisibleDuration(t *testing.T) {
	ctx := rmqtest.Context(t, 30*time.Second)
	s := fakeNormal(t)
	var mu sync.Mutex
	var durations []time.Duration
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		mu.Lock()
		durations = append(durations, c.Request.(*v2.ChangeInvisibleDurationRequest).GetInvisibleDuration().AsDuration())
		mu.Unlock()
		return rmqfake.Verdict{}
	})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Mode: rmqflow.ModeSimple,
		Topic: "t", Group: "g", AwaitDuration: 5 * time.Second, ReleaseInvisibleDuration: 15 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sendBodies(t, ctx, s.Addr(), "t", false, "a", "b", "c")
	waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 3 })
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(durations) != 3 {
		t.Fatalf("%d ChangeInvisibleDuration calls at Close, want 3: %v", len(durations), durations)
	}
	for _, d := range durations {
		if d != 15*time.Second {
			t.Errorf("released with %v, want ReleaseInvisibleDuration 15s", d)
		}
	}
	if st := s.Stats().Groups["g"]; st.InFlight != 3 || st.Acked != 0 {
		t.Errorf("after Close: %+v, want the 3 messages invisible, none acked", st.Counts)
	}
}

// TestRunnerErrorLeave pins RunnerConfig.OnError = ErrorLeave: a failed
// message is left (no deferral RPC, no defer counted), so it comes back only
// when its invisibility ends, with attempt 2 — not after ErrorBackoff.
func TestRunnerErrorLeave(t *testing.T) {
	t.Parallel() // its own emulator; mostly waiting
	fake := fakeLite(t)
	meter := &counterMeter{}
	conn := rmqflow.Connection{Endpoints: fake.Addr(), Meter: meter}
	ctx := rmqtest.Context(t, 40*time.Second)
	// Deferrals are ChangeInvisibleDuration calls to anything but the
	// invisible duration; renewals (to 10 s, by the source's queue renewal
	// or a lease) are not what ErrorLeave forbids, and timing decides
	// whether one happens.
	var deferrals atomic.Int64
	fake.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		if c.Request.(*v2.ChangeInvisibleDurationRequest).GetInvisibleDuration().AsDuration() != 10*time.Second {
			deferrals.Add(1)
		}
		return rmqfake.Verdict{}
	})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	type call struct {
		at      time.Time
		attempt int32
	}
	seen := make(chan call, 2)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		seen <- call{time.Now(), m.Meta.DeliveryAttempt}
		if calls.Add(1) == 1 {
			return rmqflow.Decision{}, errors.New("fails once")
		}
		return rmqflow.Ack(), nil
	}, rmqflow.RunnerConfig{OnError: rmqflow.ErrorLeave, ErrorBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	sendBodies(t, ctx, fake.Addr(), "main", true, "x")
	var got []call
	for len(got) < 2 {
		select {
		case c := <-seen:
			got = append(got, c)
		case <-ctx.Done():
			t.Fatalf("handled %d times, want 2", len(got))
		}
	}
	waitFor(t, 10*time.Second, func() bool { return fake.Stats().Groups["g"].Acked == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if gap := got[1].at.Sub(got[0].at); gap < 9*time.Second {
		t.Errorf("the left message came back after %v, want its 10 s invisibility", gap)
	}
	if got[1].attempt != 2 {
		t.Errorf("came back with attempt %d, want 2", got[1].attempt)
	}
	if n := deferrals.Load(); n != 0 {
		t.Errorf("%d deferrals (ChangeInvisibleDuration to other than the invisible duration), want none: leave sends nothing", n)
	}
	if n := meter.sum(rmqflow.MetricDefers, "reason", "handler-error"); n != 0 {
		t.Errorf("%s{reason=handler-error} = %d with ErrorLeave, want 0", rmqflow.MetricDefers, n)
	}
}
