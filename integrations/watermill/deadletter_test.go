package rmqwatermill_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	rmqwatermill "github.com/rmqflow/rmqflow/integrations/watermill"
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

// giveUpRun publishes "poison" then "next" into a fresh lite topic, nacks
// poison whenever it is handed out (as a handler that returns an error under
// a Router does) until next arrives, acks next, and returns what it sent,
// poison's nacks and the subscription. tune sets the subscriber's options on
// top of the tests'.
func giveUpRun(t *testing.T, endpoint string, meter *counterMeter, log *logLines, tune func(*rmqwatermill.SubscriberConfig)) (sent []*message.Message, nacks int, sub *rmqwatermill.Subscriber, ch <-chan *message.Message) {
	t.Helper()
	tg := &target{endpoint: endpoint, mode: rmqflow.ModeLite}
	tg.tune = func(c *rmqwatermill.SubscriberConfig) {
		c.NackBackoff, c.NackBackoffMax = 10*time.Millisecond, 10*time.Millisecond
		c.Source.Connection.Meter, c.Source.Connection.Logger = meter, slog.New(log)
		tune(c)
	}
	topic := rmqtest.Unique("giveup")
	pub := tg.publisher(t)
	sent = publish(t, pub, topic, "poison", "next")
	sub = tg.subscriber(t, wmGroup)
	ch, err := sub.Subscribe(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	for {
		m := receive(t, ch, 30*time.Second)
		if m.UUID == sent[1].UUID {
			m.Ack()
			return sent, nacks, sub, ch
		}
		nacks++
		m.Nack()
	}
}

// TestGiveUpGoesToTheBrokerDLQ: with nothing configured, a message nacked
// until a valve fires is moved to the group's dead-letter queue on the
// broker (rmqflow.ValveDeadLetterQueue, the default), never acked by the
// subscriber: the message behind it is handled, nothing is dropped, and the
// log line names the Subscriber's options, not the Runner's. On rmqfake, as
// on RocketMQ 5.5.0, the lite message comes back from %DLQ%<group>
// (MetaDeadLettered): the reason DeadLetterTopic exists.
func TestGiveUpGoesToTheBrokerDLQ(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		rmqtest.CheckGoroutines(t)
		meter, log := newCounterMeter(), &logLines{}
		sent, nacks, sub, ch := giveUpRun(t, endpoint, meter, log, func(c *rmqwatermill.SubscriberConfig) {
			c.Valves = rmqflow.ThrottleConfig{MaxDefers: 2}
		})
		t.Logf("poison nacked %d times; dead-lettered %s; dropped %d", nacks, meter.by(rmqflow.MetricDeadLettered, "to"),
			meter.sum(rmqflow.MetricDeadLettered, "to", "dropped"))
		if nacks != 3 {
			t.Errorf("poison was handed out %d times before the valve, want 3 (MaxDefers 2 deferrals, then the valve)", nacks)
		}
		if n := meter.sum(rmqflow.MetricDeadLettered, "to", "broker-dlq"); n != 1 || meter.total(rmqflow.MetricDeadLettered) != 1 {
			t.Errorf("dead-lettered %s, want to=broker-dlq=1 and nothing else", meter.by(rmqflow.MetricDeadLettered, "to"))
		}
		lines := log.with("gave up on a message")
		if len(lines) != 1 || !strings.Contains(lines[0], "SubscriberConfig.DeadLetterTopic") || strings.Contains(lines[0], "Runner.SetDeadLetter") {
			t.Errorf("give-up log lines %q: want one naming SubscriberConfig.DeadLetterTopic, not Runner.SetDeadLetter", lines)
		}
		if fake != nil {
			// The copy in %DLQ%<group> is dispatched into its lite topic
			// again, and cannot be acked for good: it is left; Close gives
			// it back.
			back := receive(t, ch, 30*time.Second)
			if back.UUID != sent[0].UUID || back.Metadata.Get(rmqwatermill.MetaDeadLettered) != "true" {
				t.Errorf("after next: %s %q dead-lettered %q, want poison back from the DLQ", back.UUID, back.Payload, back.Metadata.Get(rmqwatermill.MetaDeadLettered))
			}
		}
		if err := sub.Close(); err != nil { // waits for next's ack
			t.Error(err)
		}
		if fake != nil {
			// Acked: next, and poison's delivery, which the forward to the
			// DLQ acks; left: poison's copy from the DLQ.
			if g := fake.Stats().Groups[wmGroup]; g.DeadLettered != 1 || g.Acked != 2 || g.InFlight+g.Backlog != 1 {
				t.Errorf("rmqfake group counts %+v: want poison in the DLQ (its copy left), next acked", g.Counts)
			}
		}
	})
}

// TestGiveUpDropsOnlyWhenTold: Valves.OnValve = rmqflow.ValveAck is the
// explicit choice to drop: the message a valve gave up on is acked, and
// counted as dropped; nothing goes to the DLQ.
func TestGiveUpDropsOnlyWhenTold(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	must(t, s.CreateTopic(wmTopic, rmqfake.TopicLite))
	must(t, s.CreateGroup(wmGroup, rmqfake.LiteBind(wmTopic)))
	meter, log := newCounterMeter(), &logLines{}
	_, nacks, sub, _ := giveUpRun(t, s.Addr(), meter, log, func(c *rmqwatermill.SubscriberConfig) {
		c.Valves = rmqflow.ThrottleConfig{MaxDefers: 1, OnValve: rmqflow.ValveAck}
	})
	if err := sub.Close(); err != nil { // waits for the acks
		t.Error(err)
	}
	if nacks != 2 {
		t.Errorf("poison was handed out %d times before the valve, want 2", nacks)
	}
	if n := meter.sum(rmqflow.MetricDeadLettered, "to", "dropped"); n != 1 || meter.total(rmqflow.MetricDeadLettered) != 1 {
		t.Errorf("dead-lettered %s, want to=dropped=1 only", meter.by(rmqflow.MetricDeadLettered, "to"))
	}
	if g := s.Stats().Groups[wmGroup]; g.DeadLettered != 0 || g.Acked != 2 {
		t.Errorf("rmqfake group counts %+v: want both acked, none in the DLQ", g.Counts)
	}
	if lines := log.with("dropping"); len(lines) != 1 || !strings.Contains(lines[0], "SubscriberConfig.Valves.OnValve = rmqflow.ValveAck") {
		t.Errorf("drop log lines %q: want one naming SubscriberConfig.Valves.OnValve", lines)
	}
}

// TestDeadLetterTopic: DeadLetterTopic parks a message a valve gave up on in
// a lite topic of the user's own, which Subscribe reads back with where it
// came from and why; the original is acked, nothing goes to the broker's
// DLQ, and the message behind it is handled.
func TestDeadLetterTopic(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		rmqtest.CheckGoroutines(t)
		parking := rmqtest.Unique("parked")
		meter, log := newCounterMeter(), &logLines{}
		sent, _, sub, _ := giveUpRun(t, endpoint, meter, log, func(c *rmqwatermill.SubscriberConfig) {
			c.Valves = rmqflow.ThrottleConfig{MaxDefers: 1}
			c.DeadLetterTopic = parking
		})
		if n := meter.sum(rmqflow.MetricDeadLettered, "to", "function"); n != 1 || meter.total(rmqflow.MetricDeadLettered) != 1 {
			t.Errorf("dead-lettered %s, want to=function=1 only", meter.by(rmqflow.MetricDeadLettered, "to"))
		}
		ch, err := sub.Subscribe(ctxT(t), parking)
		if err != nil {
			t.Fatal(err)
		}
		parked := receive(t, ch, 30*time.Second)
		md := parked.Metadata
		if parked.UUID != sent[0].UUID || string(parked.Payload) != "poison" || md.Get(rmqflow.PropertyDeadLetterOrigin) != wmTopic ||
			md.Get(rmqflow.PropertyDeadLetterLiteTopic) == "" || !strings.Contains(md.Get(rmqflow.PropertyDeadLetterCause), rmqwatermill.ErrNacked.Error()) {
			t.Errorf("parked %s %q with metadata %v, want poison with its origin and cause", parked.UUID, parked.Payload, md)
		}
		parked.Ack()
		if err := sub.Close(); err != nil {
			t.Error(err)
		}
		if fake != nil {
			if g := fake.Stats().Groups[wmGroup]; g.DeadLettered != 0 || g.Acked != 3 || g.InFlight != 0 {
				t.Errorf("rmqfake group counts %+v: want poison, next and the parked copy acked, none in the DLQ", g.Counts)
			}
		}
	})
}

// TestSubscribeWildcardGroup: a lite subscription through a wildcard lite
// group, which the broker refuses with INTERNAL_SERVER_ERROR ("subscribe lite
// operation is not supported for this group"), fails in Subscribe with an
// error that says so: ErrWildcardGroup, naming the group, with the broker's
// error.
func TestSubscribeWildcardGroup(t *testing.T) {
	const topic, group = "rmqflow-wm-wild", "rmqflow-wm-wild-g" // scripts/rocketmq/fixtures.txt
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		rmqtest.CheckGoroutines(t)
		if fake != nil {
			must(t, fake.CreateTopic(topic, rmqfake.TopicLite))
			must(t, fake.CreateGroup(group, rmqfake.LiteBind(topic), rmqfake.Wildcard()))
		}
		sub, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{
			Connection: rmqflow.Connection{Endpoints: endpoint}, Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}}}})
		must(t, err)
		defer sub.Close()
		_, err = sub.Subscribe(ctxT(t), rmqtest.Unique("wild"))
		t.Logf("Subscribe: %v", err)
		if !errors.Is(err, rmqwatermill.ErrWildcardGroup) || !errors.Is(err, &client.StatusError{Code: client.CodeInternalServerError}) || !strings.Contains(err.Error(), group) ||
			!strings.Contains(err.Error(), "this group is a wildcard lite group: use an exact one") {
			t.Errorf("Subscribe through a wildcard group: %v, want ErrWildcardGroup naming %s with the broker's INTERNAL_SERVER_ERROR", err, group)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSubscribeDeadLetterTopicOfWrongType: in simple mode DeadLetterTopic is
// a RocketMQ topic of its own, and one that cannot store the copies the
// subscriber parks (a FIFO topic: a copy has no message group; a LITE topic:
// a copy has no lite topic) fails Subscribe, before anything is received,
// with an error that names SubscriberConfig.DeadLetterTopic and the types the
// topic accepts. Before, Subscribe succeeded, and every message a valve gave
// up on was parked and refused, and came back, for ever. (In lite mode the
// copies go to a lite topic of the subscription's own LITE main topic, which
// always takes them: TestDeadLetterTopic.)
func TestSubscribeDeadLetterTopicOfWrongType(t *testing.T) {
	const topic, group, fifo, lite = "rmqflow-normal-b", "rmqflow-normal-b-g", "rmqflow-fifo-p", "rmqflow-lite-b" // scripts/rocketmq/fixtures.txt
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		if fake != nil {
			must(t, fake.CreateTopic(topic, rmqfake.TopicNormal))
			must(t, fake.CreateGroup(group))
			must(t, fake.CreateTopic(fifo, rmqfake.TopicFIFO))
			must(t, fake.CreateTopic(lite, rmqfake.TopicLite))
		}
		for _, c := range []struct{ dlt, types string }{{fifo, "FIFO"}, {lite, "LITE"}} {
			t.Run(c.types, func(t *testing.T) {
				rmqtest.CheckGoroutines(t)
				sub, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{
					Connection: rmqflow.Connection{Endpoints: endpoint}, Mode: rmqflow.ModeSimple, Group: group}, DeadLetterTopic: c.dlt})
				must(t, err)
				defer sub.Close()
				ch, err := sub.Subscribe(ctxT(t), topic)
				t.Logf("Subscribe: %v", err)
				if ch != nil || err == nil || !strings.Contains(err.Error(), "SubscriberConfig.DeadLetterTopic "+c.dlt) ||
					!strings.Contains(err.Error(), "accepts "+c.types+" messages only") {
					t.Errorf("Subscribe with DeadLetterTopic %s: %v, want an error naming SubscriberConfig.DeadLetterTopic and the topic's types (%s)", c.dlt, err, c.types)
				}
			})
		}
	})
}
