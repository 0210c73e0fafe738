package rmqio

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// flaky records, per label and body, what a flaky step saw.
var flaky = struct {
	sync.Mutex
	tries, ok, dead map[string]int
	outcomes        map[string][]Outcome
}{tries: map[string]int{}, ok: map[string]int{}, dead: map[string]int{}, outcomes: map[string][]Outcome{}}

// flakyStepFn stands for a step whose call fails for a while, in Beam's
// dead-letter idiom: it emits what it worked to its first output and what
// failed to its second. A message of this label fails its first Fails
// tries (counted in the process); others pass.
type flakyStepFn struct {
	Label string
	Fails int
}

func (fn *flakyStepFn) ProcessElement(m AckableMessage, worked, failed func(AckableMessage)) {
	b := string(m.Payload)
	if !strings.HasPrefix(b, fn.Label+"-") {
		// An earlier run's leftover on the real broker: acked, but for a
		// copy from the dead-letter topic, which no ack removes (routed
		// out, as docs/beam.md says).
		if !m.DeadLettered {
			worked(m)
		}
		return
	}
	flaky.Lock()
	flaky.tries[b]++
	if m.DeadLettered {
		flaky.dead[b]++
	}
	fail := fn.Fails < 0 || flaky.tries[b] <= fn.Fails
	if !fail {
		flaky.ok[b]++
	}
	flaky.Unlock()
	if fail {
		failed(m)
		return
	}
	worked(m)
}

// recordOutcomeFn notes Retry's outcomes under Label.
type recordOutcomeFn struct{ Label string }

func (fn *recordOutcomeFn) ProcessElement(o Outcome) {
	flaky.Lock()
	flaky.outcomes[fn.Label] = append(flaky.outcomes[fn.Label], o)
	flaky.Unlock()
}

func init() {
	register.DoFn3x0[AckableMessage, func(AckableMessage), func(AckableMessage)](&flakyStepFn{})
	register.DoFn1x0[Outcome](&recordOutcomeFn{})
}

// flakyCounts is what the flaky step and Retry saw of want.
type flakyCounts struct {
	handled, runs, deadCopies int
	dropped                   []string
	outcomes                  map[string]int
	queues                    map[string]bool
}

func countFlaky(label string, want map[string]bool) flakyCounts {
	flaky.Lock()
	defer flaky.Unlock()
	c := flakyCounts{outcomes: map[string]int{}, queues: map[string]bool{}}
	for _, o := range flaky.outcomes[label] {
		c.outcomes[o.Outcome]++
		if o.DeadLetterQueue != "" {
			c.queues[o.DeadLetterQueue] = true
		}
	}
	for b := range want {
		c.runs += flaky.tries[b]
		if flaky.ok[b] > 0 {
			c.handled++
		}
		if flaky.dead[b] > 0 {
			c.deadCopies++
		}
		if flaky.ok[b] == 0 && flaky.dead[b] == 0 {
			c.dropped = append(c.dropped, b)
		}
	}
	return c
}

// comeBack reads the group for d after a job ended and counts the messages
// of label that come back (acking them): those not acked for good. A
// message given up on to the dead-letter queue of a normal topic does not
// come back; a lite message's copy does (docs/broker-semantics.md, g).
func comeBack(t *testing.T, endpoint string, cfg ReadConfig, label string, d time.Duration) int {
	t.Helper()
	cfg.Connection = Connection{Endpoints: endpoint}
	sc, err := cfg.sourceConfig()
	if err != nil {
		t.Fatal(err)
	}
	src, err := rmqflow.NewSource(sc, rmqflow.BytesDecoder())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	back := 0
	for {
		m, err := src.Next(ctx) // waiting for an absence: until d ends
		if err != nil {
			return back
		}
		if strings.HasPrefix(string(m.Value), label+"-") {
			back++
		}
		_ = src.Acker().Ack(ctx, m.Handle)
	}
}

// TestStepFailsOncePerMessage is issue 24's Beam scenario, as a pipeline
// would be written: Read → Throttle → a step that fails once per message
// and then succeeds → its failures to Retry, its work to Ack; a backlog of
// 4 lite topics × 5 messages, in a group that allows 4 deliveries. Counts
// sent, handled, acked, dead-lettered (and where), dropped: every message
// is deferred once by Retry (judged by its own failure: its first), then
// handled and acked; none is dead-lettered or dropped, nothing comes back,
// no ack fails. (Before Retry a failed message waited out its invisibility:
// the same counts, 10 s later.)
func TestStepFailsOncePerMessage(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		closeReaders(t)
		const n, lites = 20, 4
		label := rmqtest.Unique("once-" + tg.name)
		want := produce(t, tg.endpoint, "rmqflow-beam-v", label, n, lites)
		read := ReadConfig{Connection: tg.conn(), MainTopic: "rmqflow-beam-v", Group: "rmqflow-beam-v-g",
			AwaitDuration: 5 * time.Second, InvisibleDuration: rmqflow.MinInvisibleDuration, MaxBundleTime: 200 * time.Millisecond,
			StopAfterIdle: rmqflow.MinInvisibleDuration + tg.idle}
		ack := AckConfig{Connection: tg.conn()}
		p, s := beam.NewPipelineWithRoot()
		admitted := Throttle(s, ThrottleConfig{AckConfig: ack}, Read(s, read))
		worked, failed := beam.ParDo2(s, &flakyStepFn{Label: label, Fails: 1}, admitted)
		beam.ParDo0(s, &recordOutcomeFn{Label: label}, Retry(s, RetryConfig{AckConfig: ack}, failed))
		passert.Empty(s, Ack(s, ack, worked))
		if err := ptest.Run(p); err != nil {
			t.Fatal(err)
		}
		c := countFlaky(label, want)
		acked, dlq := "-", "-"
		if tg.fake != nil {
			st := tg.fake.Stats().Groups["rmqflow-beam-v-g"].Counts
			acked, dlq = fmt.Sprint(st.Acked), fmt.Sprint(st.DeadLettered)
		}
		back := comeBack(t, tg.endpoint, read, label, 15*time.Second)
		t.Logf("%s: sent %d; handled %d (step runs %d); Retry outcomes %v (queues %v); acks %s; dead-lettered %s (copies seen %d); came back %d; dropped %d",
			tg.name, n, c.handled, c.runs, c.outcomes, slices.Sorted(maps.Keys(c.queues)), acked, dlq, c.deadCopies, back, len(c.dropped))
		if c.handled != n || len(c.dropped) > 0 {
			t.Errorf("%d of %d handled; dropped %v", c.handled, n, c.dropped)
		}
		if c.outcomes["deferred"] != n || len(c.outcomes) != 1 {
			t.Errorf("Retry's outcomes %v, want %d deferred", c.outcomes, n)
		}
		if c.deadCopies > 0 || back > 0 {
			t.Errorf("%d dead-lettered copies seen, %d messages came back", c.deadCopies, back)
		}
		if tg.fake != nil && (acked != fmt.Sprint(n) || dlq != "0") {
			t.Errorf("rmqfake: %s acks, %s dead-lettered; want %d and 0", acked, dlq, n)
		}
	})
}

// TestRetryGivesUpByOwnCount: a step that always fails, on a normal topic
// (simple mode), with Retry's MaxDeliveryAttempt 2: each message is deferred
// once, then given up on: by default moved to its group's dead-letter queue,
// never acked, and visible as a "dead-lettered" Outcome naming the queue;
// nothing comes back. With OnValve rmqflow.ValveAck, asked for, the
// messages are acked instead: dropped, each an "acked-by-valve" Outcome.
func TestRetryGivesUpByOwnCount(t *testing.T) {
	run := func(t *testing.T, tg target, onValve rmqflow.ValveAction) (flakyCounts, map[string]bool, int) {
		closeReaders(t)
		const n = 10
		label := rmqtest.Unique("giveup-" + tg.name)
		want := produceNormal(t, tg.endpoint, "rmqflow-beam-n", label, n)
		read := ReadConfig{Connection: tg.conn(), Simple: true, Topic: "rmqflow-beam-n", Group: "rmqflow-beam-n-g",
			AwaitDuration: 5 * time.Second, InvisibleDuration: rmqflow.MinInvisibleDuration, MaxBundleTime: 200 * time.Millisecond,
			StopAfterIdle: tg.idle}
		ack := AckConfig{Connection: tg.conn()}
		p, s := beam.NewPipelineWithRoot()
		worked, failed := beam.ParDo2(s, &flakyStepFn{Label: label, Fails: -1}, Read(s, read))
		beam.ParDo0(s, &recordOutcomeFn{Label: label}, Retry(s, RetryConfig{AckConfig: ack, MaxDeliveryAttempt: 2, OnValve: onValve}, failed))
		passert.Empty(s, Ack(s, ack, worked))
		if err := ptest.Run(p); err != nil {
			t.Fatal(err)
		}
		c := countFlaky(label, want)
		back := comeBack(t, tg.endpoint, read, label, 15*time.Second)
		dlq := "-"
		if tg.fake != nil {
			dlq = fmt.Sprint(tg.fake.Stats().Groups["rmqflow-beam-n-g"].Counts.DeadLettered)
		}
		t.Logf("%s, OnValve %v: sent %d; handled %d (step runs %d); Retry outcomes %v (queues %v); dead-lettered %s; came back %d",
			tg.name, onValve, n, c.handled, c.runs, c.outcomes, slices.Sorted(maps.Keys(c.queues)), dlq, back)
		if back > 0 {
			t.Errorf("%d messages came back", back)
		}
		if c.runs != 2*n {
			t.Errorf("the step ran %d times for %d messages, want 2 each", c.runs, n)
		}
		return c, c.queues, n
	}
	t.Run("dead-letter-queue", func(t *testing.T) {
		eachTarget(t, func(t *testing.T, tg target) {
			c, queues, n := run(t, tg, rmqflow.ValveDeadLetterQueue)
			if c.outcomes["deferred"] != n || c.outcomes["dead-lettered"] != n || len(c.outcomes) != 2 {
				t.Errorf("outcomes %v, want %d deferred and %d dead-lettered", c.outcomes, n, n)
			}
			if len(queues) != 1 || !queues["%DLQ%rmqflow-beam-n-g"] {
				t.Errorf("dead-letter queues %v, want %%DLQ%%rmqflow-beam-n-g", queues)
			}
			if tg.fake != nil {
				if st := tg.fake.Stats().Groups["rmqflow-beam-n-g"].Counts; st.DeadLettered != int64(n) {
					t.Errorf("rmqfake dead-lettered %d, want %d: %+v", st.DeadLettered, n, st)
				}
			}
		})
	})
	t.Run("ack", func(t *testing.T) {
		tg := target{name: "rmqfake", idle: 3 * time.Second}
		tg.fake = rmqfakeServer(t)
		tg.endpoint = tg.fake.Addr()
		c, _, n := run(t, tg, rmqflow.ValveAck)
		if c.outcomes["deferred"] != n || c.outcomes["acked-by-valve"] != n || len(c.outcomes) != 2 {
			t.Errorf("outcomes %v, want %d deferred and %d acked-by-valve", c.outcomes, n, n)
		}
		if st := tg.fake.Stats().Groups["rmqflow-beam-n-g"].Counts; st.DeadLettered != 0 || st.Acked != int64(n) {
			t.Errorf("rmqfake: %+v, want %d acked (dropped, as asked) and none dead-lettered", st, n)
		}
	})
}

// produceNormal sends n messages, body "<prefix>-<i>", to a normal topic.
func produceNormal(t *testing.T, endpoint, topic, prefix string, n int) map[string]bool {
	t.Helper()
	sink, err := rmqflow.NewSink(t.Context(), rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: endpoint}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	bodies := make(map[string]bool, n)
	recs := make([]rmqflow.Record, n)
	for i := range recs {
		body := fmt.Sprintf("%s-%d", prefix, i)
		bodies[body] = true
		recs[i] = rmqflow.Record{Body: []byte(body)}
	}
	if _, errs := sink.Send(t.Context(), recs...); errs != nil {
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return bodies
}
