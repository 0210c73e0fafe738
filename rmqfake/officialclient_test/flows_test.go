package officialclient_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

const (
	fifoTopic  = "rmqflow-official-fifo" // 2 queues
	fifoGroup  = "rmqflow-official-fifo-g"
	delayTopic = "rmqflow-official-delay"
	delayGroup = "rmqflow-official-delay-g"
)

func config(ep, group string) *rmq.Config {
	return &rmq.Config{Endpoint: ep, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
}

func startProducer(t *testing.T, ep string, topics ...string) rmq.Producer {
	t.Helper()
	p, err := rmq.NewProducer(config(ep, ""), rmq.WithTopics(topics...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	t.Cleanup(func() { _ = p.GracefulStop() })
	return p
}

// TestOfficialFIFOPushConsumer: a FIFO producer sends 30 messages of one
// message group; the official PushConsumer of a FIFO group (max 2 attempts)
// gets them in send order; a message its listener always fails is retried by
// the client once, then forwarded to the DLQ, and the queue goes on: every
// other message is consumed once. Against rmqfake and RocketMQ.
func TestOfficialFIFOPushConsumer(t *testing.T) {
	quietClient(t)
	for name, ep := range targets(t) {
		t.Run(name, func(t *testing.T) {
			run := fmt.Sprintf("fifo-%d", time.Now().UnixNano())
			var mu sync.Mutex
			var first, done []int
			attempts := map[int][]int32{}
			all := make(chan struct{})
			listener := &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
				if !slices.Contains(mv.GetKeys(), run) {
					return rmq.SUCCESS
				}
				n, _ := strconv.Atoi(string(mv.GetBody()))
				mu.Lock()
				defer mu.Unlock()
				if len(attempts[n]) == 0 {
					first = append(first, n)
				}
				attempts[n] = append(attempts[n], mv.GetDeliveryAttempt())
				if n == failOnce {
					return rmq.FAILURE // every time: to the DLQ after max attempts
				}
				done = append(done, n)
				if len(done) == pushMessages-1 && len(attempts[failOnce]) >= 2 {
					close(all)
				}
				return rmq.SUCCESS
			}}
			pc, err := rmq.NewPushConsumer(config(ep, fifoGroup),
				rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{fifoTopic: rmq.SUB_ALL}),
				rmq.WithPushMessageListener(listener), rmq.WithPushConsumptionThreadCount(4))
			if err != nil {
				t.Fatal(err)
			}
			if err := pc.Start(); err != nil {
				t.Fatalf("push consumer start: %v", err)
			}
			defer pc.GracefulStop()
			p := startProducer(t, ep, fifoTopic)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range pushMessages {
				m := &rmq.Message{Topic: fifoTopic, Body: []byte(strconv.Itoa(i))}
				m.SetKeys(run)
				m.SetMessageGroup(run)
				if _, err := p.Send(ctx, m); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			select {
			case <-all:
			case <-time.After(90 * time.Second):
			}
			mu.Lock()
			defer mu.Unlock()
			want := make([]int, pushMessages)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(first, want) {
				t.Errorf("first deliveries %v, want 0..%d in send order", first, pushMessages-1)
			}
			if a := attempts[failOnce]; !slices.Equal(a, []int32{1, 2}) {
				t.Errorf("the always-failing message: attempts %v, want [1 2] (then the DLQ)", a)
			}
			if len(done) != pushMessages-1 {
				t.Errorf("consumed %d of the %d others: %v", len(done), pushMessages-1, done)
			}
			for n, a := range attempts {
				if n != failOnce && len(a) != 1 {
					t.Errorf("message %d delivered %d times", n, len(a))
				}
			}
		})
	}
}

// TestOfficialDelayMessage: a message sent with a delivery time 4 s ahead
// reaches the official SimpleConsumer no earlier than that. Against rmqfake
// and RocketMQ.
func TestOfficialDelayMessage(t *testing.T) {
	quietClient(t)
	for name, ep := range targets(t) {
		t.Run(name, func(t *testing.T) {
			run := fmt.Sprintf("delay-%d", time.Now().UnixNano())
			c, err := rmq.NewSimpleConsumer(config(ep, delayGroup), rmq.WithSimpleAwaitDuration(5*time.Second),
				rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{delayTopic: rmq.SUB_ALL}))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(); err != nil {
				t.Fatalf("consumer start: %v", err)
			}
			defer c.GracefulStop()
			p := startProducer(t, ep, delayTopic)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			due := time.Now().Add(4 * time.Second)
			m := &rmq.Message{Topic: delayTopic, Body: []byte("later")}
			m.SetKeys(run)
			m.SetDelayTimestamp(due)
			if _, err := p.Send(ctx, m); err != nil {
				t.Fatalf("send: %v", err)
			}
			for ctx.Err() == nil {
				mvs, err := c.Receive(ctx, 16, 20*time.Second)
				if err != nil {
					continue
				}
				for _, mv := range mvs {
					_ = c.Ack(ctx, mv)
					if slices.Contains(mv.GetKeys(), run) {
						if early := time.Until(due); early > time.Second {
							t.Errorf("delivered %v before its delivery time", early)
						}
						return
					}
				}
			}
			t.Fatal("the delayed message was not delivered within 60 s")
		})
	}
}

// TestOfficialLiteSuspendAndUnsubscribe: the official LitePushConsumer
// subscribes two lite topics and unsubscribes one: only the other's messages
// arrive. Its listener answers SUSPEND for one message once: that message
// (and what follows it in its batch) comes back and everything is consumed.
// Against rmqfake and RocketMQ.
func TestOfficialLiteSuspendAndUnsubscribe(t *testing.T) {
	quietClient(t)
	for name, ep := range targets(t) {
		t.Run(name, func(t *testing.T) {
			run := fmt.Sprintf("lsu-%d", time.Now().UnixNano())
			keep, drop := run+"-keep", run+"-drop"
			var mu sync.Mutex
			seen := map[int]int{}
			var dropped []string
			var done []int
			all := make(chan struct{})
			listener := &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
				if !slices.Contains(mv.GetKeys(), run) {
					return rmq.SUCCESS
				}
				mu.Lock()
				defer mu.Unlock()
				if mv.GetLiteTopic() == drop {
					dropped = append(dropped, string(mv.GetBody()))
					return rmq.SUCCESS
				}
				n, _ := strconv.Atoi(string(mv.GetBody()))
				seen[n]++
				if n == failOnce && seen[n] == 1 {
					return rmq.NewConsumerResultSuspend(time.Second)
				}
				if !slices.Contains(done, n) {
					done = append(done, n)
					if len(done) == pushMessages {
						close(all)
					}
				}
				return rmq.SUCCESS
			}}
			lc, err := rmq.NewLitePushConsumer(config(ep, liteGroup), rmq.NewLitePushConsumerConfig(liteTopic, 30*time.Second),
				rmq.WithPushMessageListener(listener), rmq.WithPushConsumptionThreadCount(4))
			if err != nil {
				t.Fatal(err)
			}
			if err := lc.Start(); err != nil {
				t.Fatalf("start: %v", err)
			}
			defer lc.GracefulStop()
			for _, lt := range []string{keep, drop} {
				if err := lc.SubscribeLite(lt); err != nil {
					t.Fatalf("subscribe %s: %v", lt, err)
				}
			}
			if err := lc.UnSubscribeLite(drop); err != nil {
				t.Fatalf("unsubscribe %s: %v", drop, err)
			}
			p := startProducer(t, ep, liteTopic)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range pushMessages {
				for _, lt := range []string{keep, drop} {
					m := &rmq.Message{Topic: liteTopic, Body: []byte(strconv.Itoa(i))}
					m.SetKeys(run)
					m.SetLiteTopic(lt)
					if _, err := p.Send(ctx, m); err != nil {
						t.Fatalf("send %d to %s: %v", i, lt, err)
					}
				}
			}
			select {
			case <-all:
			case <-time.After(90 * time.Second):
			}
			mu.Lock()
			defer mu.Unlock()
			if len(done) != pushMessages {
				t.Errorf("consumed %d of %d of the subscribed lite topic (seen %v)", len(done), pushMessages, seen)
			}
			if seen[failOnce] < 2 {
				t.Errorf("the suspended message was seen %d times, want it back after the suspension", seen[failOnce])
			}
			if len(dropped) != 0 {
				t.Errorf("the unsubscribed lite topic delivered %v", dropped)
			}
		})
	}
}
