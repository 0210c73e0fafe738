package rmqkuiper_test

import (
	"fmt"
	"testing"
	"time"
)

// startOn starts rmqflow-sql with a "test" source section for tg and a
// stream s over tg's in topic.
func startOn(t *testing.T, tg *target, home string, env ...string) *server {
	t.Helper()
	if home == "" {
		home = t.TempDir()
		sourceSections(t, home, map[string]map[string]any{"test": tg.sourceSection()})
	}
	srv := startServer(t, home, env...)
	return srv
}

// TestProjection: a rule that selects fields and metadata writes one message
// per input message to the out topic (lite topic from a selected column, the
// reserved rocketmq_* columns left out of the body) and acks each input
// message once its row was written.
func TestProjection(t *testing.T) {
	eachTarget(t, "p", func(t *testing.T, tg *target) {
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("proj", `SELECT text, n, meta(rocketmq_lite_topic) AS session, meta(rocketmq_message_id) AS id,
			meta(rocketmq_seq) AS rocketmq_seq FROM s`, []map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("proj")
		const n = 40
		tg.send(t, rowsN(n, func(i int) map[string]any { return map[string]any{"n": i, "text": fmt.Sprintf("t%d", i)} }),
			func(i int) string { return tg.lite(i % 4) })
		eventually(t, 60*time.Second, "every row written", func() (bool, string) {
			return len(out.snapshot()) >= n, fmt.Sprintf("%d of %d", len(out.snapshot()), n)
		})
		seen := map[int]bool{}
		for _, r := range out.snapshot() {
			i := num(r.body["n"])
			if r.body["text"] != fmt.Sprintf("t%d", i) || r.lite != tg.lite(i%4) || r.body["session"] != r.lite ||
				r.body["id"] == "" || r.body["id"] == nil {
				t.Fatalf("row %v in lite topic %s", r.body, r.lite)
			}
			if _, ok := r.body["rocketmq_seq"]; ok {
				t.Fatalf("the reserved column rocketmq_seq was written: %v", r.body)
			}
			seen[i] = true
		}
		if len(seen) != n {
			t.Fatalf("%d distinct rows of %d", len(seen), n)
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked", func() (bool, string) {
				c := tg.inStats()
				return c.Acked == n && c.InFlight == 0, fmt.Sprintf("%+v", c)
			})
			return
		}
		srv.stop()
		tg.noneComeBack(t, 15*time.Second)
	})
}
