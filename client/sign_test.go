package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// one returns the single value of header key, failing when it is absent or
// repeated.
func one(t *testing.T, md metadata.MD, key string) string {
	t.Helper()
	v := md.Get(key)
	if len(v) != 1 {
		t.Fatalf("header %s = %q, want exactly one value", key, v)
	}
	return v[0]
}

func TestSigningHeaders(t *testing.T) {
	const ak, secret, token, ns = "test-AK-42", "the-Secret-Value-7f3a", "sts-token-1", "ns-test"
	reqs := make(chan *v2.HeartbeatRequest, 2)
	f := &fakeServer{heartbeat: func(_ context.Context, r *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
		reqs <- r
		return &v2.HeartbeatResponse{Status: okStatus()}, nil
	}}
	ep := startFake(t, f)
	c := newTestClient(t, Config{
		Endpoints: ep, Namespace: ns, ClientID: "client-id-under-test",
		Credentials: Credentials{AccessKey: ak, AccessSecret: secret, SecurityToken: token},
	})
	before := time.Now().UTC().Add(-time.Second)
	for i := 0; i < 2; i++ {
		if err := c.Heartbeat(t.Context(), "g1", SimpleConsumer); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
	}
	after := time.Now().UTC().Add(time.Second)
	r := <-reqs
	if r.GetGroup().GetName() != "g1" || r.GetGroup().GetResourceNamespace() != ns || r.GetClientType() != v2.ClientType_SIMPLE_CONSUMER {
		t.Errorf("heartbeat request %v, want group g1 in namespace %s, SIMPLE_CONSUMER", r, ns)
	}
	mds := f.metadata()
	if len(mds) != 2 {
		t.Fatalf("server saw %d calls, want 2", len(mds))
	}
	for _, md := range mds {
		if got := one(t, md, "x-mq-client-id"); got != "client-id-under-test" {
			t.Errorf("x-mq-client-id %q", got)
		}
		if got := one(t, md, "x-mq-protocol"); got != "v2" {
			t.Errorf("x-mq-protocol %q, want v2", got)
		}
		if got := one(t, md, "x-mq-language"); got != "GO" {
			t.Errorf("x-mq-language %q, want GO", got)
		}
		if got := one(t, md, "x-mq-namespace"); got != ns {
			t.Errorf("x-mq-namespace %q, want %q", got, ns)
		}
		if got := one(t, md, "x-mq-client-version"); got != Version {
			t.Errorf("x-mq-client-version %q, want %q", got, Version)
		}
		if got := one(t, md, "x-mq-session-token"); got != token {
			t.Errorf("x-mq-session-token %q, want %q", got, token)
		}
		if one(t, md, "x-mq-request-id") == "" {
			t.Error("empty x-mq-request-id")
		}
		dt := one(t, md, "x-mq-date-time")
		when, err := time.Parse("20060102T150405Z", dt)
		if err != nil || len(dt) != len("20060102T150405Z") {
			t.Errorf("x-mq-date-time %q is not in the form 20060102T150405Z: %v", dt, err)
		} else if when.Before(before.Truncate(time.Second)) || when.After(after) {
			t.Errorf("x-mq-date-time %v is not the time of the call (%v..%v)", when, before, after)
		}
		h := hmac.New(sha1.New, []byte(secret))
		h.Write([]byte(dt))
		want := "MQv2-HMAC-SHA1 Credential=" + ak + "//Rocketmq, SignedHeaders=x-mq-date-time, Signature=" + hex.EncodeToString(h.Sum(nil))
		if got := one(t, md, "authorization"); got != want {
			t.Errorf("authorization\n got %q\nwant %q", got, want)
		}
		for k, vs := range md {
			for _, v := range vs {
				if strings.Contains(v, secret) || strings.Contains(k, secret) {
					t.Errorf("header %s carries the access secret", k)
				}
			}
		}
	}
	if mds[0].Get("x-mq-request-id")[0] == mds[1].Get("x-mq-request-id")[0] {
		t.Error("two calls carried the same x-mq-request-id")
	}
}

func TestUnsignedHeaders(t *testing.T) {
	f := &fakeServer{heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
		return &v2.HeartbeatResponse{Status: okStatus()}, nil
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	if err := c.Heartbeat(t.Context(), "", Producer); err != nil {
		t.Fatal(err)
	}
	md := f.metadata()[0]
	for _, k := range []string{"authorization", "x-mq-namespace", "x-mq-session-token"} {
		if v := md.Get(k); len(v) != 0 {
			t.Errorf("anonymous client without namespace sent %s = %q", k, v)
		}
	}
	if one(t, md, "x-mq-client-id") != c.ID() {
		t.Errorf("x-mq-client-id %q, want %q", md.Get("x-mq-client-id"), c.ID())
	}
}

func TestHeartbeatNonOKStatus(t *testing.T) {
	f := &fakeServer{heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
		return &v2.HeartbeatResponse{Status: &v2.Status{Code: v2.Code_CONSUMER_GROUP_NOT_FOUND, Message: "no group g"}}, nil
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	err := c.Heartbeat(t.Context(), "g", SimpleConsumer)
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Heartbeat: %v (%T), want a *StatusError", err, err)
	}
	if se.Code != CodeConsumerGroupNotFound || se.Op != "Heartbeat" || se.Message != "no group g" {
		t.Errorf("StatusError %+v", se)
	}
	if !errors.Is(err, ErrConsumerGroupNotFound) || IsRetriable(err) {
		t.Errorf("errors.Is(ErrConsumerGroupNotFound)=%v IsRetriable=%v", errors.Is(err, ErrConsumerGroupNotFound), IsRetriable(err))
	}
}

func TestHeartbeatMissingStatus(t *testing.T) {
	f := &fakeServer{heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
		return &v2.HeartbeatResponse{}, nil
	}}
	c := newTestClient(t, Config{Endpoints: startFake(t, f)})
	if err := c.Heartbeat(t.Context(), "g", SimpleConsumer); !errors.Is(err, ErrInternal) {
		t.Errorf("response without status: %v, want INTERNAL_ERROR", err)
	}
}

func TestHeartbeatBoundedByRequestTimeout(t *testing.T) {
	entered := make(chan struct{}, 1)
	f := &fakeServer{heartbeat: func(ctx context.Context, _ *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
		entered <- struct{}{}
		<-ctx.Done() // never answers
		return nil, ctx.Err()
	}}
	ep := startFake(t, f)
	c := newTestClient(t, Config{Endpoints: ep, RequestTimeout: 300 * time.Millisecond})
	t0 := time.Now()
	err := c.Heartbeat(context.Background(), "g", SimpleConsumer)
	took := time.Since(t0)
	if err == nil {
		t.Fatal("Heartbeat against a server that never answers succeeded")
	}
	if took >= 2*time.Second {
		t.Errorf("Heartbeat returned after %v, want within RequestTimeout (300ms)", took)
	}
	select {
	case <-entered:
	case <-time.After(2 * time.Second): // the server's handler may start a moment after the client gave up
		t.Error("the call never reached the server")
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("status.Code(%v) = %v, want DeadlineExceeded", err, status.Code(err))
	}
	if s, ok := status.FromError(err); !ok || s.Code() != codes.DeadlineExceeded {
		t.Errorf("status.FromError(%v) = %v, %v", err, s, ok)
	}
	if !IsRetriable(err) {
		t.Errorf("a deadline-exceeded transport error should be retriable: %v", err)
	}
	// A shorter context deadline wins over RequestTimeout (10 s here, so
	// that a loaded machine's delays cannot pass for it).
	long := newTestClient(t, Config{Endpoints: ep, RequestTimeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 = time.Now()
	if err := long.Heartbeat(ctx, "g", SimpleConsumer); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("with a 50ms context: %v", err)
	}
	if took := time.Since(t0); took >= 3*time.Second {
		t.Errorf("with a 50ms context and RequestTimeout 10s the call took %v", took)
	}
}
