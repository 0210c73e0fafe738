package rmqflow

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

const fakeTopic, fakeGroup = "tn", "gn"

// fakeNormal starts rmqfake with the normal topic tn and the group gn.
func fakeNormal(t *testing.T, opts ...rmqfake.Option) *rmqfake.Server {
	t.Helper()
	s := rmqfake.NewForTest(t, opts...)
	if err := s.CreateTopic(fakeTopic, rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup(fakeGroup); err != nil {
		t.Fatal(err)
	}
	return s
}

// received sends n messages to s's tn and receives them as gn, signed with
// cr; it returns their handles.
func received(t *testing.T, s *rmqfake.Server, cr client.Credentials, n int) []ReceiptHandle {
	t.Helper()
	ctx := rmqtest.Context(t, 20*time.Second)
	c, err := client.New(client.Config{Endpoints: s.Addr(), Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.OpenSession(ctx, client.SessionConfig{Type: client.SimpleConsumer, Group: fakeGroup,
		Subscriptions: []client.Subscription{{Topic: fakeTopic}}}); err != nil {
		t.Fatal(err)
	}
	p, err := client.New(client.Config{Endpoints: s.Addr(), Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{fakeTopic}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, &client.Message{Topic: fakeTopic, Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var out []ReceiptHandle
	for len(out) < n {
		msgs, err := c.Receive(ctx, client.ReceiveRequest{Group: fakeGroup, Topic: fakeTopic, BatchSize: n - len(out),
			InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			out = append(out, ReceiptHandle{Endpoints: s.Addr(), Group: fakeGroup, Topic: m.Topic, MessageID: m.MessageID,
				Handle: m.ReceiptHandle, DeliveryAttempt: m.DeliveryAttempt})
		}
	}
	return out
}

func acked(s *rmqfake.Server) int64 { return s.Stats().Groups[fakeGroup].Acked }

// countCalls counts the calls of method s receives.
func countCalls(s *rmqfake.Server, method string) *atomic.Int64 {
	var n atomic.Int64
	s.Intercept(method, func(rmqfake.Call) rmqfake.Verdict { n.Add(1); return rmqfake.Verdict{} })
	return &n
}

// TestAckPoolTenantsNotMerged (#2): two tenants' pools built by one resolver
// factory stay two pools; each signs with its own key. Each tenant's cluster
// accepts only that tenant's key.
func TestAckPoolTenantsNotMerged(t *testing.T) {
	a := fakeNormal(t, rmqfake.Credentials("AK-A", "secret-a"))
	b := fakeNormal(t, rmqfake.Credentials("AK-B", "secret-b"))
	crA := client.Credentials{AccessKey: "AK-A", AccessSecret: "secret-a"}
	crB := client.Credentials{AccessKey: "AK-B", AccessSecret: "secret-b"}
	hA, hB := received(t, a, crA, 1)[0], received(t, b, crB, 1)[0]
	resolver := func(cr client.Credentials) CredentialsResolver {
		return func(string) (client.Credentials, error) { return cr, nil }
	}
	ctx := rmqtest.Context(t, 20*time.Second)
	// One factory, called from one place: the resolvers share their code.
	tenants := []struct {
		name string
		cr   client.Credentials
		h    ReceiptHandle
	}{{"tenant-a", crA, hA}, {"tenant-b", crB, hB}}
	for _, tn := range tenants {
		pool, err := AcquireAckPool(tenantConfig(tn.name, resolver(tn.cr), a, b))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Release(context.Background())
		if err := pool.Ack(ctx, tn.h); err != nil {
			t.Errorf("%s's ack: %v", tn.name, err)
		}
	}
	if acked(a) != 1 || acked(b) != 1 {
		t.Errorf("acked A %d, B %d; want 1 each", acked(a), acked(b))
	}
}

func tenantConfig(name string, r CredentialsResolver, servers ...*rmqfake.Server) AckPoolConfig {
	cfg := AckPoolConfig{Name: name, Credentials: r}
	for _, s := range servers {
		cfg.AllowedEndpoints = append(cfg.AllowedEndpoints, s.Addr())
	}
	return cfg
}

// TestAckPoolNameRequired (#2): a resolver without a pool name is refused.
func TestAckPoolNameRequired(t *testing.T) {
	_, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: "127.0.0.1:1"},
		Credentials: func(string) (client.Credentials, error) { return client.Credentials{}, nil }})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "Name" {
		t.Errorf("resolver without Name: %v, want an OptionError on Name", err)
	}
	if _, err := AcquireAckPool(AckPoolConfig{}); !errors.As(err, &oe) {
		t.Errorf("no endpoints at all: %v, want an OptionError", err)
	}
}

// TestAckPoolTLSIdentity (#2): two TLS configs make two pools; one config
// acquired twice makes one.
func TestAckPoolTLSIdentity(t *testing.T) {
	conn := Connection{Endpoints: "127.0.0.1:1"}
	c1, c2 := conn, conn
	c1.TLS, c2.TLS = &tls.Config{ServerName: "a"}, &tls.Config{ServerName: "b"}
	p1, err := AcquireAckPool(AckPoolConfig{Connection: c1})
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Release(context.Background())
	p2, err := AcquireAckPool(AckPoolConfig{Connection: c2})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release(context.Background())
	p3, err := AcquireAckPool(AckPoolConfig{Connection: c1})
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Release(context.Background())
	if sharedOf(p1) == sharedOf(p2) {
		t.Error("two TLS configs share one pool")
	}
	if sharedOf(p1) != sharedOf(p3) {
		t.Error("one TLS config acquired twice made two pools")
	}
}

func sharedOf(p *AckPool) *ackPool { return p.s }

// TestAckPoolEndpointAllowlist (#10): a handle naming an endpoint the pool
// was not configured for fails without any RPC to it.
func TestAckPoolEndpointAllowlist(t *testing.T) {
	home, other := fakeNormal(t), fakeNormal(t)
	h := received(t, other, client.Credentials{}, 1)[0]
	calls := countCalls(other, "")
	before := calls.Load()
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: home.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 10*time.Second)
	if err := pool.Ack(ctx, h); !errors.Is(err, ErrEndpointNotAllowed) {
		t.Errorf("ack to an endpoint the pool was not configured for: %v, want ErrEndpointNotAllowed", err)
	}
	if _, err := pool.ChangeInvisibleDuration(ctx, h, time.Minute); !errors.Is(err, ErrEndpointNotAllowed) {
		t.Errorf("change to an endpoint the pool was not configured for: %v, want ErrEndpointNotAllowed", err)
	}
	forged := h
	forged.Endpoints = home.Addr() + ";" + other.Addr() // one allowed address is not enough
	if err := pool.Ack(ctx, forged); !errors.Is(err, ErrEndpointNotAllowed) {
		t.Errorf("ack naming an allowed and a foreign address: %v, want ErrEndpointNotAllowed", err)
	}
	if n := calls.Load() - before; n != 0 {
		t.Errorf("the other endpoint received %d calls", n)
	}
	pool.s.mu.Lock()
	clients := len(pool.s.clients)
	pool.s.mu.Unlock()
	if clients != 0 {
		t.Errorf("%d ack clients created for refused handles", clients)
	}
	// An explicit allowlist serves several clusters.
	multi, err := AcquireAckPool(AckPoolConfig{AllowedEndpoints: []string{home.Addr(), other.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer multi.Release(context.Background())
	if err := multi.Ack(ctx, h); err != nil {
		t.Errorf("ack through a pool allowed both clusters: %v", err)
	}
	if n := acked(other); n != 1 {
		t.Errorf("acked %d, want 1", n)
	}
}

// TestAckPoolReleasePerHolder (#12): a holder's second Release is a no-op;
// another holder's pool keeps working.
func TestAckPoolReleasePerHolder(t *testing.T) {
	s := fakeNormal(t)
	h := received(t, s, client.Credentials{}, 1)[0]
	cfg := AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}}
	a, err := AcquireAckPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := AcquireAckPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	a.Release(context.Background())
	a.Release(context.Background())
	if err := b.Ack(rmqtest.Context(t, 10*time.Second), h); err != nil {
		t.Errorf("ack through the other holder: %v", err)
	}
}

// TestDuplicateAckInOneBatch (#22): two acks of one handle in one batch both
// get the broker's answer.
func TestDuplicateAckInOneBatch(t *testing.T) {
	s := fakeNormal(t)
	h := received(t, s, client.Credentials{}, 1)[0]
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, Linger: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 10*time.Second)
	f1, f2 := pool.AckAsync(ctx, h), pool.AckAsync(ctx, h)
	<-f1.Done()
	<-f2.Done()
	if f1.Err() != nil || f2.Err() != nil {
		t.Errorf("acks: %v, %v; want nil, nil", f1.Err(), f2.Err())
	}
	if n := acked(s); n != 1 {
		t.Errorf("acked %d, want 1", n)
	}
}

// stallAcks makes s hold every AckMessage for d.
func stallAcks(s *rmqfake.Server, d time.Duration) {
	s.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict { return rmqfake.Verdict{Delay: d} })
}

// TestAckHonoursContext (#7): with acks stalled on the broker, Ack with a
// 200 ms context returns by its deadline, even when the batcher is full.
func TestAckHonoursContext(t *testing.T) {
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, 8)
	stallAcks(s, time.Minute)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr(), RequestTimeout: 5 * time.Second}, MaxBatch: 1, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pool.Release(ctx)
	}()
	bg := rmqtest.Context(t, 30*time.Second)
	for _, h := range hs[:5] { // one on the wire, four fill the batcher's queue (MaxBatch × 4)
		pool.AckAsync(bg, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = pool.Ack(ctx, hs[7])
	if el := time.Since(t0); el > 600*time.Millisecond {
		t.Errorf("Ack with a 200 ms context returned after %v", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrAckNotSent) {
		t.Errorf("Ack queued behind a full batcher: %v, want ErrAckNotSent and context.DeadlineExceeded", err)
	}
}

// TestAckOutcomeUnknown (#7): an ack on the wire when its ctx ends says its
// outcome is unknown; one whose ctx ended before it was sent says it was not
// sent, and nothing goes out.
func TestAckOutcomeUnknown(t *testing.T) {
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, 2)
	var onWire = make(chan struct{}, 10)
	s.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict {
		onWire <- struct{}{}
		return rmqfake.Verdict{Delay: time.Minute}
	})
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr(), RequestTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		pool.Release(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = pool.Ack(ctx, hs[0])
	if el := time.Since(t0); el > 600*time.Millisecond {
		t.Errorf("Ack with a 200 ms context returned after %v", el)
	}
	if !errors.Is(err, ErrAckOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stalled ack: %v, want ErrAckOutcomeUnknown and context.DeadlineExceeded", err)
	}
	if len(onWire) != 1 {
		t.Errorf("%d AckMessage calls, want 1", len(onWire))
	}
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := pool.Ack(done, hs[1]); !errors.Is(err, ErrAckNotSent) || !errors.Is(err, context.Canceled) {
		t.Errorf("ack with an ended context: %v, want ErrAckNotSent and context.Canceled", err)
	}
	f := pool.AckAsync(done, hs[1])
	<-f.Done()
	if !errors.Is(f.Err(), ErrAckNotSent) {
		t.Errorf("AckAsync with an ended context: %v, want ErrAckNotSent", f.Err())
	}
	if len(onWire) != 1 {
		t.Errorf("%d AckMessage calls, want still 1", len(onWire))
	}
}

// TestReleaseHonoursContext (#7): Release with a 200 ms context returns by
// its deadline while an ack is stalled on the broker.
func TestReleaseHonoursContext(t *testing.T) {
	s := fakeNormal(t)
	h := received(t, s, client.Credentials{}, 1)[0]
	stallAcks(s, time.Minute)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr(), RequestTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f := pool.AckAsync(rmqtest.Context(t, 30*time.Second), h)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = pool.Release(ctx)
	if el := time.Since(t0); el > 600*time.Millisecond {
		t.Errorf("Release with a 200 ms context returned after %v", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release cut short: %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-f.Done():
	case <-time.After(time.Second):
		t.Fatal("the stalled ack's future was not completed by Release")
	}
	if !errors.Is(f.Err(), ErrAckOutcomeUnknown) {
		t.Errorf("a stalled ack cut short by Release: %v, want ErrAckOutcomeUnknown", f.Err())
	}
}

// TestAckWithdrawnFromQueue (#7): an AckAsync whose ctx ends while it waits
// in the batch queue is not sent and says so.
func TestAckWithdrawnFromQueue(t *testing.T) {
	s := fakeNormal(t)
	h := received(t, s, client.Credentials{}, 1)[0]
	acks := countCalls(s, "AckMessage")
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, Linger: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	f := pool.AckAsync(ctx, h)
	select {
	case <-f.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the withdrawn ack never completed")
	}
	if !errors.Is(f.Err(), ErrAckNotSent) || !errors.Is(f.Err(), context.DeadlineExceeded) {
		t.Errorf("ack whose ctx ended in the queue: %v, want ErrAckNotSent and context.DeadlineExceeded", f.Err())
	}
	if n := acks.Load(); n != 0 {
		t.Errorf("%d AckMessage calls for a withdrawn ack", n)
	}
}

// TestAckPoolRPCsInFlight: the acks of one group and topic go out in up to
// MaxInFlight RPCs at once, never more; each ack gets its own result and the
// stats count every ack and RPC once.
func TestAckPoolRPCsInFlight(t *testing.T) {
	s := fakeNormal(t)
	const n, inFlight = 6, 2
	hs := received(t, s, client.Credentials{}, n)
	onWire := make(chan struct{}, 2*n)
	// Each RPC is held until the test releases it. (A Delay on a manual
	// clock raced: under load the test could move the clock before the fake
	// armed the RPC's timer, which then never fired.)
	release, over := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(over) })
	s.Intercept("AckMessage", func(rmqfake.Call) rmqfake.Verdict {
		onWire <- struct{}{}
		select {
		case <-release:
		case <-over:
		}
		return rmqfake.Verdict{}
	})
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr(), RequestTimeout: 20 * time.Second},
		MaxBatch: 1, Linger: time.Millisecond, MaxInFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 30*time.Second)
	fs := make([]*AckFuture, n)
	for i, h := range hs {
		fs[i] = pool.AckAsync(ctx, h)
	}
	done := func() (k int) {
		for _, f := range fs {
			select {
			case <-f.Done():
				k++
			default:
			}
		}
		return k
	}
	arrived := 0
	for arrived < n {
		held := min(inFlight, n-arrived)
		for range held {
			select {
			case <-onWire:
				arrived++
			case <-time.After(5 * time.Second):
				t.Fatalf("%d ack RPCs arrived with %d answered; want %d on the wire at once", arrived, done(), inFlight)
			}
		}
		// The slots are all taken: no further RPC may leave until one is
		// answered.
		select {
		case <-onWire:
			t.Fatalf("ack RPC %d left with %d answered: more than %d on the wire", arrived+1, done(), inFlight)
		case <-time.After(100 * time.Millisecond):
		}
		if d := done(); d != arrived-held {
			t.Fatalf("%d acks answered with %d RPCs sent and the last %d held, want %d", d, arrived, held, arrived-held)
		}
		for range held {
			release <- struct{}{}
		}
		// Every released ack gets its answer before the next round counts.
		for deadline := time.Now().Add(5 * time.Second); done() < arrived; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d acks answered of the %d released", done(), arrived)
			}
		}
	}
	for i, f := range fs {
		if err := f.wait(ctx); err != nil {
			t.Errorf("ack %d: %v", i, err)
		}
	}
	if got := acked(s); got != n {
		t.Errorf("broker acked %d, want %d", got, n)
	}
	if st := pool.Stats(); st.Acks != n || st.AckRPCs != n {
		t.Errorf("stats %+v, want %d acks in %d RPCs", st, n, n)
	}
}

// TestAckPoolIdleAckNoLinger: with the default config, an ack on an idle
// pool (a free RPC slot) leaves at once: it costs one RPC's latency, not a
// linger. The pool used to hold every batch open for its 5 ms Linger, so no
// ack could complete faster than that; the fastest of 20 sequential acks
// (each waiting for its answer, as a lite topic's next message waits for
// its predecessor's ack) must now beat it.
func TestAckPoolIdleAckNoLinger(t *testing.T) {
	const n, oldLinger = 20, 5 * time.Millisecond
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, n)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 20*time.Second)
	fastest := time.Hour
	for i, h := range hs {
		t0 := time.Now()
		if err := pool.Ack(ctx, h); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
		fastest = min(fastest, time.Since(t0))
	}
	if fastest >= oldLinger {
		t.Errorf("fastest of %d acks on an idle pool took %v, want < %v (no linger)", n, fastest, oldLinger)
	}
	if st := pool.Stats(); st.Acks != n || st.AckRPCs != n {
		t.Errorf("stats %+v, want %d acks in %d RPCs (one per sequential ack)", st, n, n)
	}
}

// TestAckPoolBatchesWhileSlotsBusy: while all MaxInFlight RPCs are out, acks
// accumulate and leave as one RPC as soon as a slot frees, each with its own
// result; the stats count them once.
func TestAckPoolBatchesWhileSlotsBusy(t *testing.T) {
	mc := rmqfake.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := fakeNormal(t, rmqfake.WithClock(mc))
	const queued = 5
	hs := received(t, s, client.Credentials{}, 1+queued)
	onWire := make(chan int, 8) // entries per RPC as it arrives
	// Each RPC is held until the test releases it. (A Delay on the manual
	// clock raced: under load the test could advance the clock before the
	// fake armed the RPC's timer, which then never fired.)
	release := make(chan struct{})
	s.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		onWire <- len(c.Request.(*v2.AckMessageRequest).GetEntries())
		<-release
		return rmqfake.Verdict{}
	})
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr(), RequestTimeout: 20 * time.Second},
		MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	// A test that ends early lets every held RPC go before the pool's
	// release (deferred calls run last first), which would wait for them.
	defer close(release)
	ctx := rmqtest.Context(t, 30*time.Second)
	wire := func() int {
		t.Helper()
		select {
		case k := <-onWire:
			return k
		case <-time.After(5 * time.Second):
			t.Fatal("no ack RPC arrived")
			return 0
		}
	}
	first := pool.AckAsync(ctx, hs[0])
	if k := wire(); k != 1 {
		t.Fatalf("first RPC carried %d entries, want 1 (it leaves at once)", k)
	}
	fs := make([]*AckFuture, queued)
	for i, h := range hs[1:] {
		fs[i] = pool.AckAsync(ctx, h)
	}
	select {
	case k := <-onWire:
		t.Fatalf("an RPC of %d entries left while the only slot was taken", k)
	case <-time.After(100 * time.Millisecond):
	}
	release <- struct{}{}
	if err := first.wait(ctx); err != nil {
		t.Fatalf("first ack: %v", err)
	}
	if k := wire(); k != queued {
		t.Fatalf("the RPC after the slot freed carried %d entries, want all %d queued", k, queued)
	}
	release <- struct{}{}
	for i, f := range fs {
		if err := f.wait(ctx); err != nil {
			t.Errorf("queued ack %d: %v", i, err)
		}
	}
	if got := acked(s); got != 1+queued {
		t.Errorf("broker acked %d, want %d", got, 1+queued)
	}
	if st := pool.Stats(); st.Acks != 1+queued || st.AckRPCs != 2 {
		t.Errorf("stats %+v, want %d acks in 2 RPCs", st, 1+queued)
	}
}

// TestAckPoolAllowRemembersOnlyAllowed: allow remembers the endpoint strings
// it found allowed (so it parses each once), never a refused one, and no
// more than maxAllowedSeen of them.
func TestAckPoolAllowRemembersOnlyAllowed(t *testing.T) {
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: "127.0.0.1:7001"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	p := pool.s
	for range 2 { // the second round answers from what the first remembered
		if _, err := p.allow("127.0.0.1:7001"); err != nil {
			t.Fatalf("allowed endpoint: %v", err)
		}
		for _, bad := range []string{"127.0.0.1:7002", "127.0.0.1:7001;127.0.0.1:7002", "no-port"} {
			if _, err := p.allow(bad); err == nil {
				t.Errorf("%q allowed", bad)
			}
		}
	}
	seen := func() int {
		m := p.allowedSeen.Load()
		if m == nil {
			return 0
		}
		for k := range *m {
			if k != "127.0.0.1:7001" && !strings.HasPrefix(k, "127.0.0.1:7001;") {
				t.Errorf("remembered %q", k)
			}
		}
		return len(*m)
	}
	if n := seen(); n != 1 {
		t.Errorf("remembers %d strings, want 1", n)
	}
	// Many spellings of the allowed address: all allowed, at most
	// maxAllowedSeen remembered.
	for i := range 3 * maxAllowedSeen {
		s := "127.0.0.1:7001" + strings.Repeat(";127.0.0.1:7001", i+1)
		if _, err := p.allow(s); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	}
	if n := seen(); n > maxAllowedSeen {
		t.Errorf("remembers %d strings, want at most %d", n, maxAllowedSeen)
	}
}

// BenchmarkAckPoolCheck is the per-ack validation of a handle (its fields
// and its endpoints against the allowlist).
func BenchmarkAckPoolCheck(b *testing.B) {
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: "127.0.0.1:7001"}})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Release(context.Background())
	h := ReceiptHandle{Endpoints: "127.0.0.1:7001", Group: "g", Topic: "t", MessageID: "01ABCDEF0123456789",
		Handle: strings.Repeat("h", 120), LiteTopic: "l000001"}
	b.ReportAllocs()
	for b.Loop() {
		if err := pool.s.check(h); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAckPoolKeySeparatesCredentials: pools are shared only by equal
// identities. Two configurations differing only in the security token, or
// only in having a credentials resolver, got one pool, whose acks then went
// out with the first holder's token (or the other's credentials).
func TestAckPoolKeySeparatesCredentials(t *testing.T) {
	base := func() AckPoolConfig {
		return AckPoolConfig{Name: "t", Connection: Connection{Endpoints: "127.0.0.1:7001",
			Credentials: client.Credentials{AccessKey: "ak", AccessSecret: "sk", SecurityToken: "t1"}}}
	}
	acquire := func(c AckPoolConfig) *ackPool {
		t.Helper()
		p, err := AcquireAckPool(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Release(context.Background()) })
		return p.s
	}
	same := acquire(base())
	if acquire(base()) != same {
		t.Fatal("two equal configurations got two pools")
	}
	token := base()
	token.Connection.Credentials.SecurityToken = "t2"
	if acquire(token) == same {
		t.Error("a different security token shares the pool")
	}
	resolver := base()
	resolver.Credentials = func(string) (client.Credentials, error) { return client.Credentials{}, nil }
	if acquire(resolver) == same {
		t.Error("a pool with a credentials resolver shares the pool of one without")
	}
	if strings.Contains(same.key, "sk") || strings.Contains(same.key, "t1") {
		t.Errorf("the pool key holds a secret: %q", same.key)
	}
}

// TestAckPoolHandleSpanningTwoClustersRefused: a pool configured for two
// clusters refuses a handle naming an address of each (one set of
// credentials would reach both), and asks its resolver for the access point
// as configured, whatever the handle's spelling.
func TestAckPoolHandleSpanningTwoClustersRefused(t *testing.T) {
	var asked []string
	var mu sync.Mutex
	pool, err := AcquireAckPool(AckPoolConfig{Name: "two", AllowedEndpoints: []string{"127.0.0.1:7001", " 127.0.0.1:7002;127.0.0.1:7003"},
		Credentials: func(ep string) (client.Credentials, error) {
			mu.Lock()
			asked = append(asked, ep)
			mu.Unlock()
			return client.Credentials{AccessKey: "ak-" + ep, AccessSecret: "s"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	p := pool.s
	if _, err := p.client("127.0.0.1:7001;127.0.0.1:7002", ""); !errors.Is(err, ErrEndpointNotAllowed) {
		t.Fatalf("a handle naming both clusters: %v, want ErrEndpointNotAllowed", err)
	}
	if _, err := p.client("127.0.0.1:7003;127.0.0.1:07002", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client("127.0.0.1:7001", ""); err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:7002;127.0.0.1:7003", "127.0.0.1:7001"}; !slices.Equal(asked, want) {
		t.Fatalf("the resolver was asked for %q, want %q", asked, want)
	}
}

// TestAckPoolNormalisesHandleEndpoints: spellings of one address in handles
// (a leading zero in the port, repeats, order, spaces) share one client and
// one batcher: handles from outside cannot make a pool open a connection
// per spelling.
func TestAckPoolNormalisesHandleEndpoints(t *testing.T) {
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: "127.0.0.1:7001;127.0.0.1:7002"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	p := pool.s
	done, cancel := context.WithCancel(context.Background())
	cancel() // nothing is sent: the acks below only open what they need
	for _, ep := range []string{"127.0.0.1:7001;127.0.0.1:7002", "127.0.0.1:7002;127.0.0.1:7001", "127.0.0.1:07001;127.0.0.1:007002",
		" 127.0.0.1:7001 ; 127.0.0.1:7002;127.0.0.1:7001"} {
		if _, err := p.client(ep, ""); err != nil {
			t.Fatalf("%q: %v", ep, err)
		}
		h := ReceiptHandle{Endpoints: ep, Group: "g", Topic: "t", MessageID: "m", Handle: "h"}
		f := newFuture(nil)
		p.enqueue(done, h, f)
		if err := f.wait(context.Background()); !errors.Is(err, ErrAckNotSent) {
			t.Fatalf("%q: %v, want ErrAckNotSent", ep, err)
		}
	}
	p.mu.Lock()
	clients, batchers := len(p.clients), len(p.batchers)
	p.mu.Unlock()
	if clients != 1 || batchers != 1 {
		t.Fatalf("%d clients and %d batchers for one address set, want 1 and 1", clients, batchers)
	}
}

// TestAckPoolWithoutResolverMixesEntries: without a resolver every entry has
// the connection's one identity, so a handle may name addresses of several
// entries (a source's Endpoints "a;b" against entries "a" and "b").
func TestAckPoolWithoutResolverMixesEntries(t *testing.T) {
	pool, err := AcquireAckPool(AckPoolConfig{AllowedEndpoints: []string{"127.0.0.1:7001", "127.0.0.1:7002"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	if _, err := pool.s.client("127.0.0.1:7001;127.0.0.1:7002", ""); err != nil {
		t.Fatalf("a handle naming both entries: %v", err)
	}
	if _, err := pool.s.client("127.0.0.1:7001;127.0.0.1:7003", ""); !errors.Is(err, ErrEndpointNotAllowed) {
		t.Fatalf("a handle naming an address of no entry: %v, want ErrEndpointNotAllowed", err)
	}
}

// TestAckPoolOverlappingEntriesWithResolverRefused: with a Credentials
// resolver an address in two AllowedEndpoints entries is refused up front
// (its handles would be acked with whichever entry's credentials came
// first); without a resolver every entry has one identity and overlap is
// harmless.
func TestAckPoolOverlappingEntriesWithResolverRefused(t *testing.T) {
	resolver := func(string) (client.Credentials, error) {
		return client.Credentials{AccessKey: "ak", AccessSecret: "s"}, nil
	}
	cfg := AckPoolConfig{Name: "overlap", Credentials: resolver, AllowedEndpoints: []string{"127.0.0.1:7001;127.0.0.1:7002", "127.0.0.1:07002"}}
	var oe *OptionError
	if err := cfg.Validate(); !errors.As(err, &oe) || oe.Option != "AllowedEndpoints" || !strings.Contains(err.Error(), "127.0.0.1:7002") {
		t.Fatalf("Validate with an address in two entries and a resolver: %v, want an *OptionError on AllowedEndpoints naming the address", err)
	}
	if p, err := AcquireAckPool(cfg); err == nil {
		p.Release(context.Background())
		t.Fatal("AcquireAckPool accepted an address in two entries with a resolver")
	}
	cfg.Credentials, cfg.Name = nil, ""
	p, err := AcquireAckPool(cfg)
	if err != nil {
		t.Fatalf("without a resolver: %v", err)
	}
	p.Release(context.Background())
}
