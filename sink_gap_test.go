package rmqflow_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestSinkFailedRecordLeavesGap: docs/grpc-connector.md says a record that
// fails for good leaves a gap in its lite topic and the ones after it are
// still sent. Four records of one lite topic go through an ordered Sink; the
// broker refuses r2 with BAD_REQUEST (not retriable). r2's future carries the
// error, it was tried once, and a consumer receives r1, r3, r4 in that order.
func TestSinkFailedRecordLeavesGap(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	fake := fakeLite(t)
	conn := rmqflow.Connection{Endpoints: fake.Addr()}
	ctx := rmqtest.Context(t, 30*time.Second)
	var (
		mu    sync.Mutex
		tries int // SendMessage calls carrying r2
	)
	fake.Intercept("SendMessage", func(c rmqfake.Call) rmqfake.Verdict {
		for _, m := range c.Request.(*v2.SendMessageRequest).GetMessages() {
			if string(m.GetBody()) == "r2" {
				mu.Lock()
				tries++
				mu.Unlock()
				return rmqfake.Verdict{Response: &v2.SendMessageResponse{
					Status: &v2.Status{Code: v2.Code_BAD_REQUEST, Message: "injected: refused for good"}}}
			}
		}
		return rmqfake.Verdict{}
	})
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "main", LiteTopic: "k", Concurrency: 4})
	must(t, err)
	var fs []*rmqflow.SendFuture
	for _, b := range []string{"r1", "r2", "r3", "r4"} {
		fs = append(fs, sink.Write(ctx, rmqflow.Record{Body: []byte(b)}))
	}
	for i, f := range fs {
		_, err := f.Wait(ctx)
		switch {
		case i == 1 && !errors.Is(err, client.ErrBadRequest):
			t.Errorf("r2: %v, want the BAD_REQUEST refusal", err)
		case i != 1 && err != nil:
			t.Errorf("r%d: %v", i+1, err)
		}
	}
	must(t, sink.Close(ctx))
	mu.Lock()
	if tries != 1 {
		t.Errorf("r2 sent %d times, want 1 (BAD_REQUEST is not retried)", tries)
	}
	mu.Unlock()

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	must(t, src.Start(ctx))
	defer src.Close(context.Background())
	var got []string
	for len(got) < 3 {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, m.Value)
		must(t, src.Acker().Ack(ctx, m.Handle))
	}
	if want := []string{"r1", "r3", "r4"}; !slices.Equal(got, want) {
		t.Errorf("the consumer received %v, want %v", got, want)
	}
	if st := fake.Stats().Topics["main"]; st.Sent != 3 {
		t.Errorf("%d messages stored, want 3", st.Sent)
	}
}
