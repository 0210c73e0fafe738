package rmqkuiper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
)

// TestAckIngest: a stream in ack-mode ingest acks every message as it is
// ingested, before the rule is done with its row: while the webhook holds
// the first row it was posted, every message is acked already (rmqfake's
// counters). Rows the WHERE clause drops and rows the webhook refuses (503)
// are acked too and never come back: each row is ingested once and posted
// at most once (at most once). The rule needs none of ack-mode sink's
// options (no disableBufferFullDiscard, no rocketmq_seq).
func TestAckIngest(t *testing.T) {
	t.Parallel()
	eachTarget(t, "ai", func(t *testing.T, tg *target) {
		var mu sync.Mutex
		posts := map[int]int{} // posts per n, refused or taken
		held := false
		release := make(chan struct{})
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			var rows []map[string]any
			var one map[string]any
			if json.Unmarshal(b, &one) == nil {
				rows = append(rows, one)
			} else if err := json.Unmarshal(b, &rows); err != nil {
				http.Error(w, "not JSON", http.StatusBadRequest)
				return
			}
			mu.Lock()
			hold := !held
			held = true
			refuse := false
			for _, row := range rows {
				n := num(row["n"])
				posts[n]++
				refuse = refuse || n%3 == 1
			}
			mu.Unlock()
			if hold { // the first post waits until the test saw the acks
				select {
				case <-release:
				case <-time.After(30 * time.Second):
				}
			}
			if refuse {
				http.Error(w, "refused", http.StatusServiceUnavailable)
			}
		}))
		t.Cleanup(hook.Close)
		state := func() map[int]int {
			mu.Lock()
			defer mu.Unlock()
			out := map[int]int{}
			for k, v := range posts {
				out[k] = v
			}
			return out
		}
		home := t.TempDir()
		section := tg.sourceSection()
		section["ack-mode"] = "ingest"
		sourceSections(t, home, map[string]map[string]any{"test": section})
		srv := startOn(t, tg, home, "KUIPER__BASIC__ENABLEPRIVATENET=true")
		srv.stream("s", tg.in, "test")
		srv.rule("ingest", "SELECT n FROM s WHERE n % 3 != 0", []map[string]any{{"rest": map[string]any{
			"url": hook.URL, "method": "post", "timeout": 40000}}}, map[string]any{})
		srv.waitRunning("ingest")
		const n = 30
		tg.send(t, rowsN(n, func(i int) map[string]any { return map[string]any{"n": i} }), func(i int) string { return tg.lite(i % 5) })
		eventually(t, 60*time.Second, "every message ingested", func() (bool, string) {
			got := srv.metric("ingest", "source_s_0_records_out_total")
			return got >= n, fmt.Sprint(got)
		})
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked while the first post is held", func() (bool, string) {
				c := tg.inStats()
				return c.Acked == n && c.InFlight == 0 && c.Backlog == 0, fmt.Sprintf("%+v", c)
			})
			if p := state(); len(p) != 1 {
				t.Fatalf("posts %v while the first was held, want 1", p)
			}
		}
		close(release)
		eventually(t, 60*time.Second, "every kept row posted", func() (bool, string) {
			p := state()
			return len(p) == 2*n/3, fmt.Sprintf("%d of %d posted", len(p), 2*n/3)
		})
		time.Sleep(13 * time.Second) // past invisible-duration (10 s): a message left unacked would be ingested again
		for i, k := range state() {
			if i%3 == 0 || k != 1 {
				t.Errorf("row %d posted %d times (refused rows too: at most once)", i, k)
			}
		}
		if got := srv.metric("ingest", "source_s_0_records_out_total"); got != n {
			t.Errorf("the rule ingested %v rows, want %d (each message once: nothing redelivered)", got, n)
		}
		if tg.fake != nil {
			if c := tg.inStats(); c.Acked != n || c.InFlight != 0 || c.Backlog != 0 || c.DeadLettered != 0 {
				t.Fatalf("%+v", c)
			}
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestAckExternal: a stream in ack-mode external acks nothing; each row
// carries its message's receipt handle as JSON in meta(rocketmq_handle),
// which the rule writes out. The test parses the handles of half the rows
// (rmqflow.ParseReceiptHandleJSON) and acks them from its own process
// through an AckPool; the other half come back after invisible-duration
// (delivery attempt 2) and are acked the same way; then nothing comes back.
func TestAckExternal(t *testing.T) {
	t.Parallel()
	eachTarget(t, "ae", func(t *testing.T, tg *target) {
		home := t.TempDir()
		section := tg.sourceSection()
		section["ack-mode"] = "external"
		sourceSections(t, home, map[string]map[string]any{"test": section})
		srv := startOn(t, tg, home)
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("external", `SELECT n, meta(rocketmq_lite_topic) AS session, meta(rocketmq_handle) AS handle,
			meta(rocketmq_delivery_attempt) AS attempt FROM s`, []map[string]any{tg.sinkAction(nil)}, map[string]any{})
		srv.waitRunning("external")
		pool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: rmqflow.Connection{Endpoints: tg.endpoint}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = pool.Release(ctx)
		})
		acker := rmqflow.NewAcker(pool)
		// Each message in a lite topic of its own: the broker holds nothing
		// of one back behind another's unacked message.
		const n = 12
		sentAt := time.Now()
		tg.send(t, rowsN(n, func(i int) map[string]any { return map[string]any{"n": i} }), tg.lite)
		// rows is the written rows of one delivery attempt, by n.
		rows := func(attempt int) map[int]outRow {
			m := map[int]outRow{}
			for _, r := range out.snapshot() {
				if num(r.body["attempt"]) == attempt {
					m[num(r.body["n"])] = r
				}
			}
			return m
		}
		eventually(t, 60*time.Second, "every row written", func() (bool, string) {
			return len(rows(1)) == n, fmt.Sprintf("%d of %d", len(rows(1)), n)
		})
		if tg.fake != nil {
			time.Sleep(time.Second) // waiting for an absence: the source acks nothing
			if c := tg.inStats(); c.Acked != 0 || c.InFlight != n {
				t.Fatalf("the source acked in ack-mode external: %+v, want %d in flight, none acked", c, n)
			}
		}
		ack := func(r outRow) {
			t.Helper()
			s, _ := r.body["handle"].(string)
			h, err := rmqflow.ParseReceiptHandleJSON([]byte(s))
			if err != nil {
				t.Fatalf("row %v: the handle does not parse: %v", r.body, err)
			}
			if h.LiteTopic != r.body["session"] {
				t.Errorf("row %v: the handle names lite topic %q", r.body, h.LiteTopic)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := acker.Ack(ctx, h); err != nil {
				t.Fatalf("acking row %v from the test: %v", r.body, err)
			}
		}
		for i, r := range rows(1) {
			if i%2 == 0 {
				ack(r)
			}
		}
		if tg.fake != nil {
			if c := tg.inStats(); c.Acked != n/2 {
				t.Fatalf("after the test acked the even rows: %+v, want %d acked", c, n/2)
			}
		}
		eventually(t, 60*time.Second, "the unacked (odd) rows back on attempt 2", func() (bool, string) {
			return len(rows(2)) >= n/2, fmt.Sprint(len(rows(2)))
		})
		if d := time.Since(sentAt); d < 9*time.Second {
			t.Errorf("the unacked rows came back after %v, before invisible-duration (10 s)", d)
		}
		time.Sleep(time.Second) // a late redelivery of an acked row would show now
		for i, r := range rows(2) {
			if i%2 == 0 {
				t.Errorf("row %d, acked by the test, came back: %v", i, r.body)
				continue
			}
			ack(r)
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked", func() (bool, string) {
				c := tg.inStats()
				return c.Acked == n && c.InFlight == 0 && c.Backlog == 0, fmt.Sprintf("%+v", c)
			})
			if len(rows(3)) != 0 {
				t.Fatalf("rows on attempt 3: %v", rows(3))
			}
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestSinkRouting: the rocketmq sink takes each written message's lite
// topic, tag, keys and user properties from the row's fields
// (lite-topic-field, tag-field, keys-field, property-fields), or fixed
// values, and, on a non-acking action with sendSingle, from templates
// ("{{.session}}-c"); the read-back messages carry them. A template on an
// acking action is refused when the rule is created: eKuiper evaluates it
// over the call's list of rows, fails, and drops the rows, whose messages
// progress would then ack (seen before the refusal: nothing written).
// Every message is acked once both acking actions wrote its row.
func TestSinkRouting(t *testing.T) {
	t.Parallel()
	eachTarget(t, "rt", func(t *testing.T, tg *target) {
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		const sql = `SELECT n, session, concat(session, "-a") AS la, kind, ks, tenant, meta(rocketmq_seq) AS rocketmq_seq FROM s`
		for _, key := range []string{"lite-topic", "tag", "keys"} {
			code, body := srv.try(http.MethodPost, "/rules", map[string]any{"id": "template-" + key, "sql": sql, "triggered": false,
				"actions": []map[string]any{tg.sinkAction(map[string]any{"lite-topic-field": "", key: "{{.session}}"})},
				"options": map[string]any{"disableBufferFullDiscard": true}})
			if code/100 == 2 || !strings.Contains(string(body), key+"-field") {
				t.Errorf("a template in %s of an acking action: %d %s, want it refused naming %s-field", key, code, body, key)
			}
		}
		a := tg.sinkAction(map[string]any{"lite-topic-field": "la", "tag-field": "kind", "keys-field": "ks",
			"property-fields": []string{"tenant", "n"}})
		b := tg.sinkAction(map[string]any{"tag": "fixed", "keys": "k1 k2", "property-fields": "tenant"})
		c := tg.sinkAction(map[string]any{"lite-topic-field": "", "lite-topic": "{{.session}}-c", "tag": "{{.kind}}-t",
			"keys": "{{.session}} fixed", "ack": false, "sendSingle": true})
		srv.rule("route", sql, []map[string]any{a, b, c}, nil)
		srv.waitRunning("route")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("status %v\nserver log:\n%s", srv.status("route"), srv.log)
			}
		})
		const n = 10
		kind := func(i int) string { return []string{"even", "odd"}[i%2] }
		tg.send(t, rowsN(n, func(i int) map[string]any {
			return map[string]any{"n": i, "session": tg.lite(i % 2), "kind": kind(i), "ks": fmt.Sprintf("k%d all", i),
				"tenant": fmt.Sprint("te", i%3)}
		}), func(i int) string { return tg.lite(i % 2) })
		eventually(t, 60*time.Second, "every row written by the three actions", func() (bool, string) {
			return len(out.snapshot()) >= 3*n, fmt.Sprintf("%d of %d", len(out.snapshot()), 3*n)
		})
		seen := map[string]bool{}
		for _, r := range out.snapshot() {
			i := num(r.body["n"])
			session, te := tg.lite(i%2), fmt.Sprint("te", i%3)
			if r.body["session"] != session || r.body["kind"] != kind(i) || r.body["tenant"] != te {
				t.Errorf("body %v", r.body)
			}
			if _, ok := r.body["rocketmq_seq"]; ok {
				t.Errorf("rocketmq_seq written: %v", r.body)
			}
			switch r.lite {
			case session + "-a": // action a: lite topic, tag and keys from fields, two properties (the broker adds its own)
				if r.tag != kind(i) || !slices.Equal(r.keys, []string{fmt.Sprint("k", i), "all"}) ||
					r.props["tenant"] != te || r.props["n"] != fmt.Sprint(i) || r.props["kind"] != "" {
					t.Errorf("action a, row %d: tag %q keys %q properties %v", i, r.tag, r.keys, r.props)
				}
				seen[fmt.Sprint("a", i)] = true
			case session: // action b: lite-topic-field, a fixed tag and keys, one property
				if r.tag != "fixed" || !slices.Equal(r.keys, []string{"k1", "k2"}) || r.props["tenant"] != te || r.props["n"] != "" {
					t.Errorf("action b, row %d: tag %q keys %q properties %v", i, r.tag, r.keys, r.props)
				}
				seen[fmt.Sprint("b", i)] = true
			case session + "-c": // action c: templates, no property-fields
				if r.tag != kind(i)+"-t" || !slices.Equal(r.keys, []string{session, "fixed"}) || r.props["tenant"] != "" {
					t.Errorf("action c, row %d: tag %q keys %q properties %v", i, r.tag, r.keys, r.props)
				}
				seen[fmt.Sprint("c", i)] = true
			default:
				t.Errorf("row %d in lite topic %s", i, r.lite)
			}
		}
		if len(seen) != 3*n {
			t.Errorf("%d distinct (action, row) pairs written, want %d: %v", len(seen), 3*n, seen)
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked", func() (bool, string) {
				c := tg.inStats()
				return c.Acked == n && c.InFlight == 0 && c.Backlog == 0, fmt.Sprintf("%+v", c)
			})
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestLiteTopics: lite-topics subscribes a stream to the listed lite topics
// alone, through a lite group without wildcard: of three lite topics only
// the two listed reach the rule (written, acked); the third's messages are
// never delivered to it and wait in the group, where a reader subscribed to
// that lite topic finds them afterwards on their first delivery.
func TestLiteTopics(t *testing.T) {
	t.Parallel()
	eachTargetKind(t, "lx", false, true, func(t *testing.T, tg *target) {
		tg.liteTopics = []string{tg.lite(0), tg.lite(1)}
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("listed", "SELECT n, meta(rocketmq_lite_topic) AS session, meta(rocketmq_seq) AS rocketmq_seq FROM s",
			[]map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("listed")
		const n = 15
		tg.send(t, rowsN(n, func(i int) map[string]any { return map[string]any{"n": i} }), func(i int) string { return tg.lite(i % 3) })
		eventually(t, 60*time.Second, "the listed lite topics' rows written", func() (bool, string) {
			return len(out.snapshot()) >= 2*n/3, fmt.Sprintf("%d of %d", len(out.snapshot()), 2*n/3)
		})
		time.Sleep(3 * time.Second) // waiting for an absence: nothing of the unlisted lite topic comes
		got := map[int]int{}
		for _, r := range out.snapshot() {
			i := num(r.body["n"])
			got[i]++
			if i%3 == 2 || r.lite != tg.lite(i%3) {
				t.Errorf("row %d of lite topic %s written (listed: %v)", i, r.lite, tg.liteTopics)
			}
		}
		if len(got) != 2*n/3 {
			t.Errorf("rows written %v, want the %d of the listed lite topics once each", got, 2*n/3)
		}
		if got := srv.metric("listed", "source_s_0_records_out_total"); got != 2*n/3 {
			t.Errorf("the rule ingested %v rows, want %d", got, 2*n/3)
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "the listed lite topics' messages acked", func() (bool, string) {
				c := tg.inStats()
				return c.Acked == 2*n/3 && c.InFlight == 0, fmt.Sprintf("%+v", c)
			})
		}
		srv.stop()
		if tg.fake == nil {
			tg.noneComeBack(t, 12*time.Second)
		}
		tg.liteTopics = []string{tg.lite(2)}
		r := tg.read(t, tg.in, tg.inG, true)
		eventually(t, 60*time.Second, "the unlisted lite topic's messages still in the group", func() (bool, string) {
			return len(r.snapshot()) >= n/3, fmt.Sprintf("%d of %d", len(r.snapshot()), n/3)
		})
		for _, m := range r.snapshot() {
			if m.lite != tg.lite(2) || m.attempt != 1 {
				t.Errorf("message %v of lite topic %s on attempt %d, want lite topic %s on its first delivery", m.body, m.lite, m.attempt, tg.lite(2))
			}
		}
	})
}

// TestPendingMaxAge: a message whose row waits in the rule (here in an open
// 30-second tumbling window) is renewed past invisible-duration, but only
// until pending-max-age (10 s): then it is left to come back, and the rule
// ingests it again 11..25 s after the first time (17 s by the renewal
// schedule; 13-14 s seen on rmqfake for one message a run, renewed early):
// not at 10 s (it was renewed), long before the default hour. The copies
// end in the window's result, which acks every message (the first copy's
// ack fails: its handle expired). Each message has a lite topic of its own,
// so that none waits behind another in flight.
func TestPendingMaxAge(t *testing.T) {
	t.Parallel()
	eachTarget(t, "pa", func(t *testing.T, tg *target) {
		home := t.TempDir()
		section := tg.sourceSection()
		section["pending-max-age"] = "10s"
		sourceSections(t, home, map[string]map[string]any{"test": section})
		srv := startOn(t, tg, home)
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("held", `SELECT meta(rocketmq_lite_topic) AS session, collect(n) AS ns, collect(event_time()) AS ts,
			max(meta(rocketmq_seq)) AS rocketmq_seq FROM s GROUP BY meta(rocketmq_lite_topic), TUMBLINGWINDOW(ss, 30)`,
			[]map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("held")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("status %v\nserver log:\n%s", srv.status("held"), srv.log)
			}
		})
		// The windows end at :00 and :30 of each minute: send just after
		// one, so that the next is 26 s or more away.
		for s := time.Now().Second() % 30; s < 1 || s > 4; s = time.Now().Second() % 30 {
			time.Sleep(200 * time.Millisecond)
		}
		const n = 4
		tg.send(t, rowsN(n, func(i int) map[string]any { return map[string]any{"n": i} }), tg.lite)
		eventually(t, 60*time.Second, "a window result written", func() (bool, string) {
			return len(out.snapshot()) >= n, fmt.Sprint(len(out.snapshot()))
		})
		ingested := map[int][]int64{} // n -> the event times (ms) of its rows
		for _, r := range out.snapshot() {
			ns, _ := r.body["ns"].([]any)
			ts, _ := r.body["ts"].([]any)
			if len(ts) != len(ns) {
				t.Fatalf("result %v: collect lists of unequal length", r.body)
			}
			for j := range ns {
				ingested[num(ns[j])] = append(ingested[num(ns[j])], int64(num(ts[j])))
			}
		}
		for i := 0; i < n; i++ {
			// Twice, or three times: the second copy is left after
			// pending-max-age too, and can come back before the window ends.
			ts := ingested[i]
			if len(ts) < 2 {
				t.Errorf("message %d ingested at %v, want it back in the window (left after pending-max-age); results %v", i, ts, out.snapshot())
				continue
			}
			slices.Sort(ts)
			if d := time.Duration(ts[1]-ts[0]) * time.Millisecond; d < 11*time.Second || d > 25*time.Second {
				t.Errorf("message %d came back %v after its first delivery, want 11..25 s (renewed past invisible-duration 10 s, left after pending-max-age 10 s)", i, d)
			}
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked by the result", func() (bool, string) {
				c := tg.inStats()
				return c.InFlight == 0 && c.Backlog == 0, fmt.Sprintf("%+v", c)
			})
			if c := tg.inStats(); c.DeadLettered != 0 {
				t.Fatalf("%+v", c)
			}
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}
