package rmqkuiper_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// windowCase is a window rule counting rows per lite topic (its SQL selects
// session, count(*) AS tokens and max(meta(rocketmq_seq)) AS rocketmq_seq)
// and what windowCounts sends it: per rows into each of sessions lite
// topics.
type windowCase struct {
	sql           string
	sessions, per int
}

// windowCounts runs c on tg: every message is counted once (the results'
// counts per lite topic add up to per), none is acked before a result was
// written (sampled on rmqfake), every one is acked in the end (rmqfake's
// counters; on the broker none comes back after the server stopped).
func windowCounts(t *testing.T, tg *target, c windowCase) {
	t.Helper()
	srv := startOn(t, tg, "")
	srv.stream("s", tg.in, "test")
	out := tg.readOut(t)
	srv.rule("counts", c.sql, []map[string]any{tg.sinkAction(nil)}, nil)
	srv.waitRunning("counts")
	checked := tg.watchAcksFollowWrites()
	rows := rowsN(c.sessions*c.per, func(i int) map[string]any { return map[string]any{"word": i} })
	lite := func(i int) string { return tg.lite(i % c.sessions) }
	tg.send(t, rows, lite)
	eventually(t, 60*time.Second, "every message counted", func() (bool, string) {
		sum := map[string]int{}
		for _, r := range out.snapshot() {
			sum[r.lite] += num(r.body["tokens"])
		}
		for s := 0; s < c.sessions; s++ {
			if sum[tg.lite(s)] < c.per {
				return false, fmt.Sprint(sum)
			}
		}
		return true, ""
	})
	sum := map[string]int{}
	for _, r := range out.snapshot() {
		if r.body["session"] != r.lite {
			t.Fatalf("result %v in lite topic %s", r.body, r.lite)
		}
		sum[r.lite] += num(r.body["tokens"])
	}
	for s := 0; s < c.sessions; s++ {
		if sum[tg.lite(s)] != c.per {
			t.Errorf("session %s counted %d, want %d", tg.lite(s), sum[tg.lite(s)], c.per)
		}
	}
	if tg.fake != nil {
		eventually(t, 30*time.Second, "every message acked", func() (bool, string) {
			st := tg.inStats()
			return st.Acked == int64(c.sessions*c.per) && st.InFlight == 0, fmt.Sprintf("%+v", st)
		})
		if msg := checked(); msg != "" {
			t.Fatal(msg)
		}
		return
	}
	checked()
	srv.stop()
	tg.noneComeBack(t, 12*time.Second)
}

// metric is one number of a rule's status (0 when absent).
func (s *server) metric(id, key string) float64 {
	s.t.Helper()
	f, _ := s.status(id)[key].(float64)
	return f
}

// TestCountWindow: COUNTWINDOW(5) over a normal topic read in simple mode
// through a plain group (the broker hands out what the topic has, without
// holding anything back while messages are in flight): 12 rows make two
// windows, whose results are written and whose rows are acked, while the
// last 2 rows wait, in flight and unacked, for a third window; 3 more rows
// fill it, and every message is counted once and acked after its window's
// result was written. No message is acked before a result was written.
func TestCountWindow(t *testing.T) {
	t.Parallel()
	eachTargetOf(t, "mc", true, func(t *testing.T, tg *target) {
		tg.tag = "count"
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("counts", `SELECT session, count(*) AS tokens, max(meta(rocketmq_seq)) AS rocketmq_seq
			FROM s GROUP BY session, COUNTWINDOW(5)`, []map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("counts")
		checked := tg.watchAcksFollowWrites()
		const sessions = 3
		next := 0
		send := func(n int) {
			recs := make([]rmqflow.Record, n)
			for i := range recs {
				recs[i] = rmqflow.Record{Tag: tg.tag, Body: fmt.Appendf(nil, `{"word": %d, "session": %q}`, next, tg.lite(next%sessions))}
				next++
			}
			tg.sendRecords(t, recs)
		}
		counted := func() int {
			sum := 0
			for _, r := range out.snapshot() {
				if r.body["session"] != r.lite {
					t.Fatalf("result %v in lite topic %s", r.body, r.lite)
				}
				sum += num(r.body["tokens"])
			}
			return sum
		}
		send(12)
		eventually(t, 60*time.Second, "two windows of 5 written", func() (bool, string) {
			return counted() >= 10, fmt.Sprint(counted())
		})
		eventually(t, 30*time.Second, "all 12 rows ingested", func() (bool, string) {
			n := srv.metric("counts", "source_s_0_records_out_total")
			return n >= 12, fmt.Sprint(n)
		})
		if tg.fake != nil {
			eventually(t, 30*time.Second, "the two windows' rows acked", func() (bool, string) {
				st := tg.inStats()
				return st.Acked == 10 && st.InFlight == 2, fmt.Sprintf("%+v", st)
			})
		}
		time.Sleep(3 * time.Second) // waiting for an absence: the 2 rows of the open window make no result, no ack
		if n := counted(); n != 10 {
			t.Fatalf("%d rows counted with 12 sent, want 10 (two windows of 5)", n)
		}
		if tg.fake != nil {
			if st := tg.inStats(); st.Acked != 10 || st.InFlight != 2 {
				t.Fatalf("the open window's rows: %+v, want 10 acked and 2 in flight", st)
			}
		}
		send(3)
		eventually(t, 60*time.Second, "the third window written", func() (bool, string) {
			return counted() >= 15, fmt.Sprint(counted())
		})
		sum := map[string]int{}
		for _, r := range out.snapshot() {
			sum[r.lite] += num(r.body["tokens"])
		}
		for s := 0; s < sessions; s++ {
			if sum[tg.lite(s)] != 5 {
				t.Errorf("session %s counted %d, want 5 (each message once)", tg.lite(s), sum[tg.lite(s)])
			}
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked", func() (bool, string) {
				st := tg.inStats()
				return st.Acked == 15 && st.InFlight == 0 && st.Backlog == 0, fmt.Sprintf("%+v", st)
			})
			if msg := checked(); msg != "" {
				t.Fatal(msg)
			}
			if st := tg.inStats(); st.DeadLettered != 0 {
				t.Fatalf("dead-lettered: %+v", st)
			}
			return
		}
		checked()
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestWaitingWindowRefused: a window that emits only when enough rows or
// the right row came (COUNTWINDOW(n), STATEWINDOW) over a stream whose
// broker holds back a lite topic's (lite mode) or a queue's (a FIFO group in
// simple mode) next messages while earlier ones are in flight, and a
// STATEWINDOW partitioned with OVER (PARTITION BY) anywhere, are stopped by
// error when the rule is created and started: the status over REST says why
// and what to use instead, and the rule receives nothing. (The first could
// wait for ever, then dead-letter; the second would ack a partition's open
// rows with another partition's result.)
func TestWaitingWindowRefused(t *testing.T) {
	t.Parallel()
	const count = `SELECT session, count(*) AS tokens, max(meta(rocketmq_seq)) AS rocketmq_seq FROM s GROUP BY session, COUNTWINDOW(5)`
	const state = `SELECT count(*) AS tokens, max(meta(rocketmq_seq)) AS rocketmq_seq FROM s GROUP BY STATEWINDOW(kind = "begin", kind = "end")`
	for _, c := range []struct {
		name, sql string
		simple    bool
		fifo      bool
		want      []string
	}{
		{"lite-count", count, false, false, []string{"COUNTWINDOW", "lite mode", "TUMBLINGWINDOW", "SESSIONWINDOW"}},
		{"fifo-count", count, true, true, []string{"COUNTWINDOW", "group in-g is a FIFO group", "TUMBLINGWINDOW", "SESSIONWINDOW"}},
		{"lite-state", state, false, false, []string{"STATEWINDOW", "lite mode", "TUMBLINGWINDOW", "SESSIONWINDOW"}},
		{"simple-state-partitioned", state + ` OVER (PARTITION BY session)`, true, false, []string{"STATEWINDOW", "PARTITION BY"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var tg *target
			if c.fifo {
				f := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
				tg = &target{name: "rmqfake", endpoint: f.Addr(), in: "in", inG: "in-g", out: "out", outG: "out-g", fake: f, run: "s", simple: true}
				for _, err := range []error{f.CreateTopic(tg.in, rmqfake.TopicFIFO), f.CreateGroup(tg.inG, rmqfake.FIFO()),
					f.CreateTopic(tg.out, rmqfake.TopicLite), f.CreateGroup(tg.outG, rmqfake.LiteBind(tg.out), rmqfake.Wildcard())} {
					if err != nil {
						t.Fatal(err)
					}
				}
			} else {
				tg = fakeTarget(t, "s", c.simple)
			}
			srv := startOn(t, tg, "")
			srv.stream("s", tg.in, "test")
			srv.rule("waiting", c.sql, []map[string]any{tg.sinkAction(nil)}, nil)
			switch {
			case c.fifo:
				tg.sendRecords(t, []rmqflow.Record{{MessageGroup: "g1", Body: []byte(`{"session": "a", "kind": "begin"}`)}})
			case c.simple:
				tg.sendRecords(t, []rmqflow.Record{{Body: []byte(`{"session": "a", "kind": "begin"}`)}})
			default:
				tg.send(t, []map[string]any{{"session": "a", "kind": "begin"}}, func(int) string { return tg.lite(0) })
			}
			eventually(t, 30*time.Second, "the rule refused", func() (bool, string) {
				st := srv.status("waiting")
				b, _ := json.Marshal(st)
				for _, w := range c.want {
					if !strings.Contains(string(b), w) {
						return false, string(b)
					}
				}
				return st["status"] != "running", string(b)
			})
			st := srv.status("waiting")
			t.Logf("%s", st["source_s_0_last_exception"])
			if st := tg.inStats(); st.InFlight != 0 || st.Acked != 0 {
				t.Fatalf("the refused rule received messages: %+v", st)
			}
		})
	}
}

// TestStateWindow: STATEWINDOW(kind = "begin", kind = "end") over a normal
// topic read in simple mode through a plain group. Rows before the begin
// are dropped by the window, the begin and the rows after it wait in the
// open window: nothing is written and nothing acked, all stay in flight.
// The end row closes the window: its one result (begin, middle rows and
// end) is written, and then every message is acked, the dropped rows before
// the begin too (by the result's progress past them). No message is acked
// before the result was written.
func TestStateWindow(t *testing.T) {
	t.Parallel()
	eachTargetOf(t, "ms", true, func(t *testing.T, tg *target) {
		tg.tag = "state"
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("state", fmt.Sprintf(`SELECT "%s" AS session, count(*) AS tokens, collect(n) AS ns, max(meta(rocketmq_seq)) AS rocketmq_seq
			FROM s WHERE session = "%s" GROUP BY STATEWINDOW(kind = "begin", kind = "end")`, tg.lite(0), tg.lite(0)),
			[]map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("state")
		checked := tg.watchAcksFollowWrites()
		n := 0
		// phase sends rows of one kind and waits until the rule ingested
		// them: the window sees the phases in order.
		phase := func(kind string, k int) {
			recs := make([]rmqflow.Record, k)
			for i := range recs {
				recs[i] = rmqflow.Record{Tag: tg.tag, Body: fmt.Appendf(nil, `{"n": %d, "kind": %q, "session": %q}`, n, kind, tg.lite(0))}
				n++
			}
			tg.sendRecords(t, recs)
			want := float64(n)
			eventually(t, 30*time.Second, kind+" rows ingested", func() (bool, string) {
				got := srv.metric("state", "source_s_0_records_out_total")
				return got >= want, fmt.Sprint(got)
			})
		}
		phase("before", 2)          // 0, 1: dropped, no window open
		phase("begin", 1)           // 2
		phase("middle", 3)          // 3, 4, 5
		time.Sleep(2 * time.Second) // waiting for an absence: the open window writes and acks nothing
		if rows := out.snapshot(); len(rows) > 0 {
			t.Fatalf("a result was written before the end row: %v", rows[0].body)
		}
		if tg.fake != nil {
			if st := tg.inStats(); st.Acked != 0 || st.InFlight != 6 {
				t.Fatalf("before the end row: %+v, want 6 in flight, none acked", st)
			}
		}
		phase("end", 1) // 6
		eventually(t, 60*time.Second, "the window's result written", func() (bool, string) {
			return len(out.snapshot()) > 0, "none"
		})
		rows := out.snapshot()
		if len(rows) != 1 {
			t.Fatalf("%d results, want 1: %v", len(rows), rows)
		}
		got := map[int]bool{}
		ns, _ := rows[0].body["ns"].([]any)
		for _, v := range ns {
			got[num(v)] = true
		}
		if num(rows[0].body["tokens"]) != 5 || len(got) != 5 || !got[2] || !got[6] || got[0] || got[1] {
			t.Fatalf("result %v, want the 5 rows 2..6 (begin to end)", rows[0].body)
		}
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked, the dropped ones too", func() (bool, string) {
				st := tg.inStats()
				return st.Acked == 7 && st.InFlight == 0 && st.Backlog == 0, fmt.Sprintf("%+v", st)
			})
			if msg := checked(); msg != "" {
				t.Fatal(msg)
			}
			if st := tg.inStats(); st.DeadLettered != 0 {
				t.Fatalf("dead-lettered: %+v", st)
			}
			return
		}
		checked()
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestSessionWindow: SESSIONWINDOW(ss, 10, 2), which the rule check allows:
// a window closes 2 s after its last row; every message is counted once and
// acked once its window's result was written.
func TestSessionWindow(t *testing.T) {
	t.Parallel()
	eachTarget(t, "s", func(t *testing.T, tg *target) {
		windowCounts(t, tg, windowCase{sql: `SELECT meta(rocketmq_lite_topic) AS session, count(*) AS tokens,
			max(meta(rocketmq_seq)) AS rocketmq_seq FROM s GROUP BY meta(rocketmq_lite_topic), SESSIONWINDOW(ss, 10, 2)`,
			sessions: 3, per: 10})
	})
}

// TestHavingDropsGroupsAckedByProgress: a tumbling window whose HAVING
// clause drops the groups of some lite topics. Their rows, alone, make no
// result: they wait, in flight and unacked, through several windows; once
// the other lite topics' results are written they are acked by that
// progress (not redelivered: the rule ingests every message once, each
// result on delivery attempt 1), and never written. No message is acked
// before a result was written.
func TestHavingDropsGroupsAckedByProgress(t *testing.T) {
	t.Parallel()
	eachTarget(t, "h", func(t *testing.T, tg *target) {
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("having", `SELECT meta(rocketmq_lite_topic) AS session, count(*) AS tokens,
			max(meta(rocketmq_delivery_attempt)) AS attempt, max(meta(rocketmq_seq)) AS rocketmq_seq
			FROM s GROUP BY meta(rocketmq_lite_topic), TUMBLINGWINDOW(ss, 2) HAVING max(keep) = 1`,
			[]map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("having")
		var mu sync.Mutex
		var bad string
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // the invariant, sampled: no ack before a result was written
			defer close(done)
			for tg.fake != nil {
				if acked, written := tg.inStats().Acked, tg.fake.Stats().Topics[tg.out].Sent; acked > 0 && written == 0 {
					mu.Lock()
					bad = fmt.Sprintf("%d acks before any result was written", acked)
					mu.Unlock()
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		const dropped, kept, per = 3, 2, 10
		// Each dropped row in a lite topic of its own (10, 11, 12): the broker
		// hands out nothing more of a lite topic while a message of it is in
		// flight, and a window rule has no idle check, so a second row behind
		// a dropped one would wait for a result after it.
		tg.send(t, rowsN(dropped, func(int) map[string]any { return map[string]any{"keep": 0} }), func(i int) string { return tg.lite(10 + i) })
		eventually(t, 30*time.Second, "the dropped group's rows ingested", func() (bool, string) {
			n := srv.metric("having", "source_s_0_records_out_total")
			return n >= dropped, fmt.Sprint(n)
		})
		time.Sleep(5 * time.Second) // two windows and more: nothing may be written or acked
		if rows := out.snapshot(); len(rows) > 0 {
			t.Fatalf("a group HAVING drops was written: %v", rows[0].body)
		}
		if tg.fake != nil {
			if st := tg.inStats(); st.Acked != 0 || st.InFlight != dropped {
				t.Fatalf("the dropped group's rows: %+v, want %d in flight, none acked", st, dropped)
			}
		}
		tg.send(t, rowsN(kept*per, func(int) map[string]any { return map[string]any{"keep": 1} }),
			func(i int) string { return tg.lite(1 + i%kept) })
		eventually(t, 60*time.Second, "the kept groups written", func() (bool, string) {
			sum := map[string]int{}
			for _, r := range out.snapshot() {
				sum[r.lite] += num(r.body["tokens"])
			}
			return sum[tg.lite(1)] >= per && sum[tg.lite(2)] >= per, fmt.Sprint(sum)
		})
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked", func() (bool, string) {
				st := tg.inStats()
				return st.Acked == dropped+kept*per && st.InFlight == 0 && st.Backlog == 0, fmt.Sprintf("%+v", st)
			})
		} else {
			time.Sleep(12 * time.Second) // past invisible-duration: a dropped row left unacked would come back
		}
		// Nothing redelivered: the rule ingested each message once.
		if n := srv.metric("having", "source_s_0_records_out_total"); n != dropped+kept*per {
			t.Errorf("the rule ingested %v rows, want %d (each message once)", n, dropped+kept*per)
		}
		sum := map[string]int{}
		for _, r := range out.snapshot() {
			sum[r.lite] += num(r.body["tokens"])
			if (r.lite != tg.lite(1) && r.lite != tg.lite(2)) || num(r.body["attempt"]) != 1 || r.body["session"] != r.lite {
				t.Errorf("result %v in lite topic %s", r.body, r.lite)
			}
		}
		if sum[tg.lite(1)] != per || sum[tg.lite(2)] != per {
			t.Errorf("counts %v, want %d for each kept lite topic", sum, per)
		}
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if tg.fake != nil {
			if st := tg.inStats(); st.DeadLettered != 0 {
				t.Fatalf("dead-lettered: %+v", st)
			}
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestWindowKilledMidStream: a tumbling-window rule whose server is killed
// (SIGKILL) while messages keep coming, and started again on the same
// home: nothing is lost. Each result lists the n of its rows (collect), and
// in the end every message sent is in some written result (a message of a
// window the kill cut comes back and is counted in a later one; some are
// counted twice); every message is acked, none dead-lettered.
func TestWindowKilledMidStream(t *testing.T) {
	t.Parallel()
	eachTarget(t, "r", func(t *testing.T, tg *target) {
		home := t.TempDir()
		sourceSections(t, home, map[string]map[string]any{"test": tg.sourceSection()})
		srv := startServer(t, home)
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("wins", `SELECT meta(rocketmq_lite_topic) AS session, collect(n) AS ns, max(meta(rocketmq_seq)) AS rocketmq_seq
			FROM s GROUP BY meta(rocketmq_lite_topic), TUMBLINGWINDOW(ss, 2)`, []map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("wins")
		const rounds, sessions, per = 16, 6, 5
		const total = rounds * sessions * per
		sent := make(chan struct{})
		go func() { // a round every 500 ms, through the kill and the restart
			defer close(sent)
			for r := 0; r < rounds; r++ {
				base := r * sessions * per
				tg.send(t, rowsN(sessions*per, func(i int) map[string]any { return map[string]any{"n": base + i} }),
					func(i int) string { return tg.lite(i % sessions) })
				time.Sleep(500 * time.Millisecond)
			}
		}()
		counted := func() map[int]int {
			seen := map[int]int{}
			for _, r := range out.snapshot() {
				ns, _ := r.body["ns"].([]any)
				for _, v := range ns {
					seen[num(v)]++
				}
			}
			return seen
		}
		eventually(t, 60*time.Second, "a window result written", func() (bool, string) {
			return len(out.snapshot()) > 0, "none"
		})
		srv.kill()
		before := len(counted())
		if before >= total {
			t.Fatalf("every message was counted before the kill (%d): nothing was cut", before)
		}
		srv = startServer(t, home)
		<-sent
		eventually(t, 120*time.Second, "every message counted after the restart", func() (bool, string) {
			seen := counted()
			return len(seen) == total, fmt.Sprintf("%d distinct of %d (%d before the kill)", len(seen), total, before)
		})
		twice := 0
		for _, k := range counted() {
			if k > 1 {
				twice++
			}
		}
		t.Logf("%d messages counted before the kill, %d counted more than once", before, twice)
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every message acked once", func() (bool, string) {
				st := tg.inStats()
				return st.Acked == total && st.InFlight == 0 && st.Backlog == 0, fmt.Sprintf("%+v", st)
			})
			if st := tg.inStats(); st.DeadLettered != 0 {
				t.Fatalf("dead-lettered: %+v", st)
			}
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}

// TestSimpleModeProjection: a stream over a normal topic (the source's
// simple mode) with a tag filter: only the messages with the tag reach the
// rule, each row is written once with its metadata, and every message is
// acked once its row was written.
func TestSimpleModeProjection(t *testing.T) {
	t.Parallel()
	eachTargetOf(t, "m", true, func(t *testing.T, tg *target) {
		tg.tag = "keep"
		srv := startOn(t, tg, "")
		srv.stream("s", tg.in, "test")
		out := tg.readOut(t)
		srv.rule("simple", `SELECT n, session, meta(rocketmq_tag) AS tag, meta(rocketmq_topic) AS topic,
			meta(rocketmq_seq) AS rocketmq_seq FROM s`, []map[string]any{tg.sinkAction(nil)}, nil)
		srv.waitRunning("simple")
		const n = 40
		recs := make([]rmqflow.Record, n)
		for i := range recs {
			recs[i] = rmqflow.Record{Tag: "drop", Body: fmt.Appendf(nil, `{"n": %d, "session": %q}`, i, tg.lite(i%4))}
			if i%2 == 0 {
				recs[i].Tag = "keep"
			}
		}
		tg.sendRecords(t, recs)
		eventually(t, 60*time.Second, "the tagged rows written", func() (bool, string) {
			return len(out.snapshot()) >= n/2, fmt.Sprintf("%d of %d", len(out.snapshot()), n/2)
		})
		if tg.fake != nil {
			eventually(t, 30*time.Second, "every delivered message acked", func() (bool, string) {
				st := tg.inStats()
				return st.Acked == n/2 && st.InFlight == 0, fmt.Sprintf("%+v", st)
			})
		} else {
			time.Sleep(2 * time.Second) // a row of an untagged message would come with the others
		}
		got := map[int]int{}
		for _, r := range out.snapshot() {
			i := num(r.body["n"])
			got[i]++
			if i%2 != 0 || r.body["tag"] != "keep" || r.body["topic"] != tg.in || r.lite != tg.lite(i%4) {
				t.Errorf("row %v in lite topic %s", r.body, r.lite)
			}
		}
		for i := 0; i < n; i += 2 {
			if got[i] != 1 {
				t.Errorf("row %d written %d times", i, got[i])
			}
		}
		if tg.fake != nil {
			if st := tg.inStats(); st.DeadLettered != 0 || st.Acked != n/2 {
				t.Fatalf("%+v", st)
			}
			return
		}
		srv.stop()
		tg.noneComeBack(t, 12*time.Second)
	})
}
