package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// brokerWith starts the server "rmqflow broker args..." would run, on a
// free port with auto-create.
func brokerWith(t *testing.T, args ...string) *rmqfake.Server {
	t.Helper()
	fs, f := brokerFlagSet(&bytes.Buffer{})
	if err := fs.Parse(append([]string{"-listen", "127.0.0.1:0", "-auto-create"}, args...)); err != nil {
		t.Fatal(err)
	}
	opts, err := f.options()
	if err != nil {
		t.Fatal(err)
	}
	s, err := rmqfake.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// The limit flags default to the library's defaults and reach the server.
func TestBrokerLimitFlags(t *testing.T) {
	fs, f := brokerFlagSet(&bytes.Buffer{})
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.maxStoredBytes != rmqfake.DefaultMaxStoredBytes {
		t.Errorf("-max-stored-bytes default %d, want %d", f.maxStoredBytes, rmqfake.DefaultMaxStoredBytes)
	}
	if f.maxLiteTopics != rmqfake.DefaultMaxLiteTopics {
		t.Errorf("-max-lite-topics default %d, want %d", f.maxLiteTopics, rmqfake.DefaultMaxLiteTopics)
	}
	if f.sessionExpiry != rmqfake.DefaultSessionExpiry {
		t.Errorf("-session-expiry default %v, want %v", f.sessionExpiry, rmqfake.DefaultSessionExpiry)
	}
	if f.maxLiteSubs != rmqfake.DefaultMaxLiteSubscriptions {
		t.Errorf("-max-lite-subscriptions default %d, want %d", f.maxLiteSubs, rmqfake.DefaultMaxLiteSubscriptions)
	}
	if f.maxAutoTopics != rmqfake.DefaultMaxAutoTopics {
		t.Errorf("-max-auto-topics default %d, want %d", f.maxAutoTopics, rmqfake.DefaultMaxAutoTopics)
	}
	if f.maxAutoGroups != rmqfake.DefaultMaxAutoGroups {
		t.Errorf("-max-auto-groups default %d, want %d", f.maxAutoGroups, rmqfake.DefaultMaxAutoGroups)
	}

	s := brokerWith(t, "-max-stored-bytes", "2000")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(client.Config{Endpoints: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	body := make([]byte, 1000)
	if _, err := c.Send(ctx, &client.Message{Topic: "limits", Body: body}); err != nil {
		t.Fatalf("first message: %v", err)
	}
	_, err = c.Send(ctx, &client.Message{Topic: "limits", Body: body})
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != client.CodeInternalServerError {
		t.Errorf("past -max-stored-bytes: %v, want INTERNAL_SERVER_ERROR", err)
	}

	s = brokerWith(t, "-max-auto-topics", "1")
	c, err = client.New(client.Config{Endpoints: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.QueryRoute(ctx, "first"); err != nil {
		t.Fatalf("first auto-created topic: %v", err)
	}
	if _, err := c.QueryRoute(ctx, "second"); !errors.Is(err, client.ErrTopicNotFound) {
		t.Errorf("past -max-auto-topics: %v, want TOPIC_NOT_FOUND", err)
	}

	s = brokerWith(t, "-max-lite-topics", "1")
	c, err = client.New(client.Config{Endpoints: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Send(ctx, &client.Message{Topic: "lite", LiteTopic: "a", Body: body}); err != nil {
		t.Fatalf("first lite topic: %v", err)
	}
	if _, err = c.Send(ctx, &client.Message{Topic: "lite", LiteTopic: "b", Body: body}); !errors.Is(err, client.ErrLiteTopicQuotaExceeded) {
		t.Errorf("past -max-lite-topics: %v, want LITE_TOPIC_QUOTA_EXCEEDED", err)
	}

	s = brokerWith(t, "-max-auto-groups", "1")
	open := func(group string) error {
		c, err := client.New(client.Config{Endpoints: s.Addr(), RequestTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		_, err = c.OpenSession(ctx, client.SessionConfig{Type: client.SimpleConsumer, Group: group, Subscriptions: []client.Subscription{{Topic: "t"}}})
		return err
	}
	if err := open("g1"); err != nil {
		t.Fatalf("first auto-created group: %v", err)
	}
	if err := open("g2"); err == nil || !strings.Contains(err.Error(), "MaxAutoGroups") {
		t.Errorf("past -max-auto-groups: %v, want group not found", err)
	}

	s = brokerWith(t, "-max-lite-subscriptions", "1")
	if err := s.CreateTopic("lt", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("lg", rmqfake.LiteBind("lt")); err != nil {
		t.Fatal(err)
	}
	c, err = client.New(client.Config{Endpoints: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	add := func(name string) error {
		return c.SyncLiteSubscription(ctx, client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: "lt", Group: "lg", LiteTopics: []string{name}})
	}
	if err := add("a"); err != nil {
		t.Fatalf("first lite subscription: %v", err)
	}
	if err := add("b"); !errors.Is(err, client.ErrLiteSubscriptionQuotaExceeded) {
		t.Errorf("past -max-lite-subscriptions: %v, want LITE_SUBSCRIPTION_QUOTA_EXCEEDED", err)
	}
}
