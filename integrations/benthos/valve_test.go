package rmqbenthos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	rmqbenthos "github.com/rmqflow/rmqflow/integrations/benthos"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The fixture of scripts/rocketmq/fixtures.txt with a small retry limit: 4
// retries, 5 deliveries.
const (
	r4Topic = "rmqflow-benthos-r4"
	r4Group = "rmqflow-benthos-r4-g"
)

// throwOnce is the pipeline of the fail-once scenarios, as a Benthos user
// writes it: a memory cache (resource "tried") remembers which messages were
// tried; the first try of each throws in a mapping, and a later try passes.
var throwOnce = []string{`cache:
  resource: tried
  operator: add # fails once the key is there: a later try
  key: '${! meta("rocketmq_message_id") }'
  value: "1"`, `catch:
  - mapping: 'meta retry = "true"'`, `label: throw_once
mapping: |
  root = if meta("retry") != "true" { throw("the first try of " + content().string() + " fails") } else { content() }`}

// failOnceRun is what a fail-once scenario saw.
type failOnceRun struct {
	sent, handled, succeeded, fromDLQ int
	acked                             int64
	m                                 *counts
	gaps                              map[string][]time.Duration // by body: from a failure to the next try
	nacks                             map[string][]time.Duration // by message id, rmqfake only: each own nack's deferral
	ids                               map[int]string             // the message ids, by place in the lite topic
}

func (r *failOnceRun) String() string {
	return fmt.Sprintf("sent %d, handled %d (pipeline runs; %d succeeded), acked %d, dead-lettered %d (to: %s; valve: %s), dropped %d; deliveries from %%DLQ%% %d, dead-letter risks %d",
		r.sent, r.handled, r.succeeded, r.acked, r.m.sum(rmqbenthos.MetricDeadLettered), r.m.by(rmqbenthos.MetricDeadLettered, "to"),
		r.m.by(rmqbenthos.MetricDeadLettered, "valve"), r.m.sum(rmqbenthos.MetricDeadLettered, "to=dropped"), r.fromDLQ, r.m.sum(rmqbenthos.MetricDeadLetterRisk))
}

// runFailOnce sends n messages into one lite topic of topic and runs the
// rocketmq input of group (plus inputExtra, YAML lines) through throwOnce
// into an output that rejects errored messages, as reject_errored does,
// until every message succeeded or the rest was given up on (or ctx ends).
// refuse, when not nil, makes the output also refuse message i's try
// (from 1) when it returns true. fake, when not nil, is the rmqfake server
// behind endpoint.
func runFailOnce(t *testing.T, ctx context.Context, endpoint string, fake *rmqfake.Server, topic, group string, n int, inputExtra string, refuse func(i, try int) bool) *failOnceRun {
	t.Helper()
	r := &failOnceRun{sent: n, gaps: map[string][]time.Duration{}, nacks: map[string][]time.Duration{}, ids: map[int]string{}}
	var (
		mu      sync.Mutex
		tries   = map[string]int{}       // by body
		index   = map[string]int{}       // by body: its place in the lite topic
		failed  = map[string]time.Time{} // by body: the last failure
		pending = map[string]bool{}      // by message id: failed, its nack not yet seen
		done    = map[string]bool{}
		changed = make(chan struct{}, 1)
	)
	if fake != nil {
		fake.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
			req := c.Request.(*v2.ChangeInvisibleDurationRequest)
			mu.Lock()
			defer mu.Unlock()
			if id := req.GetMessageId(); pending[id] {
				pending[id] = false
				r.nacks[id] = append(r.nacks[id], req.GetInvisibleDuration().AsDuration())
			}
			return rmqfake.Verdict{}
		})
	}
	lite := rmqtest.Unique("once")
	var recs []rmqflow.Record
	for i := 0; i < n; i++ {
		b := fmt.Sprintf("%s/%d", lite, i)
		index[b] = i
		recs = append(recs, rmqflow.Record{LiteTopic: lite, Body: []byte(b)})
	}
	send(t, ctx, endpoint, topic, recs...)

	id := rmqtest.Unique("counts")
	r.m = newCounts(id)
	defer countsByID.Delete(id)
	b := service.NewStreamBuilder()
	b.SetEnvVarLookupFunc(envLookup(map[string]string{"EP": endpoint}))
	in := `rocketmq:
  endpoints: ${EP}
  lite:
    - topic: ` + topic + `
      group: ` + group + "\n" + inputExtra
	must(t, b.AddInputYAML(in))
	must(t, b.AddCacheYAML("label: tried\nmemory: {}"))
	for _, p := range throwOnce {
		must(t, b.AddProcessorYAML(p))
	}
	must(t, b.SetMetricsYAML(metricsYAML(id)))
	must(t, b.SetLoggerYAML("level: WARN"))
	must(t, b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer func() {
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		}()
		var berr *service.BatchError
		for i, m := range batch {
			body, _ := m.AsBytes()
			b := string(body)
			if !strings.HasPrefix(b, lite) {
				continue // an earlier run's leftovers on the real broker
			}
			r.handled++
			tries[b]++
			if d, _ := m.MetaGet(rmqflow.AttrDeadLettered); d == "true" {
				r.fromDLQ++
			}
			if at, ok := failed[b]; ok {
				r.gaps[b] = append(r.gaps[b], time.Since(at))
				delete(failed, b)
			}
			id, _ := m.MetaGet(rmqflow.AttrMessageID)
			r.ids[index[b]] = id
			err := m.GetError()
			if err == nil && refuse != nil && refuse(index[b], tries[b]) {
				err = fmt.Errorf("the output refuses try %d of %s", tries[b], b)
			}
			if err != nil { // reject_errored: a nack
				failed[b] = time.Now()
				pending[id] = true
				if berr == nil {
					berr = service.NewBatchError(batch, err)
				}
				berr.Failed(i, err)
				continue
			}
			done[b] = true
		}
		if berr != nil {
			return berr
		}
		return nil
	}))
	stop := start(t, b)
wait:
	for {
		mu.Lock()
		ok := len(done)
		mu.Unlock()
		if ok == n || int64(ok)+r.m.sum(rmqbenthos.MetricDeadLettered) >= int64(n) {
			break
		}
		select {
		case <-changed:
		case <-r.m.changed:
		case <-ctx.Done():
			t.Error("timed out before every message succeeded or was given up on")
			break wait
		}
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	r.succeeded = len(done)
	r.acked = int64(r.succeeded) // the input acks what the output took
	if fake != nil {
		r.acked = fake.Stats().Groups[group].Acked
	}
	return r
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// onBothTargets runs f on rmqfake (with the project's fixtures) and on the
// real broker.
func onBothTargets(t *testing.T, f func(t *testing.T, endpoint string, fake *rmqfake.Server)) {
	t.Run("rmqfake", func(t *testing.T) {
		s := fake(t)
		f(t, s.Addr(), s)
	})
	t.Run("rocketmq", func(t *testing.T) { f(t, realBroker(t), nil) })
}

// TestInputFailOnceDropsNothing is issue 24's Benthos scenario: one lite
// topic of a group with retry limit 4, 8 messages, a mapping that throws
// once per message. Before, the valves read the delivery count a message
// spent waiting behind the failed messages of its lite topic: 5 delivered,
// 3 dropped on their first failure. Now every message succeeds once its own
// failure passed: 0 dropped, 0 dead-lettered.
func TestInputFailOnceDropsNothing(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		ctx := rmqtest.Context(t, 3*time.Minute)
		r := runFailOnce(t, ctx, endpoint, fake, r4Topic, r4Group, 8, "", nil)
		t.Log(r)
		if r.succeeded != r.sent {
			t.Errorf("%d of %d messages succeeded, want all", r.succeeded, r.sent)
		}
		if d := r.m.sum(rmqbenthos.MetricDeadLettered); d != 0 || r.fromDLQ != 0 {
			t.Errorf("%d messages given up on, %d read back from the DLQ: want none, each failed once only", d, r.fromDLQ)
		}
		if fake != nil {
			if g := fake.Stats().Groups[r4Group]; g.Acked != int64(r.sent) || g.DeadLettered != 0 || g.InFlight != 0 || g.Backlog != 0 {
				t.Errorf("rmqfake group counts %+v: want %d acked, none dead-lettered or left", g.Counts, r.sent)
			}
		}
	})
}

// TestNackBackoffByOwnNacks: with the broker's default retry limit (16) and
// 20 messages in one lite topic, each failing once in the mapping, every
// message's nack is deferred by nack_backoff: its own first nack. Before,
// the backoff grew with the delivery count a message spent waiting behind
// the failed ones of its lite topic: 1, 1, 2, 4 … 256 s down the topic. The
// output also refuses the 2nd and 3rd tries of the 11th message: its own
// three nacks are deferred by 1, 2 and 4 s (the Runner's ErrorBackoff, which
// nack_backoff sets, doubling by the message's own nacks).
func TestNackBackoffByOwnNacks(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		ctx := rmqtest.Context(t, 3*time.Minute)
		const backoff = time.Second // the default nack_backoff
		const thrice = 10
		r := runFailOnce(t, ctx, endpoint, fake, reqTopic, reqGroup, 20, "", func(i, try int) bool { return i == thrice && try <= 3 })
		t.Log(r)
		t.Logf("from a failure to the next try: %v", r.gaps)
		if r.succeeded != r.sent {
			t.Errorf("%d of %d messages succeeded, want all", r.succeeded, r.sent)
		}
		if d := r.m.sum(rmqbenthos.MetricDeadLettered); d != 0 || r.fromDLQ != 0 {
			t.Errorf("%d messages given up on, %d read back from the DLQ: want none", d, r.fromDLQ)
		}
		if fake != nil {
			t.Logf("own nacks' deferrals by message id: %v", r.nacks)
			if len(r.nacks) != r.sent {
				t.Errorf("saw the nack deferral of %d messages, want %d", len(r.nacks), r.sent)
			}
			for id, ds := range r.nacks {
				want := []time.Duration{backoff}
				if id == r.ids[thrice] {
					want = []time.Duration{backoff, 2 * backoff, 4 * backoff}
				}
				if !slices.Equal(ds, want) {
					t.Errorf("message %s: own nacks deferred by %v, want %v (nack_backoff doubling by its own nacks)", id, ds, want)
				}
			}
			return
		}
		// On the broker: no message waits much longer than its own
		// backoff and the hold-back of the messages behind it (before, the
		// 10th waited 2^8 s).
		for b, gs := range r.gaps {
			for _, g := range gs {
				if g > 20*time.Second {
					t.Errorf("%s came back %v after its failure", b, g)
				}
			}
		}
	})
}
