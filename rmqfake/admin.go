package rmqfake

import (
	"fmt"
	"math"
	"strings"
)

// defaultRetryMax is a group's retry count unless told otherwise (the
// broker's retryMaxTimes default).
const defaultRetryMax = 16

// TopicOption configures CreateTopic.
type TopicOption interface{ applyTopic(*topicConfig) }

// GroupOption configures CreateGroup.
type GroupOption interface{ applyGroup(*groupConfig) }

// ResourceOption configures both topics and groups.
type ResourceOption interface {
	TopicOption
	GroupOption
}

type topicConfig struct {
	queues  int
	ns      string
	liteTTL int // minutes; 0 or less: never
}

type groupConfig struct {
	retryMax       int
	bind           string
	wildcard       bool
	fifo           bool
	exclusive      bool
	resetExclusive bool
	maxEvents      int
	ns             string
}

type topicOpt func(*topicConfig)

func (f topicOpt) applyTopic(c *topicConfig) { f(c) }

type groupOpt func(*groupConfig)

func (f groupOpt) applyGroup(c *groupConfig) { f(c) }

type nsOpt string

func (n nsOpt) applyTopic(c *topicConfig) { c.ns = string(n) }
func (n nsOpt) applyGroup(c *groupConfig) { c.ns = string(n) }

// Queues sets how many queues a topic has (default 4, at most MaxQueues).
// Lite topics of a LITE main topic always have one queue each.
func Queues(n int) TopicOption { return topicOpt(func(c *topicConfig) { c.queues = n }) }

// InNamespace creates the topic or group in namespace ns (clients select it
// with Config.Namespace: Resource.resource_namespace and x-mq-namespace).
func InNamespace(ns string) ResourceOption { return nsOpt(ns) }

// maxRetryMax is the largest RetryMax: the delivery attempts a group allows,
// RetryMax+1, travel as an int32 (RetryPolicy.max_attempts).
const maxRetryMax = math.MaxInt32 - 1

// RetryMax sets how often a group's message is redelivered before it goes to
// the group's DLQ (%DLQ%<group>); the default is 16, the most 2147483646.
// Clients are told max_attempts = n+1.
func RetryMax(n int) GroupOption { return groupOpt(func(c *groupConfig) { c.retryMax = n }) }

// LiteBind binds a group to a LITE main topic (lite.bind.topic): only lite
// consumers (LITE_PUSH_CONSUMER) may then use it.
func LiteBind(mainTopic string) GroupOption {
	return groupOpt(func(c *groupConfig) { c.bind = mainTopic })
}

// Wildcard makes a lite group receive every lite topic of its main topic
// (lite.sub.wildcard=true) once a client syncs COMPLETE_ADD.
func Wildcard() GroupOption { return groupOpt(func(c *groupConfig) { c.wildcard = true }) }

// FIFO makes a group consume each queue in order (consumeMessageOrderly).
func FIFO() GroupOption { return groupOpt(func(c *groupConfig) { c.fifo = true }) }

// LiteExclusive makes a lite group exclusive (lite.sub.model=Exclusive): a
// client's PARTIAL_ADD of a lite topic takes it from every client of the
// group that holds it, and each of those is sent NotifyUnsubscribeLite on its
// Telemetry stream (the caller too, when it already held the topic: 5.5.0
// filters on the group alone), as the 5.5.0 broker does. COMPLETE_ADD takes
// nothing from anyone.
func LiteExclusive() GroupOption { return groupOpt(func(c *groupConfig) { c.exclusive = true }) }

// ResetOffsetOnTakeover makes an exclusive lite group restart a lite topic
// from its first stored message when a client takes it over
// (lite.sub.reset.offset.exclusive=true).
func ResetOffsetOnTakeover() GroupOption {
	return groupOpt(func(c *groupConfig) { c.resetExclusive = true })
}

// CreateTopic creates a topic of the given type. Creating an existing topic
// with the same type is a no-op; another type is an error.
func (s *Server) CreateTopic(name string, typ TopicType, opts ...TopicOption) error {
	var c topicConfig
	for _, o := range opts {
		o.applyTopic(&c)
	}
	if f := checkTopic(name); f != nil {
		return fmt.Errorf("rmqfake: CreateTopic: %s", f.msg)
	}
	if strings.HasPrefix(name, retryPrefix) {
		return fmt.Errorf("rmqfake: CreateTopic %q: retry topics are internal", name)
	}
	if _, ok := ParseTopicType(typ.String()); !ok {
		return fmt.Errorf("rmqfake: CreateTopic %q: unknown type %d", name, typ)
	}
	if c.queues < 0 || c.queues > MaxQueues {
		return fmt.Errorf("rmqfake: CreateTopic %q: %d queues: want 1 to %d (0: the default, %d)", name, c.queues, MaxQueues, defaultQueues)
	}
	k := resKey{ns: c.ns, name: name}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[k]; t != nil {
		if t.typ != typ {
			return fmt.Errorf("rmqfake: CreateTopic %q: exists as a %s topic", k, t.typ)
		}
		return nil
	}
	t := b.newTopic(k, typ, c.queues)
	if c.liteTTL > 0 && typ == TopicLite {
		t.liteTTL = int64(c.liteTTL) * 60_000
		b.armTTL()
	}
	return nil
}

// CreateGroup creates a consumer group, or updates an existing one.
func (s *Server) CreateGroup(name string, opts ...GroupOption) error {
	c := groupConfig{retryMax: defaultRetryMax}
	for _, o := range opts {
		o.applyGroup(&c)
	}
	if f := checkGroup(name); f != nil {
		return fmt.Errorf("rmqfake: CreateGroup: %s", f.msg)
	}
	if c.retryMax < 0 || c.retryMax > maxRetryMax {
		return fmt.Errorf("rmqfake: CreateGroup %q: RetryMax %d: want 0 to %d (the max delivery attempts, RetryMax+1, is an int32 on the wire)", name, c.retryMax, maxRetryMax)
	}
	if err := checkMaxEvents(c.maxEvents); err != nil {
		return fmt.Errorf("rmqfake: CreateGroup %q: %w", name, err)
	}
	if c.wildcard && c.bind == "" {
		return fmt.Errorf("rmqfake: CreateGroup %q: Wildcard needs LiteBind", name)
	}
	// A lite group may be FIFO (consumeMessageOrderly), as on the broker:
	// its lite topics are ordered either way; the flag reaches the clients in
	// the settings (the official Java LitePushConsumer wants it).
	k := resKey{ns: c.ns, name: name}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.groups[k]; g != nil {
		if g.fifo != c.fifo && len(g.topics) > 0 {
			return fmt.Errorf("rmqfake: CreateGroup %q: cannot change FIFO after the group consumed", name)
		}
		b.configureGroup(g, c)
		return nil
	}
	b.lim.admin = true // not limited by MaxAutoGroups
	defer func() { b.lim.admin = false }()
	b.newGroup(k, c)
	return nil
}

// restart forgets sessions and in-flight state as a broker restart does.
// Call it with b.mu held.
func (b *broker) restart() {
	clear(b.sessions)
	// Auto-renewed messages were in flight: they come back like the rest.
	b.renewed, b.renewCount = nil, nil
	b.notify()
	// The clients' event sets are memory too: the lite topics they held are
	// dispatched again below.
	for _, sub := range b.liteSubs {
		if set := sub.events; set != nil {
			sub.events = nil
			b.stop(set.check)
			set.drain()
		}
	}
	for _, t := range b.topics {
		for _, gt := range t.consumers {
			for _, d := range gt.inflight {
				for len(d.cks) > 0 {
					ck := d.cks[0]
					b.stop(ck.timer)
					b.revive(gt, d, ck)
				}
			}
			for i, o := range gt.ord {
				b.stop(o.timer)
				*o = ordered{committed: o.committed}
				b.trimQueue(t, i)
			}
		}
		for _, lq := range t.lite {
			for c := range lq.all() {
				b.stop(c.ord.timer)
				c.ord = ordered{committed: c.ord.committed}
				b.liteReady(c)
			}
		}
		b.wake(t)
	}
}
