package client_test

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestBrokerTagKeysPropertiesRoundTrip: a TAG-filtered poll returns the
// message with the matching tag, with its keys and properties intact, and not
// the one with another tag.
func TestBrokerTagKeysPropertiesRoundTrip(t *testing.T) {
	run := rmqtest.Unique("tag")
	tag, other := run+"-yes", run+"-no"
	c, _ := withSession(t, client.SessionConfig{
		Type: client.SimpleConsumer, Group: normalGroup,
		Subscriptions: []client.Subscription{{Topic: normalTopic, Filter: client.TagFilter(tag)}},
	})
	p := producer(t, normalTopic)
	props := map[string]string{"run": run, "color": "blue", "n": "42"}
	t0 := time.Now()
	sendOK(t, p, &client.Message{Topic: normalTopic, Tag: other, Keys: []string{run}, Body: []byte("other")})
	id := sendOK(t, p, &client.Message{Topic: normalTopic, Tag: tag, Keys: []string{run, "second-key"}, Properties: props, Body: []byte("match")})

	req := client.ReceiveRequest{Group: normalGroup, Topic: normalTopic, Filter: client.TagFilter(tag), InvisibleDuration: invisible, LongPollingTimeout: poll}
	got := collect(rmqtest.Context(t, 30*time.Second), t, c, req, func(ms []*client.ReceivedMessage) bool {
		return slices.ContainsFunc(ms, func(m *client.ReceivedMessage) bool { return m.MessageID == id })
	})
	ackAll(t, c, normalGroup, got)
	var found *client.ReceivedMessage
	for _, m := range got {
		if m.Tag != tag {
			t.Errorf("TAG %q poll returned a message tagged %q (%s)", tag, m.Tag, m.Body)
		}
		if m.MessageID == id {
			found = m
		}
	}
	if found == nil {
		t.Fatalf("message %s not received", id)
	}
	if found.Topic != normalTopic || found.Tag != tag || string(found.Body) != "match" ||
		!slices.Equal(found.Keys, []string{run, "second-key"}) || !maps.Equal(found.Properties, props) {
		t.Errorf("received topic %q tag %q keys %q properties %v body %q; want %q %q %q %v %q",
			found.Topic, found.Tag, found.Keys, found.Properties, found.Body, normalTopic, tag, []string{run, "second-key"}, props, "match")
	}
	if found.ReceiptHandle == "" || found.DeliveryAttempt != 1 || found.LiteTopic != "" {
		t.Errorf("receipt handle %q attempt %d lite topic %q", found.ReceiptHandle, found.DeliveryAttempt, found.LiteTopic)
	}
	if found.BornTime.Before(t0.Add(-time.Minute)) || found.BornTime.After(time.Now().Add(time.Minute)) || found.StoreTime.IsZero() {
		t.Errorf("born %v store %v, want around %v", found.BornTime, found.StoreTime, t0)
	}
}

// TestBrokerSQLFilter: SQL92 filtering is available on this broker (5.5.0,
// cluster proxy): a poll with an SQL filter returns the message whose
// properties match and skips the one whose do not.
func TestBrokerSQLFilter(t *testing.T) {
	run := rmqtest.Unique("sql")
	expr := "run = '" + run + "' AND v = 'yes'"
	c, _ := withSession(t, client.SessionConfig{
		Type: client.SimpleConsumer, Group: normalGroup,
		Subscriptions: []client.Subscription{{Topic: normalTopic, Filter: client.SQLFilter(expr)}},
	})
	p := producer(t, normalTopic)
	sendOK(t, p, &client.Message{Topic: normalTopic, Keys: []string{run}, Properties: map[string]string{"run": run, "v": "no"}, Body: []byte("no")})
	id := sendOK(t, p, &client.Message{Topic: normalTopic, Keys: []string{run}, Properties: map[string]string{"run": run, "v": "yes"}, Body: []byte("yes")})

	req := client.ReceiveRequest{Group: normalGroup, Topic: normalTopic, Filter: client.SQLFilter(expr), InvisibleDuration: invisible, LongPollingTimeout: poll}
	got := collect(rmqtest.Context(t, 30*time.Second), t, c, req, func(ms []*client.ReceivedMessage) bool {
		return slices.ContainsFunc(ms, func(m *client.ReceivedMessage) bool { return m.MessageID == id })
	})
	ackAll(t, c, normalGroup, got)
	if !slices.ContainsFunc(got, func(m *client.ReceivedMessage) bool { return m.MessageID == id && string(m.Body) == "yes" }) {
		t.Fatalf("the message matching %q was not received (got %d messages)", expr, len(got))
	}
	for _, m := range got {
		if m.Properties["v"] != "yes" || m.Properties["run"] != run {
			t.Errorf("SQL %q poll returned a message with properties %v", expr, m.Properties)
		}
	}
}

// TestBrokerDelayedMessageOnNormalTopic: rmqflow-normal-client is a NORMAL
// topic (message.type=NORMAL) and the proxy validates message types, so a
// delayed message is refused as a whole with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE.
func TestBrokerDelayedMessageOnNormalTopic(t *testing.T) {
	p := producer(t, normalTopic)
	run := rmqtest.Unique("delay")
	res, err := p.Send(rmqtest.Context(t, 10*time.Second), &client.Message{
		Topic: normalTopic, Keys: []string{run}, DeliveryTime: time.Now().Add(3 * time.Second), Body: []byte("later"),
	})
	if codeOf(err) != client.CodeMessagePropertyConflict {
		t.Fatalf("delayed send to a NORMAL topic: results %+v, error %v; want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", res, err)
	}
	if res != nil || client.IsRetriable(err) {
		t.Errorf("results %+v, retriable %v; want no results and a permanent error", res, client.IsRetriable(err))
	}
	var se *client.StatusError
	if errors.As(err, &se) && se.Op != "SendMessage" {
		t.Errorf("error op %q", se.Op)
	}
}

// TestBrokerExactLiteSubscription: on the exact (non-wildcard) group, a
// session subscribes one lite topic with PARTIAL_ADD from the last offset,
// receives a message sent to it afterwards, and unsubscribes with
// PARTIAL_REMOVE.
func TestBrokerExactLiteSubscription(t *testing.T) {
	c, s := withSession(t, client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: exactGroup, Subscriptions: []client.Subscription{{Topic: exactTopic}},
	})
	lite := rmqtest.Unique("x")
	if err := s.SubscribeLite(rmqtest.Context(t, 10*time.Second), exactTopic, lite, &client.OffsetOption{Policy: ptr(client.OffsetLast)}); err != nil {
		t.Fatalf("SubscribeLite: %v", err)
	}
	p := producer(t, exactTopic)
	id := sendOK(t, p, &client.Message{Topic: exactTopic, LiteTopic: lite, Keys: []string{lite}, Body: []byte("exact")})
	req := client.ReceiveRequest{Group: exactGroup, Topic: exactTopic, Lite: true, InvisibleDuration: invisible, LongPollingTimeout: poll}
	got := collect(rmqtest.Context(t, 30*time.Second), t, c, req, func(ms []*client.ReceivedMessage) bool {
		return slices.ContainsFunc(ms, func(m *client.ReceivedMessage) bool { return m.MessageID == id })
	})
	ackAll(t, c, exactGroup, got)
	i := slices.IndexFunc(got, func(m *client.ReceivedMessage) bool { return m.MessageID == id })
	if i < 0 {
		t.Fatalf("message %s to exact lite topic %s not received (%d others)", id, lite, len(got))
	}
	if m := got[i]; m.LiteTopic != lite || m.Topic != exactTopic || string(m.Body) != "exact" || !slices.Equal(m.Keys, []string{lite}) {
		t.Errorf("received topic %q lite %q keys %q body %q", m.Topic, m.LiteTopic, m.Keys, m.Body)
	}
	if err := s.UnsubscribeLite(rmqtest.Context(t, 10*time.Second), exactTopic, lite); err != nil {
		t.Errorf("UnsubscribeLite: %v", err)
	}
}

// TestBrokerLiteSyncOutcomes pins what SyncLiteSubscription answers on
// RocketMQ 5.5.0.
func TestBrokerLiteSyncOutcomes(t *testing.T) {
	wild, _ := withSession(t, client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: liteGroup, Subscriptions: []client.Subscription{{Topic: liteTopic}}, LiteWildcard: true,
	})
	exact, _ := withSession(t, client.SessionConfig{
		Type: client.LiteSimpleConsumer, Group: exactGroup, Subscriptions: []client.Subscription{{Topic: exactTopic}},
	})
	sync := func(c *client.Client, action client.LiteAction, topic, group string, lites ...string) error {
		return c.SyncLiteSubscription(rmqtest.Context(t, 10*time.Second), client.LiteSyncRequest{
			Action: action, Topic: topic, Group: group, LiteTopics: lites,
		})
	}

	// PARTIAL_ADD on a wildcard group: refused with INTERNAL_SERVER_ERROR
	// ("subscribe lite operation is not supported for this group").
	err := sync(wild, client.LitePartialAdd, liteTopic, liteGroup, rmqtest.Unique("p"))
	if codeOf(err) != client.CodeInternalServerError {
		t.Errorf("PARTIAL_ADD on the wildcard group: %v, want INTERNAL_SERVER_ERROR (50001)", err)
	} else {
		t.Logf("PARTIAL_ADD on the wildcard group: %v", err)
	}
	// COMPLETE_ADD of the empty set (what a wildcard session sends) is fine.
	if err := sync(wild, client.LiteCompleteAdd, liteTopic, liteGroup); err != nil {
		t.Errorf("COMPLETE_ADD of no lite topic on the wildcard group: %v", err)
	}
	// An illegal lite topic name is refused before the group is looked at.
	for _, tc := range []struct {
		c            *client.Client
		topic, group string
	}{{wild, liteTopic, liteGroup}, {exact, exactTopic, exactGroup}} {
		for _, bad := range []string{"bad topic!", "a.b"} {
			err := sync(tc.c, client.LitePartialAdd, tc.topic, tc.group, bad)
			if !errors.Is(err, client.ErrIllegalLiteTopic) {
				t.Errorf("PARTIAL_ADD of %q on %s: %v, want ILLEGAL_LITE_TOPIC", bad, tc.group, err)
			}
		}
	}
}

// TestBrokerSessionSettings pins the settings the proxy answers a session
// with.
func TestBrokerSessionSettings(t *testing.T) {
	t.Run("producer", func(t *testing.T) {
		_, s := withSession(t, client.SessionConfig{Type: client.Producer, Topics: []string{normalTopic}})
		st := s.Settings()
		if st == nil {
			t.Fatal("no settings")
		}
		pub := st.GetPublishing()
		if st.GetClientType() != v2.ClientType_PRODUCER || st.GetBackoffPolicy().GetMaxAttempts() != 3 ||
			st.GetBackoffPolicy().GetExponentialBackoff() == nil || pub.GetMaxBodySize() != 4<<20 || !pub.GetValidateMessageType() {
			t.Errorf("producer settings: %v", st)
		}
	})
	t.Run("simple consumer", func(t *testing.T) {
		_, s := withSession(t, client.SessionConfig{
			Type: client.SimpleConsumer, Group: normalGroup, Subscriptions: []client.Subscription{{Topic: normalTopic}},
		})
		st := s.Settings()
		if st == nil {
			t.Fatal("no settings")
		}
		sub := st.GetSubscription()
		next := st.GetBackoffPolicy().GetCustomizedBackoff().GetNext()
		// 17 = the group's 16 retries + the first delivery.
		if st.GetClientType() != v2.ClientType_SIMPLE_CONSUMER || st.GetBackoffPolicy().GetMaxAttempts() != 17 ||
			len(next) == 0 || next[0].AsDuration() != time.Second ||
			sub.GetGroup().GetName() != normalGroup || sub.GetReceiveBatchSize() != client.MaxBatchSize || sub.GetFifo() {
			t.Errorf("simple consumer settings: %v", st)
		}
	})
	t.Run("lite wildcard consumer", func(t *testing.T) {
		_, s := withSession(t, client.SessionConfig{
			Type: client.LiteSimpleConsumer, Group: liteGroup, Subscriptions: []client.Subscription{{Topic: liteTopic}}, LiteWildcard: true,
		})
		st := s.Settings()
		if st == nil {
			t.Fatal("no settings")
		}
		sub := st.GetSubscription()
		if s.WireType() != v2.ClientType_LITE_PUSH_CONSUMER || st.GetClientType() != v2.ClientType_LITE_PUSH_CONSUMER ||
			st.GetBackoffPolicy().GetMaxAttempts() != 17 || sub.GetReceiveBatchSize() != client.MaxBatchSize ||
			sub.GetLiteSubscriptionQuota() != 2000 || sub.GetMaxLiteTopicSize() != 64 ||
			len(sub.GetSubscriptions()) != 1 || sub.GetSubscriptions()[0].GetTopic().GetName() != liteTopic {
			t.Errorf("lite consumer settings (wire type %v): %v", s.WireType(), st)
		}
	})
}
