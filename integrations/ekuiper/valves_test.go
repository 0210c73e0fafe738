package rmqkuiper_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// eachRetry3Target is eachTarget on targets whose in group allows 4
// deliveries (retry limit 3), so that the broker's delivery count matters:
// on rmqfake, a group made so; on the real broker, the fixtures
// rmqflow-sql-v (scripts/rocketmq/fixtures.txt).
func eachRetry3Target(t *testing.T, fn func(t *testing.T, tg *target)) {
	t.Run("rmqfake", func(t *testing.T) {
		f := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
		tg := &target{name: "rmqfake", endpoint: f.Addr(), in: "in", inG: "in-g", out: "out", outG: "out-g", fake: f, run: "v"}
		for _, err := range []error{
			f.CreateTopic(tg.in, rmqfake.TopicLite),
			f.CreateGroup(tg.inG, rmqfake.LiteBind(tg.in), rmqfake.Wildcard(), rmqfake.RetryMax(3)),
			f.CreateTopic(tg.out, rmqfake.TopicLite),
			f.CreateGroup(tg.outG, rmqfake.LiteBind(tg.out), rmqfake.Wildcard()),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		fn(t, tg)
	})
	t.Run("broker", func(t *testing.T) {
		if os.Getenv(rmqtest.EnvEndpoint) == "" {
			t.Skipf("%s is not set: no real broker", rmqtest.EnvEndpoint)
		}
		base := "rmqflow-sql-v"
		tg := &target{name: "broker", endpoint: rmqtest.Endpoint(t), in: base, inG: base + "-g", out: base + "-out",
			outG: base + "-out-g", run: rmqtest.Unique("v")}
		tg.requireFixtures(t)
		fn(t, tg)
	})
}

// flakyHook is a webhook that refuses each row for its first refusals(n)
// posts (a call is refused when one of its rows is), and counts what it saw.
type flakyHook struct {
	refusals func(n int) int
	ours     func(lite string) bool

	mu       sync.Mutex
	posts    map[int]int      // posts of row n, refused or not
	accepted map[int]int      // posts of row n the hook took
	dead     map[int][]string // the dead-letter topics a copy of row n came from
	refused  int
}

func newFlakyHook(refusals func(n int) int, ours func(lite string) bool) *flakyHook {
	return &flakyHook{refusals: refusals, ours: ours, posts: map[int]int{}, accepted: map[int]int{}, dead: map[int][]string{}}
}

func (h *flakyHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var rows []map[string]any
	var one map[string]any
	if json.Unmarshal(b, &one) == nil {
		rows = append(rows, one)
	} else if err := json.Unmarshal(b, &rows); err != nil {
		http.Error(w, "not JSON", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	refuse := false
	var mine []map[string]any
	for _, row := range rows {
		if lite, _ := row["lt"].(string); !h.ours(lite) {
			continue // an earlier run's copy cycling on the real broker: taken
		}
		mine = append(mine, row)
		n := num(row["n"])
		h.posts[n]++
		if h.posts[n] <= h.refusals(n) {
			refuse = true
		}
	}
	if refuse {
		h.refused++
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	for _, row := range mine {
		n := num(row["n"])
		h.accepted[n]++
		if src, _ := row["src"].(string); strings.HasPrefix(src, "%DLQ%") {
			h.dead[n] = append(h.dead[n], src)
		}
	}
}

// handled is how many of rows 0..n-1 the hook took at least once.
func (h *flakyHook) handled(n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := 0
	for i := range n {
		if h.accepted[i] > 0 {
			k++
		}
	}
	return k
}

// failingScenario is what actionFailsForAWhile counted, by row.
type failingScenario struct {
	heads, others []int // dead-lettered heads and other messages
	notAcked      []int // posted, not dead-lettered, yet back after the stop
	dropped       []int // neither posted nor dead-lettered
	handled       int   // rows the webhook took at least once
	where         map[string]bool
	fake          rmqfake.Counts
}

// actionFailsForAWhile runs issue 24's eKuiper scenario on tg, its stream's
// section with extra keys: a rule posts each row to a webhook (rest,
// wrapped by rocketmq_ack) on a busy lite stream — 4 lite topics × 5
// messages, a backlog, so that each lite topic comes in one batch, head
// first — whose group allows 4 deliveries. The webhook refuses every row
// once (each message's own transient failure) and the head of each lite
// topic for its first 4 posts, longer than its share of the group's
// deliveries. It waits until want rows were posted (and, on rmqfake, every
// message was acked, or moved by an ack), one delivery cycle more, stops
// the server, and reads what of the run comes back.
func actionFailsForAWhile(t *testing.T, tg *target, extra map[string]any, want int) failingScenario {
	const lites, per = 4, 5
	const n = lites * per
	head := func(i int) bool { return i < lites } // row i goes to lite topic i%lites, in order
	hook := newFlakyHook(func(i int) int {
		if head(i) {
			return 4
		}
		return 1
	}, tg.ours)
	hooked := httptest.NewServer(hook)
	t.Cleanup(hooked.Close)
	tg.send(t, rowsN(n, func(i int) map[string]any { return map[string]any{"n": i} }), func(i int) string { return tg.lite(i % lites) })
	home := t.TempDir()
	section := tg.sourceSection()
	maps.Copy(section, extra)
	sourceSections(t, home, map[string]map[string]any{"test": section})
	srv := startOn(t, tg, home, "KUIPER__BASIC__ENABLEPRIVATENET=true")
	srv.stream("s", tg.in, "test")
	srv.rule("hook", "SELECT n, meta(rocketmq_lite_topic) AS lt, meta(rocketmq_topic) AS src, meta(rocketmq_seq) AS rocketmq_seq FROM s",
		[]map[string]any{{"rocketmq_ack": map[string]any{
			"after": map[string]any{"rest": map[string]any{"url": hooked.URL, "method": "post", "timeout": 2000}}}}}, nil)
	srv.waitRunning("hook")
	eventually(t, 150*time.Second, "the rows posted once their own failure passed", func() (bool, string) {
		k := hook.handled(n)
		if tg.fake != nil && tg.inStats().Acked < n {
			return false, fmt.Sprintf("%d of %d posted; %+v", k, want, tg.inStats())
		}
		return k >= want, fmt.Sprintf("%d of %d posted", k, want)
	})
	// One more delivery cycle (invisible-duration 10 s), for a message
	// the broker would dead-letter at its next delivery to show.
	time.Sleep(12 * time.Second)
	var res failingScenario
	if tg.fake != nil {
		res.fake = tg.inStats()
	}
	srv.stop()
	// What of this run comes back from the group after the rule stopped:
	// a message not acked for good.
	back := tg.read(t, tg.in, tg.inG, true)
	time.Sleep(15 * time.Second) // waiting for an absence: the broker redelivers within invisible-duration
	cameBack := map[int]string{}
	for _, r := range back.snapshot() {
		cameBack[num(r.body["n"])] = r.topic
	}

	res.handled = hook.handled(n)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	res.where = map[string]bool{}
	for i := range n {
		dead := len(hook.dead[i]) > 0
		if topic, ok := cameBack[i]; ok && strings.HasPrefix(topic, "%DLQ%") {
			dead = true
			res.where[topic] = true
		}
		for _, w := range hook.dead[i] {
			res.where[w] = true
		}
		switch {
		case dead && head(i):
			res.heads = append(res.heads, i)
		case dead:
			res.others = append(res.others, i)
		}
		if _, ok := cameBack[i]; ok && !dead {
			res.notAcked = append(res.notAcked, i)
		}
		if hook.accepted[i] == 0 && !dead {
			res.dropped = append(res.dropped, i)
		}
	}
	posts := 0
	for _, k := range hook.posts {
		posts += k
	}
	acks := "-"
	if tg.fake != nil {
		acks = fmt.Sprint(res.fake.Acked)
	}
	t.Logf("%s %v: sent %d; handled %d (posts %d, %d calls refused); acks %s; came back after the stop %d; dead-lettered %d heads %v and %d others %v (in %v); dropped %d %v",
		tg.name, extra, n, res.handled, posts, hook.refused, acks, len(cameBack), len(res.heads), res.heads, len(res.others), res.others,
		slices.Sorted(maps.Keys(res.where)), len(res.dropped), res.dropped)
	return res
}

// TestActionFailsForAWhile: in actionFailsForAWhile's scenario, each
// message is judged by its own failures: a head is given up on at its
// second failure and moved to the group's dead-letter queue (%DLQ%<group>;
// on RocketMQ 5.5.0 and rmqfake its copy comes back into its lite topic,
// flagged, and is posted once the webhook takes it), nothing is acked
// unposted, and every other message is posted and acked for good once its
// own failure passed — none is dead-lettered for the deliveries it spent
// behind its head (before: on rmqfake all 16 were).
func TestActionFailsForAWhile(t *testing.T) {
	t.Parallel()
	eachRetry3Target(t, func(t *testing.T, tg *target) {
		res := actionFailsForAWhile(t, tg, nil, 20)
		if res.handled != 20 {
			t.Errorf("%d of 20 rows posted", res.handled)
		}
		if len(res.dropped) > 0 {
			t.Errorf("dropped %v: neither posted nor dead-lettered", res.dropped)
		}
		if len(res.others) > 0 {
			t.Errorf("messages that failed once were dead-lettered: %v", res.others)
		}
		if len(res.notAcked) > 0 {
			t.Errorf("messages posted but not acked for good: %v", res.notAcked)
		}
		if !slices.Equal(res.heads, []int{0, 1, 2, 3}) {
			t.Errorf("dead-lettered heads %v, want 0..3 (each refused past its share of the group's deliveries)", res.heads)
		}
		for w := range res.where {
			if w != "%DLQ%"+tg.inG {
				t.Errorf("a copy came from %s, want %%DLQ%%%s", w, tg.inG)
			}
		}
		if tg.fake != nil && res.fake.DeadLettered != 4 {
			t.Errorf("rmqfake dead-lettered %d messages, want 4 (the heads): %+v", res.fake.DeadLettered, res.fake)
		}
	})
}

// TestActionFailsForAWhileOnValveAck: with on-valve ack, asked for, the
// heads are acked at their second failure: dropped, and nothing goes to
// the dead-letter queue; the other messages are posted and acked as by
// default.
func TestActionFailsForAWhileOnValveAck(t *testing.T) {
	t.Parallel()
	eachRetry3Target(t, func(t *testing.T, tg *target) {
		if tg.fake == nil {
			t.Skip("the dropping opt-in runs on rmqfake only")
		}
		res := actionFailsForAWhile(t, tg, map[string]any{"on-valve": "ack"}, 16)
		if !slices.Equal(res.dropped, []int{0, 1, 2, 3}) {
			t.Errorf("dropped %v, want the heads 0..3", res.dropped)
		}
		if len(res.heads)+len(res.others) > 0 || res.fake.DeadLettered != 0 {
			t.Errorf("dead-lettered %v %v (%+v), want none", res.heads, res.others, res.fake)
		}
		if len(res.notAcked) > 0 {
			t.Errorf("messages posted but not acked for good: %v", res.notAcked)
		}
	})
}
