package client

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// fakeServer is an in-process MessagingService for unit tests. Each RPC a test
// needs is set as a function field; an unset field answers Unimplemented (from
// the embedded v2.UnimplementedMessagingServiceServer). Every call's incoming
// metadata is recorded.
type fakeServer struct {
	v2.UnimplementedMessagingServiceServer

	heartbeat  func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error)
	queryRoute func(context.Context, *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error)
	send       func(context.Context, *v2.SendMessageRequest) (*v2.SendMessageResponse, error)
	ack        func(context.Context, *v2.AckMessageRequest) (*v2.AckMessageResponse, error)
	receive    func(*v2.ReceiveMessageRequest, v2.MessagingService_ReceiveMessageServer) error
	telemetry  func(v2.MessagingService_TelemetryServer) error
	notify     func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error)
	syncLite   func(context.Context, *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error)

	mu sync.Mutex
	md []metadata.MD
}

// startFake serves f on 127.0.0.1:<free port> until the test ends and returns
// the endpoint.
func startFake(t *testing.T, f *fakeServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer()
	v2.RegisterMessagingServiceServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// newTestClient creates a client for cfg and closes it when the test ends.
// Without a Logger in cfg, its diagnostics are discarded.
func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// closedPort returns a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func (f *fakeServer) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.md = append(f.md, md.Copy())
	f.mu.Unlock()
}

// metadata returns the incoming metadata of every call so far.
func (f *fakeServer) metadata() []metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metadata.MD(nil), f.md...)
}

func (f *fakeServer) Heartbeat(ctx context.Context, req *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
	f.record(ctx)
	if f.heartbeat == nil {
		return f.UnimplementedMessagingServiceServer.Heartbeat(ctx, req)
	}
	return f.heartbeat(ctx, req)
}

func (f *fakeServer) QueryRoute(ctx context.Context, req *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	f.record(ctx)
	if f.queryRoute == nil {
		return f.UnimplementedMessagingServiceServer.QueryRoute(ctx, req)
	}
	return f.queryRoute(ctx, req)
}

func (f *fakeServer) SendMessage(ctx context.Context, req *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	f.record(ctx)
	if f.send == nil {
		return f.UnimplementedMessagingServiceServer.SendMessage(ctx, req)
	}
	return f.send(ctx, req)
}

func (f *fakeServer) AckMessage(ctx context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	f.record(ctx)
	if f.ack == nil {
		return f.UnimplementedMessagingServiceServer.AckMessage(ctx, req)
	}
	return f.ack(ctx, req)
}

func (f *fakeServer) ReceiveMessage(req *v2.ReceiveMessageRequest, st v2.MessagingService_ReceiveMessageServer) error {
	f.record(st.Context())
	if f.receive == nil {
		return f.UnimplementedMessagingServiceServer.ReceiveMessage(req, st)
	}
	return f.receive(req, st)
}

func (f *fakeServer) Telemetry(st v2.MessagingService_TelemetryServer) error {
	f.record(st.Context())
	if f.telemetry == nil {
		return f.UnimplementedMessagingServiceServer.Telemetry(st)
	}
	return f.telemetry(st)
}

func (f *fakeServer) NotifyClientTermination(ctx context.Context, req *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
	f.record(ctx)
	if f.notify == nil {
		return f.UnimplementedMessagingServiceServer.NotifyClientTermination(ctx, req)
	}
	return f.notify(ctx, req)
}

func (f *fakeServer) SyncLiteSubscription(ctx context.Context, req *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
	f.record(ctx)
	if f.syncLite == nil {
		return f.UnimplementedMessagingServiceServer.SyncLiteSubscription(ctx, req)
	}
	return f.syncLite(ctx, req)
}

func okStatus() *v2.Status { return &v2.Status{Code: v2.Code_OK, Message: "OK"} }

// answerSettings is a Telemetry handler that answers the client's settings
// with the given settings (as the proxy does), then reads until the stream
// ends. Each received settings command is passed to seen when it is non-nil.
func answerSettings(reply *v2.Settings, seen func(*v2.Settings)) func(v2.MessagingService_TelemetryServer) error {
	return func(st v2.MessagingService_TelemetryServer) error {
		for {
			cmd, err := st.Recv()
			if err != nil {
				return nil
			}
			s := cmd.GetSettings()
			if s == nil {
				continue
			}
			if seen != nil {
				seen(s)
			}
			if err := st.Send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: reply}}); err != nil {
				return err
			}
		}
	}
}

// signal returns a channel and a function that sends v on it without ever
// blocking (extra values are dropped).
func signal[T any](n int) (chan T, func(T)) {
	ch := make(chan T, n)
	return ch, func(v T) {
		select {
		case ch <- v:
		default:
		}
	}
}

// waitFor receives one value from ch or fails the test after d.
func waitFor[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		var zero T
		return zero
	}
}

func ptr[T any](v T) *T { return &v }
