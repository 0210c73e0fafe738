package officialclient_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Fixtures of scripts/rocketmq/fixtures.txt the push flows use (rmqfake
// gets the same file).
const (
	pushTopic = "rmqflow-official-push"
	pushGroup = "rmqflow-official-push-g"
	liteTopic = "rmqflow-official-lite"
	liteGroup = "rmqflow-official-lite-g"
)

// pushMessages is how many messages each push flow sends; message failOnce
// fails its first consumption.
const (
	pushMessages = 30
	failOnce     = 7
)

// targets are the brokers the official clients' flows run against: rmqfake
// with the project's fixtures, and the real broker of `make test`
// ($RMQFLOW_ENDPOINT), which must be there: a flow that passes only on the
// emulator proves nothing.
func targets(t *testing.T) map[string]string {
	t.Helper()
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures())
	real := os.Getenv("RMQFLOW_ENDPOINT")
	if real == "" {
		t.Fatal("RMQFLOW_ENDPOINT is not set: run through `make test` (scripts/test.sh), which starts RocketMQ")
	}
	return map[string]string{"rmqfake": s.Addr(), "rocketmq": real}
}

// quietClient marks a flow test parallel: the flows share nothing but the
// targets (each run has its own keys and lite topics), and the official
// client's process-wide settings are made once in TestMain.
func quietClient(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// TestMain silences the official client's console log and makes it dial
// plaintext (the TLS subtest of TestOfficialClientSendReceiveAck, which is
// not parallel, sets EnableSsl itself and restores it).
func TestMain(m *testing.M) {
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	rmq.EnableSsl = false
	os.Exit(m.Run())
}

// consumption records what a push consumer's listener saw.
type consumption struct {
	mu       sync.Mutex
	run      string
	attempts map[int][]int32 // body → delivery attempts seen
	first    []int           // bodies in the order of their first delivery
	done     []int           // bodies consumed with SUCCESS, in order
	all      chan struct{}
}

func newConsumption(run string) *consumption {
	return &consumption{run: run, attempts: map[int][]int32{}, all: make(chan struct{})}
}

// listener fails message failOnce on its first delivery and consumes the
// rest; messages of other runs are consumed and ignored.
func (c *consumption) listener() *rmq.FuncMessageListener {
	return &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
		if !slices.Contains(mv.GetKeys(), c.run) {
			return rmq.SUCCESS
		}
		n, err := strconv.Atoi(string(mv.GetBody()))
		if err != nil {
			return rmq.SUCCESS
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.attempts[n]) == 0 {
			c.first = append(c.first, n)
		}
		c.attempts[n] = append(c.attempts[n], mv.GetDeliveryAttempt())
		if n == failOnce && len(c.attempts[n]) == 1 {
			return rmq.FAILURE
		}
		if !slices.Contains(c.done, n) {
			c.done = append(c.done, n)
			if len(c.done) == pushMessages {
				close(c.all)
			}
		}
		return rmq.SUCCESS
	}}
}

func (c *consumption) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-c.all:
	case <-time.After(d):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("after %v: consumed %d of %d (%v), attempts %v", d, len(c.done), pushMessages, c.done, c.attempts)
	}
}

func (c *consumption) check(t *testing.T, ordered bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.attempts[failOnce]; len(a) < 2 || a[0] != 1 || a[1] != 2 {
		t.Errorf("message %d: attempts %v, want it failed on attempt 1 and consumed on attempt 2", failOnce, a)
	}
	for n, a := range c.attempts {
		if n != failOnce && len(a) != 1 {
			t.Errorf("message %d consumed %d times (attempts %v), want once", n, len(a), a)
		}
	}
	if ordered {
		want := make([]int, pushMessages)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(c.first, want) {
			t.Errorf("first deliveries in the order %v, want 0..%d in send order", c.first, pushMessages-1)
		}
	}
}

func send(t *testing.T, ep string, topic, lite, run string) {
	t.Helper()
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: ep, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	defer p.GracefulStop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range pushMessages {
		m := &rmq.Message{Topic: topic, Body: []byte(strconv.Itoa(i))}
		m.SetKeys(run)
		if lite != "" {
			m.SetLiteTopic(lite)
		}
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// TestOfficialPushConsumer: the official Go PushConsumer on a normal topic
// receives every message; the one its listener fails comes back (attempt 2)
// and is consumed, the others once each. Against rmqfake and RocketMQ.
func TestOfficialPushConsumer(t *testing.T) {
	quietClient(t)
	for name, ep := range targets(t) {
		t.Run(name, func(t *testing.T) {
			run := fmt.Sprintf("push-%d", time.Now().UnixNano())
			c := newConsumption(run)
			pc, err := rmq.NewPushConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: pushGroup, Credentials: &credentials.SessionCredentials{}},
				rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{pushTopic: rmq.SUB_ALL}),
				rmq.WithPushMessageListener(c.listener()), rmq.WithPushConsumptionThreadCount(4))
			if err != nil {
				t.Fatal(err)
			}
			if err := pc.Start(); err != nil {
				t.Fatalf("push consumer start: %v", err)
			}
			defer pc.GracefulStop()
			send(t, ep, pushTopic, "", run)
			c.wait(t, 90*time.Second)
			c.check(t, false)
		})
	}
}

// TestOfficialLitePushConsumer: the official Go LitePushConsumer subscribes
// one lite topic (SubscribeLite) and gets its messages in send order; the one
// its listener fails is retried by the client and consumed on attempt 2.
// (The client goes on with the rest of a received batch while it retries a
// failed message, so the order of successful consumptions depends on how the
// broker batched them: only the first deliveries are in a promised order.)
// Against rmqfake and RocketMQ.
func TestOfficialLitePushConsumer(t *testing.T) {
	quietClient(t)
	for name, ep := range targets(t) {
		t.Run(name, func(t *testing.T) {
			run := fmt.Sprintf("lite-%d", time.Now().UnixNano())
			c := newConsumption(run)
			lc, err := rmq.NewLitePushConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: liteGroup, Credentials: &credentials.SessionCredentials{}},
				rmq.NewLitePushConsumerConfig(liteTopic, 30*time.Second),
				rmq.WithPushMessageListener(c.listener()), rmq.WithPushConsumptionThreadCount(4))
			if err != nil {
				t.Fatal(err)
			}
			if err := lc.Start(); err != nil {
				t.Fatalf("lite push consumer start: %v", err)
			}
			defer lc.GracefulStop()
			if err := lc.SubscribeLite(run); err != nil {
				t.Fatalf("subscribe lite %s: %v", run, err)
			}
			send(t, ep, liteTopic, run, run)
			c.wait(t, 90*time.Second)
			c.check(t, true)
		})
	}
}
