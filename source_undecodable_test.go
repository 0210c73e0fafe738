package rmqflow_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// refusing is a Decoder that refuses the body "bad" and counts its calls on
// it.
type refusing struct{ bad atomic.Int64 }

func (d *refusing) Decode(b []byte, _ *rmqflow.Metadata) (string, error) {
	if string(b) == "bad" {
		d.bad.Add(1)
		return "", &rmqflow.DecodeError{Reason: "refused"}
	}
	return string(b), nil
}

// rpcCount counts the calls of method fake receives.
func rpcCount(fake *rmqfake.Server, method string) *atomic.Int64 {
	var n atomic.Int64
	fake.Intercept(method, func(rmqfake.Call) rmqfake.Verdict { n.Add(1); return rmqfake.Verdict{} })
	return &n
}

// TestSourceUndecodableLeftAtOnce (issue 24, point 4): a message the Decoder
// refuses is emitted with Err, never acked (it must not be lost), never
// leased or renewed (Leases are on here), and its invisibility is cut to
// UndecodableInvisibleDuration (2 s) at emission, so that nobody acting on
// it does not hold its lite topic for InvisibleDuration (60 s): it comes
// back, counting a delivery, about 2 s later. Before the fix it came back
// only after its 60 s invisibility (not within the 20 s the test allows),
// with no RPC sent for it.
func TestSourceUndecodableLeftAtOnce(t *testing.T) {
	fake := fakeLite(t)
	ctx := rmqtest.Context(t, 60*time.Second)
	sendBodies(t, ctx, fake.Addr(), "main", true, "bad")
	acks, changes := rpcCount(fake, "AckMessage"), rpcCount(fake, "ChangeInvisibleDuration")
	dec := &refusing{}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second,
		InvisibleDuration: time.Minute, Leases: rmqflow.LeaseConfig{Enabled: true}, UndecodableInvisibleDuration: 2 * time.Second}, dec)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var de *rmqflow.DecodeError
	if !errors.As(m.Err, &de) || m.Meta.DeliveryAttempt != 1 {
		t.Fatalf("first delivery: Err %v, attempt %d; want a *DecodeError at attempt 1", m.Err, m.Meta.DeliveryAttempt)
	}
	t0 := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	again, err := src.Next(nctx)
	if err != nil {
		t.Fatalf("the undecodable message did not come back within 20 s (InvisibleDuration 60 s): %v", err)
	}
	back := time.Since(t0)
	t.Logf("came back after %v; %d ChangeInvisibleDuration, %d AckMessage", back.Round(time.Millisecond), changes.Load(), acks.Load())
	if again.Meta.MessageID != m.Meta.MessageID || again.Meta.DeliveryAttempt != 2 || again.Err == nil {
		t.Errorf("second delivery: %s at attempt %d (Err %v), want %s at attempt 2 with Err", again.Meta.MessageID, again.Meta.DeliveryAttempt, again.Err, m.Meta.MessageID)
	}
	if back > 8*time.Second {
		t.Errorf("came back after %v, want about UndecodableInvisibleDuration (2 s)", back)
	}
	// One cut per delivery, no renewal, no ack.
	if n := changes.Load(); n != 2 {
		t.Errorf("%d ChangeInvisibleDuration calls for two deliveries, want 2 (one cut each, no renewal)", n)
	}
	if n := acks.Load(); n != 0 {
		t.Errorf("%d AckMessage calls for an undecodable message nobody acked", n)
	}
	if n := dec.bad.Load(); n != 2 {
		t.Errorf("decoded %d times, want 2", n)
	}
}

// TestSourceUndecodableForever: with UndecodableInvisibleDuration Forever the
// source sends nothing for an undecodable message: it keeps the
// invisibility it was received with.
func TestSourceUndecodableForever(t *testing.T) {
	fake := fakeLite(t)
	ctx := rmqtest.Context(t, 30*time.Second)
	sendBodies(t, ctx, fake.Addr(), "main", true, "bad")
	changes := rpcCount(fake, "ChangeInvisibleDuration")
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second,
		UndecodableInvisibleDuration: rmqflow.Forever}, &refusing{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := src.Next(ctx); err != nil || m.Err == nil {
		t.Fatalf("Next: %v, %v; want the undecodable message", m, err)
	}
	if n := changes.Load(); n != 0 {
		t.Errorf("%d ChangeInvisibleDuration calls with UndecodableInvisibleDuration Forever, want 0", n)
	}
}

// TestRunnerLeasesUndecodable: under a Runner an undecodable message is
// leased like any other, since the handler decides on it: held by its
// handler for 12 s, longer than its 10 s invisibility, it does not come
// back meanwhile (the decoder sees it once), and it comes back after the
// handler's Release. Before the fix a message that failed to decode was not
// leased: it came back while its handler still held it.
func TestRunnerLeasesUndecodable(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a message for 12 s")
	}
	fake := fakeLite(t)
	ctx := rmqtest.Context(t, 60*time.Second)
	sendBodies(t, ctx, fake.Addr(), "main", true, "bad")
	dec := &refusing{}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: fake.Addr()},
		Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second,
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 3 * time.Second, UndecodableInvisibleDuration: time.Second}, dec)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		attempts []int32
		during   int64
		done     = make(chan struct{})
	)
	r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if m.Err == nil {
			return rmqflow.Ack(), nil
		}
		mu.Lock()
		attempts = append(attempts, m.Meta.DeliveryAttempt)
		first := len(attempts) == 1
		mu.Unlock()
		if first {
			select {
			case <-time.After(12 * time.Second):
			case <-ctx.Done():
			}
			during = dec.bad.Load()
			return rmqflow.Release(), nil
		}
		close(done)
		return rmqflow.Ack(), nil // dropped on purpose: the test is over
	}, rmqflow.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the released message did not come back")
	}
	cancel()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handler saw attempts %v; decoded %d times while the first was held", attempts, during)
	if during != 1 {
		t.Errorf("decoded %d times while its handler held it for 12 s (invisibility 10 s), want 1: it came back while held", during)
	}
}
