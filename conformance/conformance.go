// Package conformance pins, as test assertions, each broker behaviour rmqflow
// relies on. The same scenarios run against the real RocketMQ broker and
// against rmqflow's emulator, so that the emulator is held to what the broker
// does. docs/broker-semantics.md describes each scenario and its outcome.
//
// A Target needs the fixtures of scripts/rocketmq/fixtures.txt: one LITE main
// topic with a wildcard group per scenario, and some normal topics.
package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// Target is a broker the scenarios run against.
type Target struct {
	// Name labels the subtests ("rocketmq", "rmqfake").
	Name string
	// Endpoint is the gRPC access point.
	Endpoint string
	// AuthEndpoint is the access point of a proxy of the same broker with
	// authentication and ACL 2.0 on, and the users and ACLs of
	// scripts/rocketmq/users.txt (scenario t).
	AuthEndpoint string
	// LiteDispatch runs the broker's triggerLiteDispatch for a lite group
	// (and one client of it, when clientID is set), as the remoting admin
	// request does (brokeradmin.TriggerLiteDispatch to the broker's own
	// port) and rmqfake's Server.TriggerLiteDispatch (scenario aa).
	LiteDispatch func(ctx context.Context, group, clientID string) error
}

// MinInvisible is the smallest invisible duration the broker accepts on
// ReceiveMessage; scenarios that wait for redelivery use it.
const MinInvisible = 10 * time.Second

// poll is the long-polling window scenarios use (the broker's minimum).
const poll = 5 * time.Second

// Run runs every scenario against target as parallel subtests.
func Run(t *testing.T, target Target) {
	for _, sc := range Scenarios {
		t.Run(sc.ID+"_"+sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Run(t, &Env{Target: target})
		})
	}
}

// Scenario is one pinned behaviour.
type Scenario struct {
	ID   string // "a".."z", "aa", as in docs/broker-semantics.md
	Name string
	Run  func(t *testing.T, e *Env)
}

// Scenarios lists every scenario in document order.
var Scenarios = []Scenario{
	{"a", "WildcardReceivesManyLiteTopics", WildcardReceivesManyLiteTopics},
	{"b", "AckByAnotherClient", AckByAnotherClient},
	{"c", "RedeliveryAfterInvisibleDuration", RedeliveryAfterInvisibleDuration},
	{"d", "ChangeInvisibleDurationNewHandle", ChangeInvisibleDurationNewHandle},
	{"e", "LiteTopicOrderingAndBlocking", LiteTopicOrderingAndBlocking},
	{"f", "SuspendAndDeliveryAttempt", SuspendAndDeliveryAttempt},
	{"g", "MaxRetriesThenDLQ", MaxRetriesThenDLQ},
	{"h", "MixedBatchAck", MixedBatchAck},
	{"i", "Limits", Limits},
	{"j", "AckOnlyClient", AckOnlyClient},
	{"k", "BatchSendOfLiteMessages", BatchSendOfLiteMessages},
	{"l", "ReleaseWithZeroInvisibleDuration", ReleaseWithZeroInvisibleDuration},
	{"m", "BacklogBeforeSubscription", BacklogBeforeSubscription},
	{"n", "FrozenHandleAfterRenewals", FrozenHandleAfterRenewals},
	{"o", "DeferredHeadAndSuccessors", DeferredHeadAndSuccessors},
	{"p", "ForgedRequests", ForgedRequests},
	{"q", "SQLFilters", SQLFilters},
	{"r", "RecallDelayed", RecallDelayed},
	{"s", "ExclusiveLiteTakeover", ExclusiveLiteTakeover},
	{"t", "AuthAndACL", AuthAndACL},
	{"u", "LiteTopicTTLExpiry", LiteTopicTTLExpiry},
	{"v", "WildcardRejoin", WildcardRejoin},
	{"w", "EventSetCap", EventSetCap},
	{"x", "RestartAfterKill", RestartAfterKill},
	{"y", "ChangeWithoutLiteTopic", ChangeWithoutLiteTopic},
	{"z", "AutoRenewedLiteHeld", AutoRenewedLiteHeld},
	{"aa", "TriggerLiteDispatch", TriggerLiteDispatch},
}

// Env gives scenarios clients bound to the target.
type Env struct {
	Target Target
}

// Client returns a client with no session, closed at test end.
func (e *Env) Client(t *testing.T) *client.Client {
	t.Helper()
	return e.ClientWith(t, client.Config{})
}

// ClientWith is Client with cfg (its Endpoints set to the target's).
func (e *Env) ClientWith(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	cfg.Endpoints = e.Target.Endpoint
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// Producer returns a client with an open producer session.
func (e *Env) Producer(t *testing.T, topics ...string) *client.Client {
	t.Helper()
	c := e.Client(t)
	if _, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{Type: client.Producer, Topics: topics}); err != nil {
		t.Fatalf("producer session: %v", err)
	}
	return c
}

// LiteConsumer returns a client with an open wildcard lite session on the
// scenario's main topic and group.
func (e *Env) LiteConsumer(t *testing.T, scenario string) *client.Client {
	t.Helper()
	c := e.Client(t)
	_, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type:          client.LiteSimpleConsumer,
		Group:         rmqtest.LiteGroup(scenario),
		Subscriptions: []client.Subscription{{Topic: rmqtest.LiteTopic(scenario)}},
		LiteWildcard:  true,
	})
	if err != nil {
		t.Fatalf("lite consumer session: %v", err)
	}
	return c
}

// NormalConsumer returns a client with an open simple-consumer session.
func (e *Env) NormalConsumer(t *testing.T, scenario string) *client.Client {
	t.Helper()
	c := e.Client(t)
	_, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), client.SessionConfig{
		Type:          client.SimpleConsumer,
		Group:         rmqtest.NormalGroup(scenario),
		Subscriptions: []client.Subscription{{Topic: rmqtest.NormalTopic(scenario)}},
	})
	if err != nil {
		t.Fatalf("simple consumer session: %v", err)
	}
	return c
}

// SendLite sends one message to a lite topic and returns its id.
func SendLite(t *testing.T, p *client.Client, topic, lite, body string) string {
	t.Helper()
	res, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, LiteTopic: lite, Body: []byte(body)})
	if err != nil {
		t.Fatalf("send to %s/%s: %v", topic, lite, err)
	}
	if res[0].Err != nil {
		t.Fatalf("send to %s/%s: %v", topic, lite, res[0].Err)
	}
	return res[0].MessageID
}

// SendNormal sends one message with key run to a normal topic.
func SendNormal(t *testing.T, p *client.Client, topic, run, body string) string {
	t.Helper()
	res, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, Keys: []string{run}, Body: []byte(body)})
	if err != nil {
		t.Fatalf("send to %s: %v", topic, err)
	}
	if res[0].Err != nil {
		t.Fatalf("send to %s: %v", topic, res[0].Err)
	}
	return res[0].MessageID
}

// LiteReq is a receive request on the scenario's lite main topic.
func LiteReq(scenario string, invisible time.Duration) client.ReceiveRequest {
	return client.ReceiveRequest{
		Group: rmqtest.LiteGroup(scenario), Topic: rmqtest.LiteTopic(scenario), Lite: true,
		InvisibleDuration: invisible, LongPollingTimeout: poll,
	}
}

// NormalReq is a receive request on the scenario's normal topic.
func NormalReq(scenario string, invisible time.Duration) client.ReceiveRequest {
	return client.ReceiveRequest{
		Group: rmqtest.NormalGroup(scenario), Topic: rmqtest.NormalTopic(scenario),
		InvisibleDuration: invisible, LongPollingTimeout: poll,
	}
}

// OfRun matches messages of this run: a lite topic with the run prefix, or a
// normal message keyed with the run.
func OfRun(run string) func(*client.ReceivedMessage) bool {
	return func(m *client.ReceivedMessage) bool {
		if strings.HasPrefix(m.LiteTopic, run) {
			return true
		}
		for _, k := range m.Keys {
			if k == run {
				return true
			}
		}
		return false
	}
}

// Collect polls until it has n messages that match, or ctx ends. Messages
// that do not match (left over by earlier runs on the same broker) are acked
// so that they stop coming back. It returns what it collected.
func Collect(ctx context.Context, t *testing.T, c *client.Client, req client.ReceiveRequest, match func(*client.ReceivedMessage) bool, n int) []*client.ReceivedMessage {
	t.Helper()
	var got []*client.ReceivedMessage
	for len(got) < n && ctx.Err() == nil {
		// The proxy refuses a poll whose deadline leaves less than its minimum
		// long-polling time (ILLEGAL_POLLING_TIME): stop before that.
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < poll+500*time.Millisecond {
			break
		}
		msgs, err := c.Receive(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			if match(m) {
				got = append(got, m)
				continue
			}
			ackStray(t, c, req.Group, m)
		}
	}
	return got
}

// Nothing polls for the whole of d and fails if a matching message arrives.
func Nothing(t *testing.T, c *client.Client, req client.ReceiveRequest, match func(*client.ReceivedMessage) bool, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if got := Collect(ctx, t, c, req, match, 1); len(got) > 0 {
		t.Fatalf("want no message for %v, got %s (attempt %d)", d, got[0].MessageID, got[0].DeliveryAttempt)
	}
}

func ackStray(t *testing.T, c *client.Client, group string, m *client.ReceivedMessage) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.Ack(ctx, group, m.Topic, []client.AckEntry{Entry(m)})
}

// Entry is the ack entry of m.
func Entry(m *client.ReceivedMessage) client.AckEntry {
	return client.AckEntry{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}
}

// AckOne acks m and returns the per-entry outcome (or the RPC's error).
func AckOne(t *testing.T, c *client.Client, group string, m *client.ReceivedMessage) error {
	t.Helper()
	return AckHandle(t, c, group, m, m.ReceiptHandle)
}

// AckHandle acks m with the given receipt handle.
func AckHandle(t *testing.T, c *client.Client, group string, m *client.ReceivedMessage, handle string) error {
	t.Helper()
	e := Entry(m)
	e.ReceiptHandle = handle
	res, err := c.Ack(rmqtest.Context(t, 10*time.Second), group, m.Topic, []client.AckEntry{e})
	if err != nil {
		return err
	}
	return res[0].Err
}

// Code returns the RocketMQ code of err, 0 for nil, -1 for a non-status error.
func Code(err error) client.Code {
	if err == nil {
		return 0
	}
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return -1
}
