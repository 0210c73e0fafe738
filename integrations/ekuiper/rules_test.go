package rmqkuiper_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// fake starts rmqfake with a LITE main topic "agents" (wildcard group
// agents-g) and "answers" (answers-g).
func fake(t *testing.T) *rmqfake.Server {
	t.Helper()
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	for _, name := range []string{"agents", "answers"} {
		if err := s.CreateTopic(name, rmqfake.TopicLite); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateGroup(name+"-g", rmqfake.LiteBind(name), rmqfake.Wildcard()); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// send produces one JSON message per row into lite topics of "agents".
func send(t *testing.T, endpoint string, rows []map[string]any, lite func(i int) string) {
	t.Helper()
	ctx := t.Context()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: endpoint}, Topic: "agents"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	recs := make([]rmqflow.Record, len(rows))
	for i, r := range rows {
		b, _ := json.Marshal(r)
		recs[i] = rmqflow.Record{LiteTopic: lite(i), Body: b}
	}
	if _, errs := sink.Send(ctx, recs...); errs != nil {
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

func rows(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"n": i, "text": fmt.Sprintf("msg-%d", i)}
	}
	return out
}

// TestWhereAcksFilteredRowsByProgress: a rule with a WHERE clause writes the
// rows it keeps to RocketMQ; the rows it drops are acked once a later row
// was written (the rule's progress past them), not lost and not delivered
// again; the last rows, dropped after the last write, wait (in flight,
// renewed) until the next write.
func TestWhereAcksFilteredRowsByProgress(t *testing.T) {
	f := fake(t)
	home := t.TempDir()
	sourceSections(t, home, map[string]map[string]any{
		"default": {"endpoints": f.Addr(), "consumer-group": "agents-g", "await-duration": "5s"},
	})
	srv := startServer(t, home)
	srv.stream("agents", "agents", "default")
	srv.rule("evens", "SELECT n, text, meta(rocketmq_lite_topic) AS lite, meta(rocketmq_seq) AS rocketmq_seq FROM agents WHERE n % 2 = 0",
		[]map[string]any{{"rocketmq": map[string]any{"endpoints": f.Addr(), "topic": "answers", "lite-topic-field": "lite"}}},
		map[string]any{"disableBufferFullDiscard": true})
	const n = 101 // 0..100: the last row is kept
	send(t, f.Addr(), rows(n), func(i int) string { return fmt.Sprintf("s%d", i%5) })
	eventually(t, 60*time.Second, "every row written or dropped, every message acked", func() (bool, string) {
		st := f.Stats().Topics
		return st["answers"].Sent == 51 && st["agents"].Acked == n,
			fmt.Sprintf("written %d of 51, acked %d of %d", st["answers"].Sent, st["agents"].Acked, n)
	})
	// A dropped row after the last write: it waits, not acked, not lost.
	send(t, f.Addr(), []map[string]any{{"n": 1001, "text": "odd"}}, func(int) string { return "s9" })
	eventually(t, 30*time.Second, "the odd row ingested", func() (bool, string) {
		st := f.Stats().Topics["agents"]
		return st.InFlight == 1, fmt.Sprintf("in flight %d", st.InFlight)
	})
	if st := f.Stats().Topics["agents"]; st.Acked != n {
		t.Fatalf("a dropped row was acked without progress past it: acked %d", st.Acked)
	}
	send(t, f.Addr(), []map[string]any{{"n": 1002, "text": "even"}}, func(int) string { return "s9" })
	eventually(t, 30*time.Second, "the progress past the dropped row acks it", func() (bool, string) {
		st := f.Stats().Topics["agents"]
		return st.Acked == n+2, fmt.Sprintf("acked %d of %d", st.Acked, n+2)
	})
}

// TestAckAfterWrappedSink: rocketmq_ack wrapping a rest sink acks a row's
// message only after the POST succeeded; a failed POST gives the message
// back, and it is posted again.
func TestAckAfterWrappedSink(t *testing.T) {
	f := fake(t)
	var mu sync.Mutex
	posted := map[float64]int{}
	failures := 3
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var row map[string]any
		if err := json.Unmarshal(b, &row); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		posted[row["n"].(float64)]++
	}))
	t.Cleanup(hook.Close)
	home := t.TempDir()
	sourceSections(t, home, map[string]map[string]any{
		"default": {"endpoints": f.Addr(), "consumer-group": "agents-g", "await-duration": "5s", "invisible-duration": "10s"},
	})
	srv := startServer(t, home)
	srv.stream("agents", "agents", "default")
	srv.rule("hook", "SELECT n, text, meta(rocketmq_seq) AS rocketmq_seq FROM agents",
		[]map[string]any{{"rocketmq_ack": map[string]any{"after": map[string]any{"rest": map[string]any{
			"url": hook.URL, "method": "post", "sendSingle": true}}, "sendSingle": true}}},
		map[string]any{"disableBufferFullDiscard": true})
	const n = 20
	send(t, f.Addr(), rows(n), func(i int) string { return fmt.Sprintf("s%d", i%4) })
	eventually(t, 90*time.Second, "every row posted and its message acked", func() (bool, string) {
		mu.Lock()
		got := len(posted)
		mu.Unlock()
		st := f.Stats().Topics["agents"]
		return got == n && st.Acked == n, fmt.Sprintf("posted %d of %d, acked %d", got, n, st.Acked)
	})
}
