package rmqbenthos_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	rmqbenthos "github.com/rmqflow/rmqflow/integrations/benthos"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// logLines records the messages of the records logged through it.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

// with returns the lines that contain s.
func (l *logLines) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// giveUp is what a give-up run saw.
type giveUp struct {
	lite       string // the lite topic of poison and next
	poisonRuns int    // pipeline runs of poison from the main topic
	fromDLQ    int    // deliveries of poison from %DLQ%<group>
	m          *counts
	log        *logLines
}

// runGiveUp sends "poison" then "next" into a fresh lite topic of the
// requests topic and runs the rocketmq input (with inputExtra, YAML lines,
// and valves.max_defers 2) through a mapping that always throws on poison,
// into an output that rejects errored messages, until next succeeded and,
// with awaitDLQ, poison came back from the group's dead-letter queue.
func runGiveUp(t *testing.T, ctx context.Context, endpoint, inputExtra string, awaitDLQ bool) *giveUp {
	t.Helper()
	g := &giveUp{lite: rmqtest.Unique("giveup"), log: &logLines{}}
	send(t, ctx, endpoint, reqTopic, rmqflow.Record{LiteTopic: g.lite, Body: []byte("poison")}, rmqflow.Record{LiteTopic: g.lite, Body: []byte("next")})
	id := rmqtest.Unique("counts")
	g.m = newCounts(id)
	t.Cleanup(func() { countsByID.Delete(id) })
	b := service.NewStreamBuilder()
	b.SetEnvVarLookupFunc(envLookup(map[string]string{"EP": endpoint}))
	must(t, b.AddInputYAML(`rocketmq:
  endpoints: ${EP}
  lite:
    - topic: `+reqTopic+`
      group: `+reqGroup+`
  nack_backoff: 100ms
  valves:
    max_defers: 2
`+inputExtra))
	must(t, b.AddProcessorYAML(`mapping: 'root = if content() == "poison" { throw("poison cannot be read") } else { content() }'`))
	must(t, b.SetMetricsYAML(metricsYAML(id)))
	b.SetLogger(slog.New(g.log))
	var mu sync.Mutex
	next, back := make(chan struct{}), make(chan struct{})
	must(t, b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		var berr *service.BatchError
		for i, m := range batch {
			if lite, _ := m.MetaGet(rmqflow.AttrLiteTopic); lite != g.lite {
				continue
			}
			body, _ := m.AsBytes()
			switch dlq, _ := m.MetaGet(rmqflow.AttrDeadLettered); {
			case string(body) == "next":
				close(next)
			case dlq == "true":
				if g.fromDLQ++; g.fromDLQ == 1 {
					close(back)
				}
			default:
				g.poisonRuns++
			}
			if err := m.GetError(); err != nil { // reject_errored: a nack
				if berr == nil {
					berr = service.NewBatchError(batch, err)
				}
				berr.Failed(i, err)
			}
		}
		if berr != nil {
			return berr
		}
		return nil
	}))
	stop := start(t, b)
	waits := []chan struct{}{next}
	if awaitDLQ {
		waits = append(waits, back)
	}
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("timed out")
		}
	}
	stop()
	return g
}

// TestInputGivesUpToTheBrokerDLQ: with no dead_letter configured, a message
// the pipeline keeps failing is moved to the group's dead-letter queue on
// the broker once a valve fires — not acked by the input — and the message
// behind it goes on. The log line names the input's dead_letter.topic (a
// Benthos user cannot call Runner.SetDeadLetter), and the
// rocketmq_dead_lettered metric counts it with to=broker-dlq. On rmqfake,
// as on RocketMQ 5.5.0, the lite message comes back from %DLQ%<group>
// (rocketmq_dead_lettered true): why dead_letter.topic exists.
func TestInputGivesUpToTheBrokerDLQ(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		ctx := rmqtest.Context(t, 2*time.Minute)
		g := runGiveUp(t, ctx, endpoint, "", fake != nil)
		t.Logf("poison ran %d times, came back from the DLQ %d times; dead-lettered %s (valve: %s)", g.poisonRuns, g.fromDLQ,
			g.m.by(rmqbenthos.MetricDeadLettered, "to"), g.m.by(rmqbenthos.MetricDeadLettered, "valve"))
		if g.poisonRuns != 3 {
			t.Errorf("poison ran %d times before the valve, want 3 (max_defers 2 nacks, then the valve)", g.poisonRuns)
		}
		if n := g.m.sum(rmqbenthos.MetricDeadLettered, "to=broker-dlq", "valve=max-defers"); n != 1 || g.m.sum(rmqbenthos.MetricDeadLettered) != 1 {
			t.Errorf("%s: %s, want to=broker-dlq=1 (valve max-defers) and nothing else", rmqbenthos.MetricDeadLettered, g.m.by(rmqbenthos.MetricDeadLettered, "to"))
		}
		lines := g.log.with("gave up on a message")
		if len(lines) != 1 || !strings.Contains(lines[0], "the rocketmq input's dead_letter.topic") || strings.Contains(lines[0], "Runner.SetDeadLetter") {
			t.Errorf("give-up log lines %q: want one naming the rocketmq input's dead_letter.topic, not Runner.SetDeadLetter", lines)
		}
		if fake != nil {
			if c := fake.Stats().Groups[reqGroup].LiteTopics[g.lite]; c.DeadLettered != 1 {
				t.Errorf("rmqfake counts of the lite topic %+v: want poison in the DLQ", c)
			}
		}
	})
}

// TestInputDeadLetterDrop: dead_letter.drop: true is the explicit choice to
// drop: the message a valve gave up on is acked, nothing goes to the DLQ,
// and the metric and the log say dropped.
func TestInputDeadLetterDrop(t *testing.T) {
	s := fake(t)
	ctx := rmqtest.Context(t, time.Minute)
	g := runGiveUp(t, ctx, s.Addr(), "  dead_letter:\n    drop: true\n", false)
	if n := g.m.sum(rmqbenthos.MetricDeadLettered, "to=dropped"); n != 1 || g.m.sum(rmqbenthos.MetricDeadLettered) != 1 {
		t.Errorf("%s: %s, want to=dropped=1 only", rmqbenthos.MetricDeadLettered, g.m.by(rmqbenthos.MetricDeadLettered, "to"))
	}
	if lines := g.log.with("dropping"); len(lines) != 1 || !strings.Contains(lines[0], "dead_letter.drop: true") {
		t.Errorf("drop log lines %q: want one naming dead_letter.drop", lines)
	}
	waitFor(t, 10*time.Second, "both acked", func() bool { return s.Stats().Groups[reqGroup].Acked == 2 })
	if c := s.Stats().Groups[reqGroup]; c.DeadLettered != 0 || c.InFlight != 0 || c.Backlog != 0 {
		t.Errorf("rmqfake group counts %+v: want both acked, none in the DLQ", c.Counts)
	}
}

// TestInputDeadLetterTopic: dead_letter.topic parks a message a valve gave
// up on in a topic of the user's own (here a lite topic of the replies
// topic): a copy with its origin, lite topic, id and cause as properties;
// the original is acked, nothing goes to the broker's DLQ, and the message
// behind it goes on.
func TestInputDeadLetterTopic(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		ctx := rmqtest.Context(t, 2*time.Minute)
		parking := rmqtest.Unique("parked")
		g := runGiveUp(t, ctx, endpoint, fmt.Sprintf("  dead_letter:\n    topic: %s\n    lite_topic: %s\n", repTopic, parking), false)
		if n := g.m.sum(rmqbenthos.MetricDeadLettered, "to=topic"); n != 1 || g.m.sum(rmqbenthos.MetricDeadLettered) != 1 {
			t.Errorf("%s: %s, want to=topic=1 only", rmqbenthos.MetricDeadLettered, g.m.by(rmqbenthos.MetricDeadLettered, "to"))
		}
		src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: endpoint},
			Lite: []rmqflow.LiteBinding{{Topic: repTopic, Group: repGroup}}, AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
		must(t, err)
		must(t, src.Start(ctx))
		defer src.Close(context.Background())
		for {
			m, err := src.Next(ctx)
			must(t, err)
			must(t, src.Acker().Ack(ctx, m.Handle))
			if m.Meta.LiteTopic != parking {
				continue // another test's reply, or an earlier run's
			}
			p := m.Meta.Properties
			if m.Value != "poison" || p[rmqflow.PropertyDeadLetterOrigin] != reqTopic || p[rmqflow.PropertyDeadLetterLiteTopic] != g.lite ||
				p[rmqflow.PropertyDeadLetterMessageID] == "" || !strings.Contains(p[rmqflow.PropertyDeadLetterCause], "poison cannot be read") {
				t.Errorf("parked %q with properties %v, want poison with its origin and cause", m.Value, p)
			}
			break
		}
		if fake != nil {
			waitFor(t, 10*time.Second, "both acked", func() bool { return fake.Stats().Groups[reqGroup].Acked == 2 })
			if c := fake.Stats().Groups[reqGroup]; c.DeadLettered != 0 || c.InFlight != 0 || c.Backlog != 0 {
				t.Errorf("rmqfake group counts %+v: want both acked, none in the DLQ", c.Counts)
			}
		}
	})
}

// TestInputDeadLetterTopicOfWrongType: a dead_letter.topic that cannot store
// the copies the input parks (a FIFO topic: a copy has no message group; a
// LITE topic without dead_letter.lite_topic: a copy has no lite topic) fails
// Connect, before the input receives anything, with an error that names
// dead_letter.topic and the types the topic accepts. Before, the input
// started, and every message a valve gave up on was parked and refused, and
// came back, for ever.
func TestInputDeadLetterTopicOfWrongType(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		for _, c := range []struct{ topic, types string }{{"rmqflow-fifo-p", "FIFO"}, {repTopic, "LITE"}} {
			t.Run(c.types, func(t *testing.T) {
				ctx := rmqtest.Context(t, time.Minute)
				lite := rmqtest.Unique("wrongtype")
				send(t, ctx, endpoint, reqTopic, rmqflow.Record{LiteTopic: lite, Body: []byte("kept")})
				log := &logLines{}
				b := service.NewStreamBuilder()
				b.SetEnvVarLookupFunc(envLookup(map[string]string{"EP": endpoint}))
				must(t, b.AddInputYAML(`rocketmq:
  endpoints: ${EP}
  lite:
    - topic: `+reqTopic+`
      group: `+reqGroup+`
  dead_letter:
    topic: `+c.topic+`
`))
				got := make(chan string, 1)
				must(t, b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
					for _, m := range batch {
						if l, _ := m.MetaGet(rmqflow.AttrLiteTopic); l == lite {
							select {
							case got <- l:
							default:
							}
						}
					}
					return nil
				}))
				b.SetLogger(slog.New(log))
				stop := start(t, b)
				want := "dead_letter.topic " + c.topic
				waitFor(t, 30*time.Second, "a failed Connect naming "+want, func() bool { return len(log.with(want)) > 0 })
				stop()
				line := log.with(want)[0]
				t.Logf("%s", line)
				if !strings.Contains(line, "accepts "+c.types+" messages only") {
					t.Errorf("connect error %q: want it to name the topic's types (%s)", line, c.types)
				}
				select {
				case <-got:
					t.Errorf("the input received a message although its dead_letter.topic cannot take parked copies")
				default:
				}
				if fake != nil {
					if lc := fake.Stats().Groups[reqGroup].LiteTopics[lite]; lc.Backlog != 1 || lc.InFlight != 0 {
						t.Errorf("rmqfake counts of the lite topic %+v: want the message still there, never received", lc)
					}
				}
			})
		}
	})
}

// TestInputDeadLetterTopicKeepsFailing uses the input as a user does: a
// pipeline whose mapping always throws on "poison" ("next" behind it in the
// same lite topic passes), with dead_letter.topic a LITE main topic and
// dead_letter.lite_topic a name the broker refuses (65 bytes:
// ILLEGAL_LITE_TOPIC on RocketMQ 5.5.0 and rmqfake), which Connect's check
// of the topic's type cannot see. Every park fails. After 3 failed writes
// poison goes to the group's dead-letter queue (counted to=topic-failed 3
// times, then to=broker-dlq), next goes on, nothing is dropped. Before,
// poison was written, refused and deferred by nack_backoff_max on every
// return, holding next back, until the broker's own retry limit moved it.
func TestInputDeadLetterTopicKeepsFailing(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		ctx := rmqtest.Context(t, 2*time.Minute)
		g := runGiveUp(t, ctx, endpoint, fmt.Sprintf("  nack_backoff_max: 300ms\n  dead_letter:\n    topic: %s\n    lite_topic: %s\n", repTopic, strings.Repeat("x", 65)), true)
		failed, dlq := g.m.sum(rmqbenthos.MetricDeadLettered, "to=topic-failed"), g.m.sum(rmqbenthos.MetricDeadLettered, "to=broker-dlq")
		parked, dropped := g.m.sum(rmqbenthos.MetricDeadLettered, "to=topic"), g.m.sum(rmqbenthos.MetricDeadLettered, "to=dropped")
		t.Logf("sent 2 (poison, next); poison ran %d times in the pipeline, next succeeded; parked %d, failed parks %d; to %%DLQ%% %d (back from it %d); dropped %d",
			g.poisonRuns, parked, failed, dlq, g.fromDLQ, dropped)
		if g.poisonRuns != 5 || parked != 0 || failed != 3 || dlq != 1 || dropped != 0 {
			t.Errorf("want poison 5 runs (2 nacks, then 3 failed parks); parked 0, failed parks 3, to %%DLQ%% 1, dropped 0")
		}
		if lines := g.log.with("dead-letter function failed 3 times for a message"); len(lines) != 1 || !strings.Contains(lines[0], "the rocketmq input's dead_letter.topic") {
			t.Errorf("fallback log lines %q: want one naming the rocketmq input's dead_letter.topic", lines)
		}
		if fake != nil {
			if c := fake.Stats().Groups[reqGroup].LiteTopics[g.lite]; c.DeadLettered != 1 {
				t.Errorf("rmqfake counts of the lite topic %+v: want poison in the DLQ", c)
			}
		}
	})
}
