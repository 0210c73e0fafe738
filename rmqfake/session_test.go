package rmqfake_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// telemetry sends one settings command on a fresh stream and returns the
// answer or the stream's error.
func telemetry(t *testing.T, c *client.Client, ctx context.Context, st *v2.Settings) (*v2.TelemetryCommand, error) {
	t.Helper()
	stream, err := v2.NewMessagingServiceClient(c.Conn()).Telemetry(ctx)
	must(t, err)
	must(t, stream.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: st}}))
	return stream.Recv()
}

func consumerSettings(typ v2.ClientType, group, topic string) *v2.Settings {
	return &v2.Settings{ClientType: &typ, RequestTimeout: durationpb.New(3 * time.Second), PubSub: &v2.Settings_Subscription{Subscription: &v2.Subscription{
		Group:         &v2.Resource{Name: group},
		Subscriptions: []*v2.SubscriptionEntry{{Topic: &v2.Resource{Name: topic}, Expression: &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"}}},
	}}}
}

func TestTelemetrySettingsAndQuirks(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := newClient(t, s, client.Config{})
	ctx := c.OutgoingContext(ctxT(t))

	cmd, err := telemetry(t, c, ctx, consumerSettings(v2.ClientType_SIMPLE_CONSUMER, normalGroup, normalTopic))
	must(t, err)
	st := cmd.GetSettings()
	if cmd.GetStatus().GetCode() != v2.Code_OK || st.GetBackoffPolicy().GetMaxAttempts() != 3 ||
		st.GetSubscription().GetReceiveBatchSize() != 32 || st.GetSubscription().GetLongPollingTimeout().AsDuration() != 20*time.Second {
		t.Errorf("consumer settings answer: status %v, max attempts %d (want RetryMax 2 + 1), batch %d, long polling %v",
			cmd.GetStatus(), st.GetBackoffPolicy().GetMaxAttempts(), st.GetSubscription().GetReceiveBatchSize(), st.GetSubscription().GetLongPollingTimeout().AsDuration())
	}
	prod := v2.ClientType_PRODUCER
	cmd, err = telemetry(t, c, ctx, &v2.Settings{ClientType: &prod, PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: []*v2.Resource{{Name: normalTopic}}}}})
	must(t, err)
	if cmd.GetSettings().GetPublishing().GetMaxBodySize() != 4<<20 || cmd.GetSettings().GetBackoffPolicy().GetMaxAttempts() != 3 {
		t.Errorf("producer settings answer: %v", cmd.GetSettings())
	}

	// One settings record per client id: the producer settings replaced the
	// consumer's, so a consumer heartbeat now finds a producer, and a
	// producer heartbeat without a group is fine.
	stub := v2.NewMessagingServiceClient(c.Conn())
	hb, err := stub.Heartbeat(ctx, &v2.HeartbeatRequest{ClientType: v2.ClientType_PRODUCER})
	if err != nil || hb.GetStatus().GetCode() != v2.Code_OK {
		t.Errorf("producer heartbeat: %v %v", hb.GetStatus(), err)
	}
	_, err = telemetry(t, c, ctx, consumerSettings(v2.ClientType_SIMPLE_CONSUMER, normalGroup, normalTopic))
	must(t, err)
	hb, err = stub.Heartbeat(ctx, &v2.HeartbeatRequest{ClientType: v2.ClientType_PRODUCER})
	if err != nil || hb.GetStatus().GetCode() != v2.Code_ILLEGAL_CONSUMER_GROUP || hb.GetStatus().GetMessage() != "the specified group is blank" {
		t.Errorf("producer heartbeat after consumer settings replaced them: %v %v", hb.GetStatus(), err)
	}

	// LITE_SIMPLE_CONSUMER is rejected as by the 5.5.0 proxy.
	_, err = telemetry(t, c, ctx, consumerSettings(v2.ClientType_LITE_SIMPLE_CONSUMER, liteGroup, liteTopic))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "Client type is not consumer") {
		t.Errorf("LITE_SIMPLE_CONSUMER settings: %v", err)
	}
	// Unknown group, lite mode on a normal group, wrong bind topic.
	for _, tc := range []struct {
		st   *v2.Settings
		want string
	}{
		{consumerSettings(v2.ClientType_SIMPLE_CONSUMER, "no-such-group", normalTopic), "group not found"},
		{consumerSettings(v2.ClientType_LITE_PUSH_CONSUMER, normalGroup, normalTopic), "regular group cannot use LITE mode"},
		{consumerSettings(v2.ClientType_SIMPLE_CONSUMER, liteGroup, liteTopic), "lite group must use LITE mode"},
		{consumerSettings(v2.ClientType_LITE_PUSH_CONSUMER, liteGroup, normalTopic), "is expected to bind topic"},
		{&v2.Settings{ClientType: &prod}, "no publishing or subscription"},
	} {
		_, err := telemetry(t, c, ctx, tc.st)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings for %v: %v, want InvalidArgument %q", tc.st.GetSubscription().GetGroup().GetName(), err, tc.want)
		}
	}

	// x-mq-language must be one of the broker's LanguageCode values.
	golang := metadata.NewOutgoingContext(ctxT(t), metadata.Pairs("x-mq-client-id", "golang-client", "x-mq-language", "GOLANG"))
	_, err = telemetry(t, c, golang, consumerSettings(v2.ClientType_SIMPLE_CONSUMER, normalGroup, normalTopic))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "No enum constant") {
		t.Errorf("settings with x-mq-language GOLANG: %v", err)
	}
}

// The project's client falls back from LITE_SIMPLE_CONSUMER to
// LITE_PUSH_CONSUMER, as on the real 5.5.0 proxy.
func TestLiteSimpleConsumerFallsBack(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := newClient(t, s, client.Config{})
	sess, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: liteGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}, LiteWildcard: true})
	must(t, err)
	if sess.WireType() != v2.ClientType_LITE_PUSH_CONSUMER {
		t.Errorf("wire type %v, want LITE_PUSH_CONSUMER", sess.WireType())
	}
}

func TestReceiveChecks(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	bare := newClient(t, s, client.Config{})
	if _, err := bare.Receive(ctxT(t), normalReq(time.Minute)); codeOf(err) != client.CodeInternalServerError {
		t.Errorf("receive without a session: %v, want INTERNAL_SERVER_ERROR", err)
	}
	c := normalConsumer(t, s)
	for _, d := range []time.Duration{9 * time.Second, 12*time.Hour + time.Second} {
		if _, err := c.Receive(ctxT(t), normalReq(d)); !errors.Is(err, client.ErrIllegalInvisibleTime) {
			t.Errorf("receive with invisible %v: %v", d, err)
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if _, err := c.Receive(short, normalReq(time.Minute)); !errors.Is(err, client.ErrIllegalPollingTime) {
		t.Errorf("receive with 4 s left: %v, want ILLEGAL_POLLING_TIME", err)
	}
	sql := normalReq(time.Minute)
	sql.Filter = client.SQLFilter("a = NULL") // does not compile (scenario q)
	if _, err := c.Receive(ctxT(t), sql); !errors.Is(err, &client.StatusError{Code: client.CodeInternalServerError}) || !strings.Contains(err.Error(), "parse the consumer's subscription failed") {
		t.Errorf("receive with an SQL filter that does not compile: %v, want INTERNAL_SERVER_ERROR", err)
	}
	bad := normalReq(time.Minute)
	bad.Filter = client.TagFilter("||")
	if _, err := c.Receive(ctxT(t), bad); !errors.Is(err, client.ErrIllegalFilterExpression) {
		t.Errorf("receive with the tag filter ||: %v", err)
	}
	unknown := normalReq(time.Minute)
	unknown.Group = "no-such-group"
	if _, err := c.Receive(ctxT(t), unknown); !errors.Is(err, client.ErrConsumerGroupNotFound) {
		t.Errorf("receive for an unknown group: %v", err)
	}
}

// Tag filters deliver the matching tags; the others are consumed silently.
func TestTagFilter(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	c := normalConsumer(t, s)
	for _, tag := range []string{"a", "b", "c", ""} {
		send(t, p, &client.Message{Topic: normalTopic, Tag: tag, Body: []byte("tag-" + tag)})
	}
	req := normalReq(time.Minute)
	req.Filter = client.TagFilter("a || c")
	var got []string
	for len(got) < 2 {
		msgs := receiveNow(t, c, req)
		got = append(got, bodies(msgs)...)
		ackAll(t, c, normalGroup, normalTopic, msgs)
	}
	if len(got) != 2 || !(got[0] == "tag-a" && got[1] == "tag-c" || got[0] == "tag-c" && got[1] == "tag-a") {
		t.Fatalf("filter a||c got %v", got)
	}
	if g := s.Stats().Groups[normalGroup]; g.Backlog != 0 || g.InFlight != 0 {
		t.Errorf("after the filtered poll: %+v, want the other tags consumed", g.Counts)
	}
}

// Closing a client sends NotifyClientTermination: its settings (and a lite
// consumer's subscription) are forgotten.
func TestNotifyClientTermination(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := newClient(t, s, client.Config{})
	_, err := c.OpenSession(ctxT(t), client.SessionConfig{Type: client.LiteSimpleConsumer, Group: liteGroup,
		Subscriptions: []client.Subscription{{Topic: liteTopic}}, LiteWildcard: true})
	must(t, err)
	normalConsumer(t, s)
	if n := s.Stats().Sessions; n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	must(t, c.Close(ctxT(t)))
	if n := s.Stats().Sessions; n != 1 {
		t.Fatalf("after Close: %d sessions, want 1", n)
	}
	// A second termination finds no settings.
	other := newClient(t, s, client.Config{})
	if err := other.NotifyClientTermination(ctxT(t), ""); codeOf(err) != client.CodeUnrecognizedClientType {
		t.Errorf("termination without settings: %v, want UNRECOGNIZED_CLIENT_TYPE", err)
	}
	if err := other.Heartbeat(ctxT(t), "", client.Producer); codeOf(err) != client.CodeUnrecognizedClientType {
		t.Errorf("heartbeat without settings: %v, want UNRECOGNIZED_CLIENT_TYPE", err)
	}
}
