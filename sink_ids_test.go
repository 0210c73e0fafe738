package rmqflow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// idRecorder records the message ids of every SendMessage the fake sees and
// loses the response of the first n calls after storing their messages.
type idRecorder struct {
	mu    sync.Mutex
	calls [][]string
}

func (r *idRecorder) hook(lose int) rmqfake.Hook {
	return func(c rmqfake.Call) rmqfake.Verdict {
		var ids []string
		for _, m := range c.Request.(*v2.SendMessageRequest).GetMessages() {
			ids = append(ids, m.GetSystemProperties().GetMessageId())
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls = append(r.calls, ids)
		if len(r.calls) <= lose {
			return rmqfake.Verdict{ErrAfter: status.Error(codes.Unavailable, "response lost")}
		}
		return rmqfake.Verdict{}
	}
}

func (r *idRecorder) byID() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for _, c := range r.calls {
		for _, id := range c {
			n[id]++
		}
	}
	return n
}

// TestSinkRetryKeepsMessageIDs (issue 8, #9): the first SendMessage stores
// its messages and loses its response; the sink retries. Every copy the
// broker stored carries the id of the first attempt, which is the id the
// future reports, so consumers can drop the duplicate by id.
func TestSinkRetryKeepsMessageIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []rmqflow.Record
	}{
		{"one normal record", []rmqflow.Record{{Body: []byte("a")}}},
		{"a batch of normal records", []rmqflow.Record{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c")}}},
		{"lite records", []rmqflow.Record{{LiteTopic: "l1", Body: []byte("a")}, {LiteTopic: "l2", Body: []byte("b")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rmqfake.NewForTest(t)
			if err := s.CreateTopic("t", rmqfake.TopicNormal); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateTopic("lt", rmqfake.TopicLite); err != nil {
				t.Fatal(err)
			}
			topic := "t"
			if tc.recs[0].LiteTopic != "" {
				topic = "lt"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var rec idRecorder
			s.Intercept("SendMessage", rec.hook(1))
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: topic,
				Concurrency: 1, Linger: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close(ctx)
			ids, errs := sink.Send(ctx, tc.recs...)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
			}
			counts := rec.byID()
			stored := s.Stats().Topics[topic].Sent
			if stored <= int64(len(tc.recs)) {
				t.Fatalf("the fake stored %d messages for %d records: the lost response was not retried", stored, len(tc.recs))
			}
			if len(counts) != len(tc.recs) {
				t.Fatalf("%d records were sent under %d distinct ids (%v): a retry made new ids", len(tc.recs), len(counts), counts)
			}
			for i, id := range ids {
				if counts[id] == 0 {
					t.Errorf("record %d: future id %q was never sent (sent: %v)", i, id, counts)
				}
			}
		})
	}
}

// TestSinkFailedResultHasID: a record that fails after all its attempts
// still reports the id it was sent under (the broker may have stored it).
func TestSinkFailedResultHasID(t *testing.T) {
	s := rmqfake.NewForTest(t)
	if err := s.CreateTopic("t", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	var rec idRecorder
	s.Intercept("SendMessage", rec.hook(100))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "t", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	f := sink.Write(ctx, rmqflow.Record{Body: []byte("x")})
	id, err := f.Wait(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send under lost responses: %v, want the broker's error", err)
	}
	counts := rec.byID()
	if id == "" || counts[id] != 2 || len(counts) != 1 {
		t.Fatalf("failed record reports id %q; the fake saw %v (want one id, twice)", id, counts)
	}
}
