package rmqbenthos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// model is a stand-in model service: it answers "answer:<request>" and fails
// the first fails calls for the request body failFor.
type model struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	failFor string
	fails   int
}

func newModel(t *testing.T, failFor string, fails int) *model {
	m := &model{calls: map[string]int{}, failFor: failFor, fails: fails}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body := string(b)
		m.mu.Lock()
		m.calls[body]++
		n := m.calls[body]
		m.mu.Unlock()
		if body == m.failFor && n <= m.fails {
			http.Error(w, "model overloaded", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "answer:%s", body)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *model) callsFor(body string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[body]
}

// requests sends lites × per requests, prefix-<l>/<i> into lite topic
// prefix-<l>, and returns the bodies per lite topic in send order.
func requests(t *testing.T, ctx context.Context, endpoint, prefix string, lites, per int) collected {
	t.Helper()
	want := collected{}
	var recs []rmqflow.Record
	for i := 0; i < per; i++ {
		for l := 0; l < lites; l++ {
			lite := fmt.Sprintf("%s-%d", prefix, l)
			body := fmt.Sprintf("%s-%d/%d", prefix, l, i)
			want[lite] = append(want[lite], body)
			recs = append(recs, rmqflow.Record{LiteTopic: lite, Body: []byte(body)})
		}
	}
	send(t, ctx, endpoint, reqTopic, recs...)
	return want
}

// checkReplies: every request has its answer, in its own lite topic, in the
// order of the requests (a duplicate, which at-least-once allows, is
// reported, not counted against the order).
func checkReplies(t *testing.T, got, want collected) {
	t.Helper()
	for lite, bodies := range want {
		var firsts []string
		seen := map[string]bool{}
		for _, b := range got[lite] {
			if seen[b] {
				t.Logf("%s: duplicate answer %s", lite, b)
				continue
			}
			seen[b] = true
			firsts = append(firsts, b)
		}
		var exp []string
		for _, b := range bodies {
			exp = append(exp, "answer:"+b)
		}
		if !slices.Equal(firsts, exp) {
			t.Errorf("%s: answers %v, want %v", lite, firsts, exp)
		}
	}
}

// TestExampleLiteModelReply runs examples/lite-model-reply.yaml as shipped:
// 20 requests over 5 lite topics, one failing its model call 4 times (the
// http processor's own retries, then a nack: deferred on the broker, back
// later), each answered into its own lite topic of the replies topic, in
// order, and every request acked — on rmqfake and on the real broker.
func TestExampleLiteModelReply(t *testing.T) {
	for name, ep := range map[string]string{"rmqfake": fake(t).Addr(), "rocketmq": realBroker(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := rmqtest.Context(t, 3*time.Minute)
			prefix := rmqtest.Unique("bmr")
			flaky := prefix + "-2/1"
			m := newModel(t, flaky, 4)
			want := requests(t, ctx, ep, prefix, 5, 4)
			runStream(t, readExample(t, "lite-model-reply.yaml"), map[string]string{
				"RMQFLOW_ENDPOINT": ep, "MODEL_URL": m.srv.URL,
				"REQUESTS_TOPIC": reqTopic, "REQUESTS_GROUP": reqGroup, "REPLIES_TOPIC": repTopic,
			})
			got := collectAll(t, ctx, ep, repTopic, repGroup, prefix, want)
			checkReplies(t, got, want)
			if n := m.callsFor(flaky); n < 5 {
				t.Errorf("the flaky request was called %d times, want at least 5 (4 failures, then the answer)", n)
			}
		})
	}
}

// collectAll collects until every wanted body has its answer.
func collectAll(t *testing.T, ctx context.Context, ep, topic, group, prefix string, want collected) collected {
	t.Helper()
	n := 0
	for _, b := range want {
		n += len(b)
	}
	got := collect(t, ctx, ep, topic, group, prefix, n)
	for {
		missing := 0
		for lite, bodies := range want {
			for _, b := range bodies {
				if !slices.Contains(got[lite], "answer:"+b) {
					missing++
				}
			}
		}
		if missing == 0 {
			return got
		}
		// Duplicates took the place of answers still to come.
		for lite, more := range collect(t, ctx, ep, topic, group, prefix, missing) {
			got[lite] = append(got[lite], more...)
		}
	}
}

// TestExampleTwoStageManualAck runs examples/two-stage-manual-ack.yaml: the
// input acks nothing; the rocketmq_ack processor acks each request after its
// model call, and defers the one whose call failed, which comes back and is
// then acked. Nothing is left on the broker.
func TestExampleTwoStageManualAck(t *testing.T) {
	s := fake(t)
	ctx := rmqtest.Context(t, 2*time.Minute)
	prefix := rmqtest.Unique("b2s")
	flaky := prefix + "-1/0"
	m := newModel(t, flaky, 4)
	want := requests(t, ctx, s.Addr(), prefix, 3, 3)
	runStream(t, readExample(t, "two-stage-manual-ack.yaml"), map[string]string{
		"RMQFLOW_ENDPOINT": s.Addr(), "MODEL_URL": m.srv.URL, "REQUESTS_TOPIC": reqTopic, "REQUESTS_GROUP": reqGroup,
	})
	waitFor(t, time.Minute, "every request acked", func() bool {
		c := s.Stats().Groups[reqGroup]
		return c.Acked >= 9 && c.InFlight == 0 && c.Backlog == 0
	})
	for _, bodies := range want {
		for _, b := range bodies {
			if n := m.callsFor(b); n == 0 {
				t.Errorf("%s never reached the model", b)
			}
		}
	}
	if n := m.callsFor(flaky); n < 5 {
		t.Errorf("the flaky request was called %d times, want at least 5 (deferred after failing, then answered)", n)
	}
}

// TestExampleHotTenantThrottle runs examples/hot-tenant-throttle.yaml with a
// 2 s window: a tenant with a backlog of 200 is deferred on the broker while
// ten quiet tenants trickle in (a message every 20 ms among them), and every
// message still ends in the results topic, each tenant's in order. A quiet
// tenant is never deferred: its five messages never make the five acks the
// throttle needs before it may act.
//
// It runs on the topics and groups of examples/fixtures.txt with the
// example's default names, as docs/benthos.md tells a newcomer to.
func TestExampleHotTenantThrottle(t *testing.T) {
	fx, err := rmqfake.LoadFixtures("examples/fixtures.txt")
	if err != nil {
		t.Fatal(err)
	}
	s := rmqfake.NewForTest(t, rmqfake.WithFixtures(fx...), rmqfake.FastLiteDispatch())
	ctx := rmqtest.Context(t, 2*time.Minute)
	prefix := rmqtest.Unique("bht")
	var mu sync.Mutex
	deferred := map[string]int{} // lite topic -> throttle deferrals
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		req := c.Request.(*v2.ChangeInvisibleDurationRequest)
		if d := req.GetInvisibleDuration().AsDuration(); d > 0 && d <= 2*time.Second { // the throttle's 1 s, not a renewal
			mu.Lock()
			deferred[req.GetLiteTopic()]++
			mu.Unlock()
		}
		return rmqfake.Verdict{}
	})
	want := collected{}
	record := func(lite string, i int) rmqflow.Record {
		body := fmt.Sprintf(`{"n":%d}`, i)
		want[lite] = append(want[lite], body)
		return rmqflow.Record{LiteTopic: lite, Body: []byte(body)}
	}
	hot := prefix + "-hot"
	var backlog []rmqflow.Record
	for i := 0; i < 200; i++ {
		backlog = append(backlog, record(hot, i))
	}
	send(t, ctx, s.Addr(), "tenants", backlog...)
	runStream(t, readExample(t, "hot-tenant-throttle.yaml"), map[string]string{
		"RMQFLOW_ENDPOINT": s.Addr(), "FAIR_WINDOW": "2s", "FAIR_MIN_COUNT": "5", "FAIR_DEFER": "1s",
	})
	// The quiet tenants offer little: one message every 20 ms among ten of
	// them (a producer's pace, not a wait for an event).
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	for i := 0; i < 5; i++ {
		for c := 0; c < 10; c++ {
			<-pace.C
			send(t, ctx, s.Addr(), "tenants", record(fmt.Sprintf("%s-c%d", prefix, c), i))
		}
	}
	got := collect(t, ctx, s.Addr(), "results", "results-g", prefix, 250)
	for lite, bodies := range want {
		var ns []int
		for _, b := range got[lite] {
			var r struct {
				N      int    `json:"n"`
				Tenant string `json:"tenant"`
			}
			if err := json.Unmarshal([]byte(b), &r); err != nil || r.Tenant != lite {
				t.Fatalf("%s: result %q (%v), want its tenant set", lite, b, err)
			}
			ns = append(ns, r.N)
		}
		if len(ns) != len(bodies) || !slices.IsSorted(ns) {
			t.Errorf("%s: results %v, want the %d messages in order", lite, ns, len(bodies))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("throttle deferrals by lite topic: %v", deferred)
	for lite, n := range deferred {
		if lite != hot {
			t.Errorf("quiet tenant %s was deferred %d times", lite, n)
		}
	}
	if deferred[hot] == 0 {
		t.Error("the flooding tenant was never deferred")
	}
}
