package client

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLiteSessionResyncsOnReconnect: when the Telemetry stream breaks and is
// re-opened (a proxy or broker restart), a wildcard lite session sends its
// COMPLETE_ADD again as soon as the broker answers the new stream's settings,
// not on its next periodic sync (LiteSyncInterval is an hour here). A sync
// that fails right after the reconnect is retried. Issue 8, defect 15.
func TestLiteSessionResyncsOnReconnect(t *testing.T) {
	reply := consumerReply(v2.ClientType_LITE_SIMPLE_CONSUMER)
	var streams atomic.Int32
	breakFirst := make(chan struct{})
	settled := make(chan int32, 8) // stream number whose settings were answered
	syncs := make(chan *v2.SyncLiteSubscriptionRequest, 64)
	var failSyncs atomic.Int32 // fail this many COMPLETE_ADDs (after the opening one)
	f := &fakeServer{
		telemetry: func(st v2.MessagingService_TelemetryServer) error {
			n := streams.Add(1)
			if _, err := st.Recv(); err != nil {
				return err
			}
			if err := st.Send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: reply}}); err != nil {
				return err
			}
			settled <- n
			if n == 1 {
				select {
				case <-breakFirst:
					return status.Error(codes.Unavailable, "proxy going down")
				case <-st.Context().Done():
					return nil
				}
			}
			<-st.Context().Done()
			return nil
		},
		syncLite: func(_ context.Context, r *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
			if r.GetAction() == v2.LiteSubscriptionAction_COMPLETE_ADD && streams.Load() > 1 && failSyncs.Add(-1) >= 0 {
				return &v2.SyncLiteSubscriptionResponse{Status: &v2.Status{Code: v2.Code_INTERNAL_SERVER_ERROR, Message: "not ready"}}, nil
			}
			syncs <- r
			return &v2.SyncLiteSubscriptionResponse{Status: okStatus()}, nil
		},
		heartbeat: func(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
			return &v2.HeartbeatResponse{Status: okStatus()}, nil
		},
		notify: func(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
			return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
		},
	}
	c := newTestClient(t, Config{Endpoints: startFake(t, f), LiteSyncInterval: time.Hour})
	s, err := c.OpenSession(t.Context(), SessionConfig{Type: LiteSimpleConsumer, Group: "g",
		Subscriptions: []Subscription{{Topic: "main"}, {Topic: "other"}}, LiteWildcard: true})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	for range 2 {
		if r := waitFor(t, syncs, time.Second, "an opening COMPLETE_ADD"); r.GetAction() != v2.LiteSubscriptionAction_COMPLETE_ADD {
			t.Fatalf("opening sync %v", r)
		}
	}
	if err := s.SubscribeLite(t.Context(), "main", "lt1", nil); err != nil {
		t.Fatal(err)
	}
	if r := waitFor(t, syncs, time.Second, "the PARTIAL_ADD"); r.GetAction() != v2.LiteSubscriptionAction_PARTIAL_ADD {
		t.Fatalf("got %v, want the PARTIAL_ADD", r)
	}
	if n := waitFor(t, settled, time.Second, "the first stream's settings"); n != 1 {
		t.Fatalf("stream %d answered first", n)
	}

	failSyncs.Store(1) // the first COMPLETE_ADD after the reconnect fails
	close(breakFirst)
	if n := waitFor(t, settled, 3*time.Second, "the re-opened stream's settings"); n != 2 {
		t.Fatalf("stream %d answered, want the second", n)
	}
	got := map[string][]string{}
	deadline := time.After(5 * time.Second)
	for len(got) < 2 {
		select {
		case r := <-syncs:
			if r.GetAction() != v2.LiteSubscriptionAction_COMPLETE_ADD {
				t.Fatalf("after the reconnect: %v, want COMPLETE_ADD", r)
			}
			got[r.GetTopic().GetName()] = r.GetLiteTopicSet()
		case <-deadline:
			t.Fatalf("after the reconnect, COMPLETE_ADD arrived for %v only within 5 s; want both main topics (the periodic sync is an hour away)", got)
		}
	}
	if !slices.Equal(got["main"], []string{"lt1"}) || len(got["other"]) != 0 {
		t.Errorf("resync sent %v, want main=[lt1] other=[]", got)
	}
	if failSyncs.Load() >= 0 {
		t.Errorf("the failing sync was not exercised (left %d)", failSyncs.Load())
	}
}
