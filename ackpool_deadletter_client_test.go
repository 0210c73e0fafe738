package rmqflow

import (
	"context"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestDeadLetterForwardReleasesClient: a forward to the dead-letter queue
// (the default of a fired valve) ends its use of the pool's client, as a
// ChangeInvisibleDuration does, so that IdleTimeout closes the client (a
// first version took the client and never let it go: it stayed open for the
// pool's life).
func TestDeadLetterForwardReleasesClient(t *testing.T) {
	s := fakeNormal(t)
	hs := received(t, s, client.Credentials{}, 2)
	pool, err := AcquireAckPool(AckPoolConfig{Connection: Connection{Endpoints: s.Addr()}, IdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	ctx := rmqtest.Context(t, 30*time.Second)
	if err := NewAcker(pool).DeadLetter(ctx, hs[0]); err != nil {
		t.Fatalf("forward: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	var c int
	for time.Now().Before(deadline) {
		if _, c = poolSizes(pool.s); c == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pool.s.mu.Lock()
	users := -1
	for _, ac := range pool.s.clients {
		users = ac.users
	}
	pool.s.mu.Unlock()
	if c != 0 {
		t.Errorf("3 s after a forward with IdleTimeout 100 ms: %d clients open (users %d), want 0", c, users)
	}
}
