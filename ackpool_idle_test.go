package rmqflow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// poolSizes returns the ack queues and clients p holds.
func poolSizes(p *ackPool) (queues, clients int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.batchers), len(p.clients)
}

// TestAckPoolIdleQueuesClosed (issue 24, point 4): handles come from
// anywhere, so the topics, groups and namespaces they name are input. Acks
// of handles naming 300 topics and 20 namespaces (and one valid ack) open
// 321 queues and 21 clients; once IdleTimeout has passed without acks, the
// pool has closed them all and the goroutine count is back near where it
// started. Before the fix, the 321 queues and 21 clients stayed for the life
// of the pool, with 529 goroutines (22 before the acks).
func TestAckPoolIdleQueuesClosed(t *testing.T) {
	const topics, namespaces, idle = 300, 20, time.Second
	s := fakeNormal(t)
	h := received(t, s, client.Credentials{}, 1)[0]
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 30*time.Second)
	base := runtime.NumGoroutine()
	var fs []*AckFuture
	for i := range topics {
		x := h
		x.Topic = fmt.Sprintf("topic-%d", i) // unknown to the broker: the ack fails, which does not matter here
		fs = append(fs, pool.AckAsync(ctx, x))
	}
	for i := range namespaces {
		x := h
		x.Namespace = fmt.Sprintf("ns-%d", i)
		fs = append(fs, pool.AckAsync(ctx, x))
	}
	fs = append(fs, pool.AckAsync(ctx, h))
	for _, f := range fs {
		_ = f.wait(ctx)
	}
	if err := fs[len(fs)-1].Err(); err != nil {
		t.Fatalf("the valid ack: %v", err)
	}
	peak := runtime.NumGoroutine()
	q, c := poolSizes(pool.s)
	t.Logf("after the acks: %d queues, %d clients, %d goroutines (%d before)", q, c, peak, base)
	if n := pool.s.stats.queues.Load(); n != topics+namespaces+1 {
		t.Errorf("%d queues opened, want %d", n, topics+namespaces+1)
	}
	t0 := time.Now()
	deadline := t0.Add(idle + 5*time.Second)
	var now int
	for {
		q, c = poolSizes(pool.s)
		now = runtime.NumGoroutine()
		if q == 0 && c == 0 && now <= base+5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling: there is no event for "idle queues closed"
	}
	t.Logf("idle for %v: %d queues, %d clients, %d goroutines", time.Since(t0).Round(time.Millisecond), q, c, now)
	if q != 0 || c != 0 || now > base+5 {
		t.Errorf("idle for more than IdleTimeout: %d queues, %d clients, %d goroutines; want 0, 0 and about %d", q, c, now, base)
	}
	// The pool still works: the next ack opens what it needs again.
	if err := pool.Ack(ctx, received(t, s, client.Credentials{}, 1)[0]); err != nil {
		t.Errorf("ack after the idle queues were closed: %v", err)
	}
}

// TestAckPoolMaxQueuesFlushesClosed: with MaxQueues 1 and a long Linger,
// opening a second queue closes the first, which sends the ack it holds at
// once instead of losing it or waiting out its Linger. Before the fix,
// there was no cap: the ack waited its 10 s Linger.
func TestAckPoolMaxQueuesFlushesClosed(t *testing.T) {
	s := fakeNormal(t)
	h := received(t, s, client.Credentials{}, 1)[0]
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, Linger: 10 * time.Second, MaxQueues: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 30*time.Second)
	f := pool.AckAsync(ctx, h)
	other := h
	other.Topic = "another-topic"
	pool.AckAsync(ctx, other) // its queue sends it at Release
	select {
	case <-f.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the ack held by the closed queue was not sent within 3 s (Linger 10 s)")
	}
	if f.Err() != nil {
		t.Errorf("ack held by the closed queue: %v", f.Err())
	}
	if n := acked(s); n != 1 {
		t.Errorf("acked %d, want 1", n)
	}
	if q, _ := poolSizes(pool.s); q != 1 {
		t.Errorf("%d queues open, want 1 (MaxQueues)", q)
	}
}

// TestAckPoolEvictionLosesNoAck: acks submitted while their queues close
// for idleness (IdleTimeout 2 ms, acks 0 to 6 ms apart from 8 goroutines,
// over two topics so that MaxQueues 1 closes queues too) are all sent and
// all succeed. Run it with -race.
func TestAckPoolEvictionLosesNoAck(t *testing.T) {
	const n, workers = 160, 8
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, n)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, IdleTimeout: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	capped, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, IdleTimeout: 2 * time.Millisecond, MaxQueues: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Release(context.Background())
	ctx := rmqtest.Context(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				time.Sleep(time.Duration(rand.IntN(6000)) * time.Microsecond)
				p := pool
				if i%2 == 1 {
					p = capped
					// An ack of another topic on the capped pool closes the
					// queue of tn, concurrently with the next ack there.
					other := hs[i]
					other.Topic = "other"
					p.AckAsync(ctx, other)
				}
				if err := p.Ack(ctx, hs[i]); err != nil {
					errs <- fmt.Errorf("ack %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := acked(s); got != n {
		t.Errorf("broker acked %d, want %d", got, n)
	}
	// The test is worth something only if queues closed under the acks.
	opened := pool.s.stats.queues.Load() + capped.s.stats.queues.Load()
	t.Logf("%d queues opened for %d acks", opened, n)
	if opened < n/4 {
		t.Errorf("%d queues opened for %d acks: too few closed under the acks to test the race", opened, n)
	}
}

// TestAckPoolSubmitRacesClose replays the race of an ack with the close of
// its queue step by step: the ack has found and registered with the queue
// when the queue closes (for idleness or MaxQueues), and only then submits.
// With room in the closing queue it gets in and the queue's last flush sends
// it; with the queue full (MaxBatch 1: 4 acks) it is refused with
// errQueueClosed and the pool hands it to a new queue. The broker acks every
// one.
func TestAckPoolSubmitRacesClose(t *testing.T) {
	const rounds, room = 10, 4
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, rounds*(1+room))
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	p := pool.s
	ctx := rmqtest.Context(t, 30*time.Second)
	var fs []*AckFuture
	refused := 0
	for i := range rounds {
		h, fill := hs[i*(1+room)], hs[i*(1+room)+1:(i+1)*(1+room)]
		full := i%2 == 1
		var (
			b  *batcher
			ac *ackClient
		)
		if full {
			// A queue just opened, whose goroutine has not started: it
			// cannot drain what it holds while the test fills it.
			if ac, err = p.client(h.Endpoints, h.Namespace); err != nil {
				t.Fatal(err)
			}
			b = newBatcher(batchKey{s.Addr(), h.Namespace, h.Group, h.Topic}, ac.c, p)
			b.register()
			b.close(errQueueClosed)
			for _, x := range fill {
				f := newFuture(nil)
				b.in <- ackReq{ctx: ctx, h: x, f: f}
				fs = append(fs, f)
			}
		} else {
			if b, err = p.batcher(h); err != nil {
				t.Fatal(err)
			}
			p.mu.Lock()
			delete(p.batchers, b.key)
			b.close(errQueueClosed)
			p.mu.Unlock()
			for _, x := range fill {
				fs = append(fs, pool.AckAsync(ctx, x))
			}
		}
		f := newFuture(nil)
		fs = append(fs, f)
		err = b.submit(ctx, ackReq{ctx: ctx, h: h, f: f})
		switch {
		case errors.Is(err, errQueueClosed): // with room, only if the reused queue filled up meanwhile
			if full {
				refused++
			}
			p.enqueue(ctx, h, f) // what enqueue does on errQueueClosed
		case err != nil:
			t.Fatalf("round %d (full %v): submit to a closing queue: %v", i, full, err)
		}
		if full { // now the closed queue sends what it holds
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				b.run()
				p.unref(ac)
			}()
		}
	}
	for i, f := range fs {
		if err := f.wait(ctx); err != nil {
			t.Errorf("ack %d: %v", i, err)
		}
	}
	if refused != rounds/2 {
		t.Errorf("%d submits refused by a full closing queue, want %d", refused, rounds/2)
	}
	if got := acked(s); got != int64(len(hs)) {
		t.Errorf("broker acked %d, want %d", got, len(hs))
	}
}
