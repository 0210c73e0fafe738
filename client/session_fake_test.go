package client

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// telemetryFake is a Telemetry handler that answers every settings command
// with reply, reports what the client sends, and pushes commands to it.
type telemetryFake struct {
	reply      *v2.Settings
	settings   chan *v2.Settings         // settings commands from the client
	fromClient chan *v2.TelemetryCommand // other commands from the client
	push       chan *v2.TelemetryCommand // commands to send to the client
}

func newTelemetryFake(reply *v2.Settings) *telemetryFake {
	return &telemetryFake{
		reply:      reply,
		settings:   make(chan *v2.Settings, 16),
		fromClient: make(chan *v2.TelemetryCommand, 16),
		push:       make(chan *v2.TelemetryCommand, 16),
	}
}

func (tf *telemetryFake) handle(st v2.MessagingService_TelemetryServer) error {
	recvDone := make(chan struct{})
	answer := make(chan struct{}, 16)
	go func() {
		defer close(recvDone)
		for {
			cmd, err := st.Recv()
			if err != nil {
				return
			}
			if s := cmd.GetSettings(); s != nil {
				select {
				case tf.settings <- s:
				default:
				}
				answer <- struct{}{}
				continue
			}
			select {
			case tf.fromClient <- cmd:
			default:
			}
		}
	}()
	for {
		var out *v2.TelemetryCommand
		select {
		case <-recvDone:
			return nil
		case <-st.Context().Done():
			<-recvDone
			return nil
		case <-answer:
			out = &v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: tf.reply}}
		case out = <-tf.push:
		}
		if err := st.Send(out); err != nil {
			<-recvDone
			return err
		}
	}
}

func consumerReply(typ v2.ClientType) *v2.Settings {
	return &v2.Settings{
		ClientType:    &typ,
		BackoffPolicy: &v2.RetryPolicy{MaxAttempts: 17},
		PubSub: &v2.Settings_Subscription{Subscription: &v2.Subscription{
			ReceiveBatchSize: ptr(int32(32)), LiteSubscriptionQuota: ptr(int32(2000)),
		}},
	}
}

func TestSessionHandshakeHeartbeatsAndClose(t *testing.T) {
	tf := newTelemetryFake(consumerReply(v2.ClientType_SIMPLE_CONSUMER))
	heartbeats, onHeartbeat := signal[*v2.HeartbeatRequest](16)
	notified, onNotify := signal[*v2.NotifyClientTerminationRequest](1)
	f := &fakeServer{
		telemetry: tf.handle,
		heartbeat: func(_ context.Context, r *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
			onHeartbeat(r)
			return &v2.HeartbeatResponse{Status: okStatus()}, nil
		},
		notify: func(_ context.Context, r *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			onNotify(r)
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
	}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), Namespace: "ns", HeartbeatInterval: 20 * time.Millisecond})
	s, err := c.OpenSession(t.Context(), SessionConfig{
		Type: SimpleConsumer, Group: "g",
		Subscriptions: []Subscription{{Topic: "t1", Filter: TagFilter("a||b")}, {Topic: "t2", Filter: SQLFilter("x > 1")}},
	})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	if !proto.Equal(s.Settings(), tf.reply) {
		t.Errorf("Settings() = %v, want the broker's %v", s.Settings(), tf.reply)
	}
	if s.WireType() != v2.ClientType_SIMPLE_CONSUMER {
		t.Errorf("WireType %v", s.WireType())
	}
	sent := waitFor(t, tf.settings, 2*time.Second, "the client's settings")
	sub := sent.GetSubscription()
	if sent.GetClientType() != v2.ClientType_SIMPLE_CONSUMER || sub.GetGroup().GetName() != "g" || sub.GetGroup().GetResourceNamespace() != "ns" ||
		len(sub.GetSubscriptions()) != 2 || sub.GetLongPollingTimeout().AsDuration() != DefaultLongPollingTimeout ||
		sent.GetRequestTimeout().AsDuration() != DefaultRequestTimeout || sent.GetUserAgent().GetLanguage() != v2.Language_GOLANG ||
		len(sent.GetAccessPoint().GetAddresses()) != 1 {
		t.Errorf("settings sent: %v", sent)
	}
	if e := sub.GetSubscriptions()[1]; e.GetTopic().GetName() != "t2" || e.GetExpression().GetType() != v2.FilterType_SQL || e.GetExpression().GetExpression() != "x > 1" {
		t.Errorf("second subscription sent as %v", e)
	}
	for i := 0; i < 2; i++ {
		hb := waitFor(t, heartbeats, 2*time.Second, "a periodic heartbeat")
		if hb.GetGroup().GetName() != "g" || hb.GetClientType() != v2.ClientType_SIMPLE_CONSUMER {
			t.Errorf("heartbeat %v", hb)
		}
	}
	var ce *ConfigError
	if _, err := c.OpenSession(t.Context(), SessionConfig{Type: Producer}); !errors.As(err, &ce) {
		t.Errorf("second session on one client: %v, want a *ConfigError", err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("Session.Close: %v", err)
	}
	if r := waitFor(t, notified, time.Second, "NotifyClientTermination"); r.GetGroup().GetName() != "g" {
		t.Errorf("termination notice for %v, want group g", r.GetGroup())
	}
	if err := s.Close(t.Context()); err != nil {
		t.Errorf("second Session.Close: %v", err)
	}
	// The session is gone, so the client may open another.
	s2, err := c.OpenSession(t.Context(), SessionConfig{Type: Producer, Topics: []string{"t1"}})
	if err != nil {
		t.Fatalf("OpenSession after Session.Close: %v", err)
	}
	if got := waitFor(t, tf.settings, 2*time.Second, "producer settings"); got.GetPublishing().GetTopics()[0].GetName() != "t1" || got.GetClientType() != v2.ClientType_PRODUCER {
		t.Errorf("producer settings %v", got)
	}
	_ = s2
}

func TestSessionFallsBackToLitePushConsumer(t *testing.T) {
	tf := newTelemetryFake(consumerReply(v2.ClientType_LITE_PUSH_CONSUMER))
	heartbeats, onHeartbeat := signal[*v2.HeartbeatRequest](16)
	rejected := make(chan struct{}, 4)
	f := &fakeServer{
		// Like the 5.5.0 proxy: LITE_SIMPLE_CONSUMER is refused on the stream.
		telemetry: func(st v2.MessagingService_TelemetryServer) error {
			cmd, err := st.Recv()
			if err != nil {
				return err
			}
			if cmd.GetSettings().GetClientType() == v2.ClientType_LITE_SIMPLE_CONSUMER {
				rejected <- struct{}{}
				return status.Error(codes.Internal, "java.lang.IllegalArgumentException: g is not consumer")
			}
			tf.settings <- cmd.GetSettings()
			if err := st.Send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: tf.reply}}); err != nil {
				return err
			}
			<-st.Context().Done()
			return nil
		},
		heartbeat: func(_ context.Context, r *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
			onHeartbeat(r)
			return &v2.HeartbeatResponse{Status: okStatus()}, nil
		},
		notify: func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
	}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), HeartbeatInterval: 20 * time.Millisecond})
	s, err := c.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "main"}}})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	if len(rejected) != 1 {
		t.Errorf("the LITE_SIMPLE_CONSUMER settings were sent %d times, want once", len(rejected))
	}
	if s.WireType() != v2.ClientType_LITE_PUSH_CONSUMER {
		t.Errorf("WireType %v after the proxy refused LITE_SIMPLE_CONSUMER, want LITE_PUSH_CONSUMER", s.WireType())
	}
	if got := waitFor(t, tf.settings, time.Second, "fallback settings"); got.GetClientType() != v2.ClientType_LITE_PUSH_CONSUMER {
		t.Errorf("accepted settings announce %v", got.GetClientType())
	}
	if hb := waitFor(t, heartbeats, 2*time.Second, "a heartbeat"); hb.GetClientType() != v2.ClientType_LITE_PUSH_CONSUMER {
		t.Errorf("heartbeat announces %v, want LITE_PUSH_CONSUMER", hb.GetClientType())
	}
}

func TestOpenSessionBrokerRefuses(t *testing.T) {
	t.Run("status in the telemetry answer", func(t *testing.T) {
		f := &fakeServer{telemetry: func(st v2.MessagingService_TelemetryServer) error {
			if _, err := st.Recv(); err != nil {
				return err
			}
			if err := st.Send(&v2.TelemetryCommand{Status: &v2.Status{Code: v2.Code_FORBIDDEN, Message: "no access"}}); err != nil {
				return err
			}
			<-st.Context().Done()
			return nil
		}}
		c := newTestClient(t, Config{Endpoints: startFake(t, f), RequestTimeout: 500 * time.Millisecond})
		t0 := time.Now()
		_, err := c.OpenSession(t.Context(), SessionConfig{Type: Producer})
		if !errors.Is(err, ErrForbidden) {
			t.Errorf("OpenSession: %v, want FORBIDDEN", err)
		}
		if took := time.Since(t0); took > 2*time.Second {
			t.Errorf("OpenSession took %v", took)
		}
	})
	t.Run("permanent gRPC error fails before RequestTimeout", func(t *testing.T) {
		f := &fakeServer{telemetry: func(st v2.MessagingService_TelemetryServer) error {
			return status.Error(codes.PermissionDenied, "denied")
		}}
		c := newTestClient(t, Config{Endpoints: startFake(t, f), RequestTimeout: 10 * time.Second})
		t0 := time.Now()
		_, err := c.OpenSession(t.Context(), SessionConfig{Type: Producer})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("OpenSession: %v, want PermissionDenied", err)
		}
		if took := time.Since(t0); took > 5*time.Second {
			t.Errorf("OpenSession took %v; a permanent refusal should not wait out RequestTimeout", took)
		}
	})
}

func TestLiteSessionSyncsAndTelemetryCommands(t *testing.T) {
	tf := newTelemetryFake(consumerReply(v2.ClientType_LITE_SIMPLE_CONSUMER))
	syncs := make(chan *v2.SyncLiteSubscriptionRequest, 256)
	f := &fakeServer{
		telemetry: tf.handle,
		syncLite: func(_ context.Context, r *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
			select {
			case syncs <- r:
			default:
			}
			return &v2.SyncLiteSubscriptionResponse{Status: okStatus()}, nil
		},
		notify: func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
	}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), LiteSyncInterval: 20 * time.Millisecond})
	s, err := c.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "main"}}, LiteWildcard: true})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	first := waitFor(t, syncs, time.Second, "the opening COMPLETE_ADD")
	if first.GetAction() != v2.LiteSubscriptionAction_COMPLETE_ADD || first.GetTopic().GetName() != "main" || first.GetGroup().GetName() != "g" || len(first.GetLiteTopicSet()) != 0 {
		t.Errorf("opening sync %v, want COMPLETE_ADD of an empty set", first)
	}
	if err := s.SubscribeLite(t.Context(), "main", "lt1", &OffsetOption{Policy: ptr(OffsetLast)}); err != nil {
		t.Fatal(err)
	}
	// Skip periodic syncs until the PARTIAL_ADD, then wait for a COMPLETE_ADD
	// that carries lt1.
	nextWhere := func(what string, ok func(*v2.SyncLiteSubscriptionRequest) bool) *v2.SyncLiteSubscriptionRequest {
		t.Helper()
		deadline := time.After(3 * time.Second)
		for {
			select {
			case r := <-syncs:
				if ok(r) {
					return r
				}
			case <-deadline:
				t.Fatalf("no %s", what)
			}
		}
	}
	add := nextWhere("PARTIAL_ADD", func(r *v2.SyncLiteSubscriptionRequest) bool {
		return r.GetAction() == v2.LiteSubscriptionAction_PARTIAL_ADD
	})
	if !slices.Equal(add.GetLiteTopicSet(), []string{"lt1"}) || add.GetOffsetOption().GetPolicy() != v2.OffsetOption_LAST {
		t.Errorf("PARTIAL_ADD %v", add)
	}
	nextWhere("COMPLETE_ADD with lt1", func(r *v2.SyncLiteSubscriptionRequest) bool {
		return r.GetAction() == v2.LiteSubscriptionAction_COMPLETE_ADD && slices.Equal(r.GetLiteTopicSet(), []string{"lt1"})
	})
	// The broker drops lt1: later COMPLETE_ADDs leave it out.
	tf.push <- &v2.TelemetryCommand{Command: &v2.TelemetryCommand_NotifyUnsubscribeLiteCommand{NotifyUnsubscribeLiteCommand: &v2.NotifyUnsubscribeLiteCommand{LiteTopic: "lt1"}}}
	nextWhere("COMPLETE_ADD without lt1", func(r *v2.SyncLiteSubscriptionRequest) bool {
		return r.GetAction() == v2.LiteSubscriptionAction_COMPLETE_ADD && len(r.GetLiteTopicSet()) == 0
	})

	tf.push <- &v2.TelemetryCommand{Command: &v2.TelemetryCommand_PrintThreadStackTraceCommand{PrintThreadStackTraceCommand: &v2.PrintThreadStackTraceCommand{Nonce: "n1"}}}
	got := waitFor(t, tf.fromClient, 2*time.Second, "a thread stack trace")
	if tr := got.GetThreadStackTrace(); tr.GetNonce() != "n1" || len(tr.GetThreadStackTrace()) == 0 {
		t.Errorf("answer to PrintThreadStackTrace: %v", got)
	}
	tf.push <- &v2.TelemetryCommand{Command: &v2.TelemetryCommand_VerifyMessageCommand{VerifyMessageCommand: &v2.VerifyMessageCommand{Nonce: "n2"}}}
	got = waitFor(t, tf.fromClient, 2*time.Second, "a verify-message result")
	if got.GetVerifyMessageResult().GetNonce() != "n2" || got.GetStatus().GetCode() != v2.Code_NOT_IMPLEMENTED {
		t.Errorf("answer to VerifyMessage: %v", got)
	}

	if err := s.UnsubscribeLite(t.Context(), "main", "lt1"); err != nil {
		t.Fatal(err)
	}
	rm := nextWhere("PARTIAL_REMOVE", func(r *v2.SyncLiteSubscriptionRequest) bool {
		return r.GetAction() == v2.LiteSubscriptionAction_PARTIAL_REMOVE
	})
	if !slices.Equal(rm.GetLiteTopicSet(), []string{"lt1"}) || rm.OffsetOption != nil {
		t.Errorf("PARTIAL_REMOVE %v", rm)
	}
	var ce *ConfigError
	if err := s.SubscribeLite(t.Context(), "main", "lt2", &OffsetOption{Policy: ptr(OffsetLast), TailN: ptr(int64(3))}); !errors.As(err, &ce) || ce.Option != "OffsetOption" {
		t.Errorf("OffsetOption with two fields: %v, want a *ConfigError", err)
	}
}

// TestFallbackLoggedOnceAtDebug: the fallback to LITE_PUSH_CONSUMER, routine
// on a 5.5.0 proxy, is logged once per process and at debug, however many
// sessions fall back (it was an INFO line on every session).
func TestFallbackLoggedOnceAtDebug(t *testing.T) {
	fallbackLogged.Store(false)
	t.Cleanup(func() { fallbackLogged.Store(false) })
	var mu sync.Mutex
	levels := map[slog.Level]int{}
	h := &recordHandler{on: func(r slog.Record) {
		if strings.Contains(r.Message, "does not know LITE_SIMPLE_CONSUMER") {
			mu.Lock()
			levels[r.Level]++
			mu.Unlock()
		}
	}}
	refusing := func() *fakeServer {
		tf := newTelemetryFake(consumerReply(v2.ClientType_LITE_PUSH_CONSUMER))
		return &fakeServer{
			telemetry: func(st v2.MessagingService_TelemetryServer) error {
				cmd, err := st.Recv()
				if err != nil {
					return err
				}
				if cmd.GetSettings().GetClientType() == v2.ClientType_LITE_SIMPLE_CONSUMER {
					return status.Error(codes.Internal, "java.lang.IllegalArgumentException: g is not consumer")
				}
				if err := st.Send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: tf.reply}}); err != nil {
					return err
				}
				<-st.Context().Done()
				return nil
			},
			heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
				return &v2.HeartbeatResponse{Status: okStatus()}, nil
			},
			notify: func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
				return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
			},
		}
	}
	for i := range 3 {
		c := newTestClient(t, Config{Endpoints: startFake(t, refusing()), Logger: slog.New(h)})
		s, err := c.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g", Subscriptions: []Subscription{{Topic: "main"}}})
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if s.WireType() != v2.ClientType_LITE_PUSH_CONSUMER {
			t.Fatalf("session %d did not fall back", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if levels[slog.LevelDebug] != 1 || len(levels) != 1 {
		t.Errorf("fallback log records by level: %v, want one at DEBUG for three sessions", levels)
	}
}

// recordHandler hands every record, at any level, to on.
type recordHandler struct{ on func(slog.Record) }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error { h.on(r); return nil }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h *recordHandler) WithGroup(string) slog.Handler                 { return h }
