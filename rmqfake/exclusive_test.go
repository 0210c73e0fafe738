package rmqfake_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// unsubscribed records the lite topics of the "broker unsubscribed a lite
// topic" lines rmqflow's client logs for each NotifyUnsubscribeLite.
type unsubscribed struct {
	mu    sync.Mutex
	lites []string
	got   chan struct{}
}

func newUnsubscribed() *unsubscribed { return &unsubscribed{got: make(chan struct{}, 16)} }

func (u *unsubscribed) Enabled(context.Context, slog.Level) bool { return true }
func (u *unsubscribed) WithAttrs([]slog.Attr) slog.Handler       { return u }
func (u *unsubscribed) WithGroup(string) slog.Handler            { return u }
func (u *unsubscribed) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "rocketmq: broker unsubscribed a lite topic" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "lite_topic" {
			u.mu.Lock()
			u.lites = append(u.lites, a.Value.String())
			u.mu.Unlock()
			u.got <- struct{}{}
		}
		return true
	})
	return nil
}

func (u *unsubscribed) list() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return fmt.Sprint(u.lites)
}

// await waits for one more notice.
func (u *unsubscribed) await(t *testing.T) {
	t.Helper()
	select {
	case <-u.got:
	case <-time.After(5 * time.Second):
		t.Fatalf("no NotifyUnsubscribeLite came (got %s)", u.list())
	}
}

// TestExclusiveLiteTakeover: in an exclusive lite group a PARTIAL_ADD takes
// the lite topic from the other holder, which is told (NotifyUnsubscribeLite)
// and receives nothing of it any more; the taker goes on from the group's
// offset — or, with ResetOffsetOnTakeover, from the oldest stored message. A
// holder that adds the topic again is told itself and keeps it.
func TestExclusiveLiteTakeover(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			s, _ := start(t)
			opts := []rmqfake.GroupOption{rmqfake.LiteBind(liteTopic), rmqfake.LiteExclusive()}
			if reset {
				opts = append(opts, rmqfake.ResetOffsetOnTakeover())
			}
			const g = "g-excl"
			must(t, s.CreateGroup(g, opts...))
			p := producer(t, s)
			consumer := func(u *unsubscribed) (*client.Client, *client.Session) {
				c := newClient(t, s, client.Config{Logger: slog.New(u)})
				sess, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: g,
					Subscriptions: []client.Subscription{{Topic: liteTopic}}})
				must(t, err)
				return c, sess
			}
			ua, ub := newUnsubscribed(), newUnsubscribed()
			a, sa := consumer(ua)
			b, sb := consumer(ub)
			req := client.ReceiveRequest{Group: g, Topic: liteTopic, Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}

			send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "x", Body: []byte("x1")})
			must(t, sa.SubscribeLite(ctxT(t), liteTopic, "x", nil))
			got := receiveNow(t, a, req)
			if fmtSlice(bodies(got)) != "[x1]" {
				t.Fatalf("A got %v, want [x1]", bodies(got))
			}
			ackAll(t, a, g, liteTopic, got)

			must(t, sb.SubscribeLite(ctxT(t), liteTopic, "x", nil))
			ua.await(t)
			if ua.list() != "[x]" || ub.list() != "[]" {
				t.Fatalf("notices: A %s, B %s; want A told of x, B nothing", ua.list(), ub.list())
			}
			send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "x", Body: []byte("x2")})
			// A, no longer subscribed, polls and waits: nothing is for it.
			parked := receiveAsync(a, req)
			waitPollers(t, s, 1)
			want := "[x2]"
			if reset {
				want = "[x1 x2]" // the wildcard group g-lite still holds x1 in the store
			}
			got = receiveNow(t, b, req)
			if fmtSlice(bodies(got)) != want {
				t.Errorf("B got %v, want %s", bodies(got), want)
			}
			ackAll(t, b, g, liteTopic, got)

			// B adds x again: B is told itself (the broker picks by group)
			// and stays subscribed — and with the reset, the group's
			// offset goes back once more; A hears nothing more.
			must(t, sb.SubscribeLite(ctxT(t), liteTopic, "x", nil))
			ub.await(t)
			send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "x", Body: []byte("x3")})
			want = "[x3]"
			if reset {
				want = "[x1 x2 x3]"
			}
			if got := receiveNow(t, b, req); fmtSlice(bodies(got)) != want {
				t.Errorf("B after its own notice got %v, want %s", bodies(got), want)
			}
			if ua.list() != "[x]" || ub.list() != "[x]" {
				t.Errorf("notices: A %s, B %s; want one each", ua.list(), ub.list())
			}
			select {
			case r := <-parked:
				t.Errorf("A's poll answered %v (%v), want it still waiting", bodies(r.msgs), r.err)
			default:
			}
		})
	}
}
