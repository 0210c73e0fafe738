package rmqwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
	rmqwatermill "github.com/rmqflow/rmqflow/integrations/watermill"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The fixtures of scripts/rocketmq/fixtures.txt these tests use on the real
// broker: a LITE main topic, the exact (not wildcard) lite group of the
// tests, and a pool of more groups for Watermill's consumer-group test.
const (
	wmTopic     = "rmqflow-wm"
	wmGroup     = "rmqflow-wm-g"
	wmGroupPool = 4 // rmqflow-wm-g1 .. rmqflow-wm-g4
)

// realBroker is the real broker of `make test`, which must be there.
func realBroker(t *testing.T) string {
	t.Helper()
	ep := os.Getenv(rmqtest.EnvEndpoint)
	if ep == "" {
		t.Fatalf("%s is not set: run through `make test` (scripts/test.sh), which starts RocketMQ", rmqtest.EnvEndpoint)
	}
	return ep
}

// target is where a suite runs: an endpoint, a mode, and how a consumer
// group name of Watermill's suite maps to a group that exists there.
type target struct {
	endpoint string
	mode     rmqflow.Mode
	group    func(t *testing.T, name string) string
	tune     func(*rmqwatermill.SubscriberConfig)
	fake     *rmqfake.Server // nil on the real broker
}

func (tg *target) publisher(t *testing.T) *rmqwatermill.Publisher {
	t.Helper()
	c := rmqwatermill.PublisherConfig{Sink: rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: tg.endpoint}}, Mode: tg.mode}
	if tg.mode == rmqflow.ModeLite {
		c.MainTopic = wmTopic
	}
	p, err := rmqwatermill.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	// Watermill's suite does not close every publisher and subscriber it
	// makes (TestPublishSubscribeInOrder closes its subscriber before it
	// subscribes); Close is idempotent, so close them all at the end.
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (tg *target) subscriber(t *testing.T, group string) *rmqwatermill.Subscriber {
	t.Helper()
	src := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: tg.endpoint}, Mode: tg.mode,
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}
	if tg.mode == rmqflow.ModeLite {
		src.Lite = []rmqflow.LiteBinding{{Topic: wmTopic, Group: group}}
	} else {
		src.Group = group
	}
	c := rmqwatermill.SubscriberConfig{Source: src, CloseTimeout: 5 * time.Second}
	if tg.tune != nil {
		tg.tune(&c)
	}
	s, err := rmqwatermill.NewSubscriber(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fakeTarget starts rmqfake for mode. It makes each consumer group the suite
// names, with room for many nacks (1000 delivery attempts): in lite mode an
// exact lite group bound to the LITE main topic; in simple mode a normal
// group, and topics are created as they are used.
func fakeTarget(t *testing.T, mode rmqflow.Mode) *target {
	t.Helper()
	var opts []rmqfake.Option
	if mode == rmqflow.ModeSimple {
		opts = append(opts, rmqfake.AutoCreate())
	}
	s := rmqfake.NewForTest(t, append(opts, rmqfake.FastLiteDispatch())...)
	groupOpts := []rmqfake.GroupOption{rmqfake.RetryMax(1000)}
	if mode == rmqflow.ModeLite {
		if err := s.CreateTopic(wmTopic, rmqfake.TopicLite); err != nil {
			t.Fatal(err)
		}
		groupOpts = append(groupOpts, rmqfake.LiteBind(wmTopic))
	}
	var mu sync.Mutex
	made := map[string]bool{}
	group := func(t *testing.T, name string) string {
		mu.Lock()
		defer mu.Unlock()
		if !made[name] {
			if err := s.CreateGroup(name, groupOpts...); err != nil {
				t.Fatal(err)
			}
			made[name] = true
		}
		return name
	}
	return &target{endpoint: s.Addr(), mode: mode, group: group, fake: s}
}

// realTarget is the real broker in lite mode: the suite's consumer groups
// map to the fixture pool, one pool group per name.
func realTarget(t *testing.T) *target {
	t.Helper()
	var mu sync.Mutex
	pool := map[string]string{}
	return &target{endpoint: realBroker(t), mode: rmqflow.ModeLite, group: func(t *testing.T, name string) string {
		mu.Lock()
		defer mu.Unlock()
		if g, ok := pool[name]; ok {
			return g
		}
		if len(pool) == wmGroupPool {
			t.Fatalf("the suite used more than %d consumer groups: add rmqflow-wm-g%d to scripts/rocketmq/fixtures.txt", wmGroupPool, wmGroupPool+1)
		}
		pool[name] = fmt.Sprintf("%s%d", wmGroup, len(pool)+1)
		return pool[name]
	}}
}

// receive waits for the next message of ch.
func receive(t *testing.T, ch <-chan *message.Message, d time.Duration) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("the subscription's channel closed")
		}
		return m
	case <-time.After(d):
		t.Fatalf("no message within %s", d)
		return nil
	}
}

// expectClosed waits for ch to be closed, failing on any message.
func expectClosed(t *testing.T, ch <-chan *message.Message, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("got %s (%s), want the channel closed", m.UUID, m.Payload)
		}
	case <-time.After(d):
		t.Fatalf("the channel is still open after %s", d)
	}
}

func ctxT(t *testing.T) context.Context {
	return rmqtest.Context(t, time.Minute)
}

var errBoom = errors.New("boom")
