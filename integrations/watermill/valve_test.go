package rmqwatermill_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rmqflow/rmqflow"
	rmqwatermill "github.com/rmqflow/rmqflow/integrations/watermill"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// onBothTargets runs f on rmqfake and on the real broker, each with the LITE
// main topic wmTopic and its exact lite group wmGroup at the broker's
// default retry limit (16 retries), as scripts/rocketmq/fixtures.txt makes
// them; fake is nil on the real broker.
func onBothTargets(t *testing.T, f func(t *testing.T, endpoint string, fake *rmqfake.Server)) {
	t.Run("rmqfake", func(t *testing.T) {
		s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
		if err := s.CreateTopic(wmTopic, rmqfake.TopicLite); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateGroup(wmGroup, rmqfake.LiteBind(wmTopic)); err != nil {
			t.Fatal(err)
		}
		f(t, s.Addr(), s)
	})
	t.Run("broker", func(t *testing.T) { f(t, realBroker(t), nil) })
}

// failFirst is a Router handler's bookkeeping for a handler that fails the
// first time it sees each message and succeeds after.
type failFirst struct {
	mu      sync.Mutex
	calls   map[string]int // by UUID
	done    map[string]bool
	fromDLQ int // deliveries read back from the group's %DLQ% topic
	changed chan struct{}
}

func newFailFirst() *failFirst {
	return &failFirst{calls: map[string]int{}, done: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (f *failFirst) handle(m *message.Message) error {
	f.mu.Lock()
	defer func() {
		f.mu.Unlock()
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}()
	f.calls[m.UUID]++
	if m.Metadata.Get(rmqwatermill.MetaDeadLettered) == "true" {
		f.fromDLQ++
	}
	if f.calls[m.UUID] == 1 {
		return fmt.Errorf("the first try of %s fails", m.Payload)
	}
	f.done[m.UUID] = true
	return nil
}

func (f *failFirst) counts() (calls, succeeded, fromDLQ int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.calls {
		calls += n
	}
	return calls, len(f.done), f.fromDLQ
}

// TestRouterFailFirstDropsNothing is issue 24's Watermill scenario, as a user
// writes it: a Router with no middleware over 5 lite topics × 20 messages,
// with a handler that returns an error the first time it sees each message
// (the Router nacks it: a deferral on the broker). Before, the valves read
// the delivery count a message spent waiting behind the nacked messages of
// its lite topic, and gave up on — acked, dropped — 15 messages that had
// failed once (185 handler calls, 85 acked, 15 dropped at
// max-delivery-attempt). Now every message is handled successfully once its
// own failure passed, and nothing is given up on: 0 dropped, 0
// dead-lettered.
func TestRouterFailFirstDropsNothing(t *testing.T) {
	onBothTargets(t, func(t *testing.T, endpoint string, fake *rmqfake.Server) {
		rmqtest.CheckGoroutines(t)
		const lites, per = 5, 20
		ctx := rmqtest.Context(t, 3*time.Minute)
		meter := newCounterMeter()
		pub, err := rmqwatermill.NewPublisher(rmqwatermill.PublisherConfig{
			Sink: rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: endpoint}}, MainTopic: wmTopic})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		sub, err := rmqwatermill.NewSubscriber(rmqwatermill.SubscriberConfig{Source: rmqflow.SourceConfig{
			Connection: rmqflow.Connection{Endpoints: endpoint, Meter: meter},
			Lite:       []rmqflow.LiteBinding{{Topic: wmTopic, Group: wmGroup}}}})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		h := newFailFirst()
		prefix := rmqtest.Unique("ff")
		for l := 0; l < lites; l++ {
			topic := fmt.Sprintf("%s-%d", prefix, l)
			var payloads []string
			for i := 0; i < per; i++ {
				payloads = append(payloads, fmt.Sprintf("%s/%d", topic, i))
			}
			publish(t, pub, topic, payloads...)
			router.AddNoPublisherHandler(topic, topic, sub, h.handle)
		}
		ran := make(chan error, 1)
		go func() { ran <- router.Run(context.Background()) }()
		<-router.Running()

		// Until every message succeeded, or the rest was given up on.
		const sent = lites * per
	wait:
		for {
			_, ok, _ := h.counts()
			if ok == sent || int64(ok)+meter.total(rmqflow.MetricDeadLettered) >= sent {
				break
			}
			select {
			case <-h.changed:
			case <-meter.changed:
			case <-ctx.Done():
				t.Error("timed out before every message succeeded or was given up on")
				break wait
			}
		}
		if err := router.Close(); err != nil {
			t.Error(err)
		}
		if err := <-ran; err != nil {
			t.Error(err)
		}
		if err := sub.Close(); err != nil {
			t.Error(err)
		}

		calls, ok, fromDLQ := h.counts()
		acked := int64(ok) // the Router acks what the handler returned nil for
		if fake != nil {
			acked = fake.Stats().Groups[wmGroup].Acked
		}
		dead := meter.total(rmqflow.MetricDeadLettered)
		dropped := meter.sum(rmqflow.MetricDeadLettered, "to", "dropped")
		t.Logf("sent %d, handled %d (handler calls; %d succeeded), acked %d, dead-lettered %d (to: %s; valve: %s), dropped %d; deliveries from %%DLQ%% %d, dead-letter risks %d",
			sent, calls, ok, acked, dead, meter.by(rmqflow.MetricDeadLettered, "to"), meter.by(rmqflow.MetricDeadLettered, "valve"),
			dropped, fromDLQ, meter.total(rmqflow.MetricDeadLetterRisk))
		if ok != sent {
			t.Errorf("%d of %d messages succeeded, want all", ok, sent)
		}
		if dead != 0 || dropped != 0 || fromDLQ != 0 {
			t.Errorf("%d messages given up on (%d dropped), %d read back from the DLQ: want none, each failed once only", dead, dropped, fromDLQ)
		}
		if calls < 2*sent {
			t.Errorf("%d handler calls, want at least %d (each message fails once, then succeeds)", calls, 2*sent)
		}
		if fake != nil {
			if g := fake.Stats().Groups[wmGroup]; g.Acked != sent || g.DeadLettered != 0 || g.Backlog != 0 || g.InFlight != 0 {
				t.Errorf("rmqfake group counts %+v: want %d acked, none dead-lettered or left", g.Counts, sent)
			}
		}
	})
}
