package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recMeter records the sums of Int64Counters by name and attributes
// ("name" or "name{k=v,...}").
type recMeter struct {
	noop.Meter
	mu   sync.Mutex
	sums map[string]int64
}

func newRecMeter() *recMeter { return &recMeter{sums: map[string]int64{}} }

func (m *recMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return &recCounter{m: m, name: name}, nil
}

func (m *recMeter) get(key string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sums[key]
}

type recCounter struct {
	noop.Int64Counter
	m    *recMeter
	name string
}

func (c *recCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	key := c.name
	if set := metric.NewAddConfig(opts).Attributes(); set.Len() > 0 {
		key += "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.sums[key] += n
}

// fakeNormal starts rmqfake with a normal topic "t" and its group "g".
func fakeNormal(t *testing.T, opts ...rmqfake.Option) *rmqfake.Server {
	t.Helper()
	s := rmqfake.NewForTest(t, opts...)
	if err := s.CreateTopic("t", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("g"); err != nil {
		t.Fatal(err)
	}
	return s
}

// sendBodies sends one message per body to topic (lite topic = body when
// lite is set), through a sink.
func sendBodies(t *testing.T, ctx context.Context, endpoint, topic string, lite bool, bodies ...string) {
	t.Helper()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: endpoint}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	for _, b := range bodies {
		r := rmqflow.Record{Body: []byte(b)}
		if lite {
			r.LiteTopic = b
		}
		if _, err := sink.Write(ctx, r).Wait(ctx); err != nil {
			t.Fatalf("send %s: %v", b, err)
		}
	}
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// testClock drives a source's renewal ticks with rmqfake's manual clock,
// which the fake's invisibility follows too. armed receives a value each
// time the source's renewer arms its next tick, that is when it has finished
// the previous one.
type testClock struct {
	mc    *rmqfake.ManualClock
	tick  time.Duration
	armed chan struct{}
}

func attachClock[T any](src *rmqflow.Source[T], mc *rmqfake.ManualClock, tick time.Duration) *testClock {
	tc := &testClock{mc: mc, tick: tick, armed: make(chan struct{}, 1024)}
	rmqflow.SetSourceClock(src, mc.Now, func(d time.Duration, f func()) func() bool {
		tm := mc.AfterFunc(d, f)
		select {
		case tc.armed <- struct{}{}:
		default:
		}
		return tm.Stop
	})
	return tc
}

func (tc *testClock) waitArmed(t *testing.T) {
	t.Helper()
	select {
	case <-tc.armed:
	case <-time.After(5 * time.Second):
		t.Fatalf("at %v the source's renewer did not arm its next tick: it has stopped", tc.mc.Now())
	}
}

// steps advances the clock n renewal ticks, one at a time, each time waiting
// for the renewer to finish the tick.
func (tc *testClock) steps(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		tc.mc.Advance(tc.tick)
		tc.waitArmed(t)
	}
}

// countCID counts the ChangeInvisibleDuration calls the fake receives, and
// those with a zero duration (releases) apart.
func countCID(s *rmqfake.Server) (all, zero *atomic.Int64) {
	all, zero = new(atomic.Int64), new(atomic.Int64)
	s.Intercept("ChangeInvisibleDuration", func(c rmqfake.Call) rmqfake.Verdict {
		all.Add(1)
		if c.Request.(*v2.ChangeInvisibleDurationRequest).GetInvisibleDuration().AsDuration() == 0 {
			zero.Add(1)
		}
		return rmqfake.Verdict{}
	})
	return all, zero
}

// manualSource starts a simple-mode source on a fake with a manual clock:
// invisible 10 s, renewal 2 s ahead (ticks of 500 ms).
func manualSource(t *testing.T, ctx context.Context, tweak func(*rmqflow.SourceConfig)) (*rmqfake.Server, *rmqflow.Source[string], *testClock) {
	t.Helper()
	mc := rmqfake.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := fakeNormal(t, rmqfake.WithClock(mc))
	cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Mode: rmqflow.ModeSimple, Topic: "t", Group: "g",
		InvisibleDuration: 10 * time.Second, RenewalAheadTime: 2 * time.Second, AwaitDuration: 5 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	tc := attachClock(src, mc, 500*time.Millisecond)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	tc.waitArmed(t)
	return s, src, tc
}

// TestSourceDrainKeepsRenewing (#8): after Drain, queued messages are still
// renewed until they are emitted, so a slow drain does not redeliver them.
func TestSourceDrainKeepsRenewing(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s, src, tc := manualSource(t, ctx, nil)
	cid, _ := countCID(s)
	sendBodies(t, ctx, s.Addr(), "t", false, "m1", "m2", "m3")
	waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 3 })
	src.Drain()
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Acker().Ack(ctx, m.Handle); err != nil {
		t.Fatal(err)
	}
	// Received at T0, invisible until T0+10 s; renewed once less than 2 s is
	// left, that is at the 17th tick (T0+8.5 s).
	tc.steps(t, 17)
	if got := cid.Load(); got != 2 {
		t.Fatalf("%d renewals by T0+8.5s after Drain, want 2 (the two queued messages)", got)
	}
	tc.steps(t, 5) // T0+11 s: the first invisibility has ended
	for i := 0; i < 2; i++ {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Meta.DeliveryAttempt != 1 {
			t.Errorf("%s emitted with attempt %d, want 1", m.Value, m.Meta.DeliveryAttempt)
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Errorf("ack %s after the drain's renewal: %v", m.Value, err)
		}
	}
	if _, err := src.Next(ctx); !errors.Is(err, rmqflow.ErrSourceClosed) {
		t.Fatalf("Next after the drain: %v, want ErrSourceClosed", err)
	}
	if st := s.Stats().Groups["g"]; st.Backlog != 0 || st.InFlight != 0 || st.Acked != 3 {
		t.Errorf("group after the drain: %+v, want 3 acked and nothing else", st.Counts)
	}
}

// TestSourceDrainBeforeStart: a source drained before it starts starts
// without receiving: a message waiting for the group is never taken, and
// Next reports ErrSourceClosed at once (issue 10, item 10).
func TestSourceDrainBeforeStart(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s := fakeNormal(t)
	sendBodies(t, ctx, s.Addr(), "t", false, "waiting")
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Mode: rmqflow.ModeSimple,
		Topic: "t", Group: "g", AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	src.Drain()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := src.Next(ctx); !errors.Is(err, rmqflow.ErrSourceClosed) {
		t.Fatalf("Next on a source drained before Start: %v (message %v), want ErrSourceClosed", err, m)
	}
	if st := s.Stats().Groups["g"]; st.InFlight != 0 || st.Acked != 0 {
		t.Fatalf("the drained source took messages: %+v", st.Counts)
	}
}

// TestSourceEmitLeavesHalfInvisibility (#18): a message that waited in the
// queue until less than half of InvisibleDuration is left is renewed when it
// is emitted, so its consumer has at least half of InvisibleDuration.
func TestSourceEmitLeavesHalfInvisibility(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s, src, tc := manualSource(t, ctx, nil)
	cid, _ := countCID(s)
	sendBodies(t, ctx, s.Addr(), "t", false, "late")
	waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 1 })
	tc.steps(t, 14) // T0+7 s: 3 s left, more than RenewalAheadTime
	if got := cid.Load(); got != 0 {
		t.Fatalf("%d renewals before T0+7s, want 0", got)
	}
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := cid.Load(); got != 1 {
		t.Errorf("%d renewals at emission with 3 s of 10 s left, want 1", got)
	}
	tc.steps(t, 8) // T0+11 s: past the first invisibility, within the renewed one
	if err := src.Acker().Ack(ctx, m.Handle); err != nil {
		t.Fatalf("ack 4 s after emission: %v (the message had too little invisibility left when emitted)", err)
	}
}

// TestSourceMaxQueueAge (#22): a message left in the queue for MaxQueueAge is
// given back to the group (and counted), not renewed for ever.
func TestSourceMaxQueueAge(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	meter := newRecMeter()
	s, src, tc := manualSource(t, ctx, func(c *rmqflow.SourceConfig) {
		c.MaxQueueAge = 20 * time.Second
		c.Meter = meter
	})
	_, zero := countCID(s)
	sendBodies(t, ctx, s.Addr(), "t", false, "a", "b")
	waitFor(t, 10*time.Second, func() bool { return src.QueueLen() == 2 })
	tc.steps(t, 40) // T0+20 s: not older than MaxQueueAge yet
	if got := zero.Load(); got != 0 {
		t.Fatalf("%d releases by T0+20s, want 0", got)
	}
	tc.steps(t, 1)
	if got := zero.Load(); got != 2 {
		t.Fatalf("%d releases once the messages were queued for more than 20 s, want 2", got)
	}
	if got := meter.get(rmqflow.MetricReleased + "{reason=max_queue_age}"); got != 2 {
		t.Errorf("%s{reason=max_queue_age} = %d, want 2", rmqflow.MetricReleased, got)
	}
	// They come back to the group (this very source may fetch them again).
	m, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Meta.DeliveryAttempt != 2 {
		t.Errorf("after the release %s came with attempt %d, want 2", m.Value, m.Meta.DeliveryAttempt)
	}
}

// TestSourceCloseDuringStart (#14): Close concurrent with Start, at several
// points of the start, races with nothing and leaves no goroutine behind.
func TestSourceCloseDuringStart(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := fakeNormal(t)
	ctx := rmqtest.Context(t, time.Minute)
	var arrived atomic.Pointer[chan struct{}]
	s.Intercept("*", func(c rmqfake.Call) rmqfake.Verdict {
		if p := arrived.Load(); p != nil && c.Method == "Telemetry" {
			select {
			case *p <- struct{}{}:
			default:
			}
		}
		return rmqfake.Verdict{}
	})
	for i := 0; i < 30; i++ {
		src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Mode: rmqflow.ModeSimple,
			Topic: "t", Group: "g", AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan struct{}, 1)
		arrived.Store(&ch)
		started := make(chan error, 1)
		go func() { started <- src.Start(ctx) }()
		switch i % 3 {
		case 1: // while the session opens (or once Start gave up)
			select {
			case <-ch:
			case err := <-started:
				started <- err
			}
		case 2: // once Start has returned
			if err := <-started; err != nil {
				t.Fatal(err)
			}
			started <- nil
		}
		if err := src.Close(ctx); err != nil {
			t.Errorf("run %d: close: %v", i, err)
		}
		if err := <-started; err != nil && !errors.Is(err, rmqflow.ErrSourceClosed) {
			t.Errorf("run %d: Start raced by Close: %v, want nil or ErrSourceClosed", i, err)
		}
		if _, err := src.Next(ctx); !errors.Is(err, rmqflow.ErrSourceClosed) {
			t.Errorf("run %d: Next after Close: %v", i, err)
		}
	}
}

// startSimple starts a simple-mode source on topic/group of endpoint.
func startSimple(t *testing.T, ctx context.Context, conn rmqflow.Connection, topic, group string, tweak func(*rmqflow.SourceConfig)) (*rmqflow.Source[string], error) {
	t.Helper()
	cfg := rmqflow.SourceConfig{Connection: conn, Mode: rmqflow.ModeSimple, Topic: topic, Group: group, AwaitDuration: 5 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src, src.Start(ctx)
}

// startOrNext is the error of Start, or else of the first Next (bounded by
// 10 s: a source that hangs fails the test).
func startOrNext(t *testing.T, src *rmqflow.Source[string], startErr error) error {
	t.Helper()
	if startErr != nil {
		return startErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := src.Next(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next still blocks after 10 s: the receive error never reached the caller")
	}
	return err
}

// TestSourcePermanentReceiveErrors (#16), on rmqfake: refusals that retrying
// cannot change end the source with a typed error carrying the status.
func TestSourcePermanentReceiveErrors(t *testing.T) {
	t.Parallel() // its own emulator; mostly waiting
	t.Run("unknown topic", func(t *testing.T) {
		ctx := rmqtest.Context(t, 20*time.Second)
		s := fakeNormal(t)
		src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: s.Addr()}, "nope", "g", nil)
		err = startOrNext(t, src, err)
		if !errors.Is(err, client.ErrTopicNotFound) {
			t.Fatalf("got %v, want TOPIC_NOT_FOUND", err)
		}
	})
	t.Run("refused credentials", func(t *testing.T) {
		ctx := rmqtest.Context(t, 20*time.Second)
		s := fakeNormal(t, rmqfake.Credentials("ak", "right"))
		src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: s.Addr(), Credentials: client.Credentials{AccessKey: "ak", AccessSecret: "wrong"}}, "t", "g", nil)
		err = startOrNext(t, src, err)
		if !errors.Is(err, client.ErrUnauthorized) && !errors.Is(err, client.ErrForbidden) {
			t.Fatalf("got %v, want UNAUTHORIZED or FORBIDDEN", err)
		}
	})
	for _, code := range []v2.Code{v2.Code_CONSUMER_GROUP_NOT_FOUND, v2.Code_FORBIDDEN, v2.Code_TOPIC_NOT_FOUND} {
		t.Run("receive answers "+code.String(), func(t *testing.T) {
			ctx := rmqtest.Context(t, 20*time.Second)
			s := fakeNormal(t)
			f := newForger(t, s.Addr())
			f.set(nil, func([]*v2.ReceiveMessageResponse) []*v2.ReceiveMessageResponse {
				return []*v2.ReceiveMessageResponse{{Content: &v2.ReceiveMessageResponse_Status{Status: &v2.Status{Code: code, Message: "forged"}}}}
			})
			src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: f.addr}, "t", "g", nil)
			if err != nil {
				t.Fatal(err)
			}
			var got error
			for m, err := range src.Messages(ctx) {
				if m != nil {
					t.Fatalf("a message from a refusing broker: %v", m.Value)
				}
				if got != nil {
					t.Fatalf("Messages yielded a second error: %v", err)
				}
				got = err
			}
			var re *rmqflow.ReceiveError
			var se *client.StatusError
			if !errors.As(got, &re) || !re.Permanent || !errors.As(got, &se) || se.Code != client.Code(code) {
				t.Fatalf("Messages yielded %v, want a permanent *ReceiveError carrying %s", got, code)
			}
			if _, err := src.Next(ctx); !errors.Is(err, &client.StatusError{Code: client.Code(code)}) {
				t.Errorf("Next after the end: %v, want the same error again", err)
			}
		})
	}
}

// TestSourceMaxOutage (#16): transient receive errors are retried, but not
// for longer than MaxOutage; then Next returns an error wrapping the cause.
func TestSourceMaxOutage(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s := fakeNormal(t)
	src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: s.Addr()}, "t", "g", func(c *rmqflow.SourceConfig) { c.MaxOutage = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	sendBodies(t, ctx, s.Addr(), "t", false, "before")
	m, err := src.Next(ctx)
	if err != nil || m.Value != "before" {
		t.Fatalf("first message: %v %v", m, err)
	}
	s.SetFault("ReceiveMessage", rmqfake.Fault{ErrorRate: 1, Code: codes.Unavailable})
	t0 := time.Now()
	err = startOrNext(t, src, nil)
	var re *rmqflow.ReceiveError
	if !errors.As(err, &re) || re.Permanent || status.Code(errors.Unwrap(err)) != codes.Unavailable || !client.IsRetriable(re.Err) {
		t.Fatalf("after the outage: %v, want a non-permanent *ReceiveError wrapping UNAVAILABLE", err)
	}
	if d := time.Since(t0); d < time.Second || re.Outage < time.Second {
		t.Errorf("the source gave up after %v (outage %v), before MaxOutage (1 s)", d, re.Outage)
	}
}

// TestSourceConfigBounds: the new bounds follow the zero-value rule.
func TestSourceConfigBounds(t *testing.T) {
	base := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: "127.0.0.1:1"}, Mode: rmqflow.ModeSimple, Topic: "t", Group: "g"}
	for name, tweak := range map[string]func(*rmqflow.SourceConfig){
		"MaxOutage":   func(c *rmqflow.SourceConfig) { c.MaxOutage = -time.Second },
		"MaxQueueAge": func(c *rmqflow.SourceConfig) { c.MaxQueueAge = -time.Second },
	} {
		cfg := base
		tweak(&cfg)
		_, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
		var oe *rmqflow.OptionError
		if !errors.As(err, &oe) || oe.Option != name {
			t.Errorf("negative %s: %v, want an OptionError naming it", name, err)
		}
	}
	for _, d := range []time.Duration{0, rmqflow.Forever} {
		cfg := base
		cfg.MaxOutage, cfg.MaxQueueAge = d, d
		src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
		if err != nil {
			t.Errorf("MaxOutage = MaxQueueAge = %v: %v", d, err)
			continue
		}
		_ = src.Close(context.Background())
	}
}

// TestSourceEnforcesReservation (#17): a broker answering with more messages
// than asked cannot overfill the queue: the extra ones are released at once
// and counted. MaxMessageNum 2: a share of 2 × 2, filled by two polls (10
// messages answered, 2 kept; then the 8 released, 2 kept).
func TestSourceEnforcesReservation(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s := fakeNormal(t)
	f := newForger(t, s.Addr())
	f.set(func(r *v2.ReceiveMessageRequest) { r.BatchSize = 32 }, nil)
	meter := newRecMeter()
	sendBodies(t, ctx, s.Addr(), "t", false, numbered("m", 10)...)
	src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: f.addr, Meter: meter}, "t", "g", func(c *rmqflow.SourceConfig) { c.MaxMessageNum = 2 })
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	waitFor(t, 10*time.Second, func() bool {
		most = max(most, src.QueueLen())
		st := s.Stats().Groups["g"]
		return st.InFlight == 4 && st.Backlog == 6
	})
	if most > 4 {
		t.Errorf("the queue of 4 held %d messages", most)
	}
	// The source counts the releases once their RPCs have answered, which
	// may be after the fake's counts show them (make test saw 0 here).
	waitFor(t, 10*time.Second, func() bool { return meter.get(rmqflow.MetricReleased+"{reason=excess}") >= 8+6 })
	if got := meter.get(rmqflow.MetricReleased + "{reason=excess}"); got != 8+6 {
		t.Errorf("%s{reason=excess} = %d, want 8 + 6", rmqflow.MetricReleased, got)
	}
}

// TestSourceMalformedMessages (#17): messages without what an ack needs are
// emitted with a typed error, never as good messages, and counted.
func TestSourceMalformedMessages(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s := fakeNormal(t)
	f := newForger(t, s.Addr())
	f.set(nil, func(rs []*v2.ReceiveMessageResponse) []*v2.ReceiveMessageResponse {
		for _, r := range rs {
			m := r.GetMessage()
			if m == nil {
				continue
			}
			switch string(m.GetBody()) {
			case "no-handle":
				m.SystemProperties.ReceiptHandle = nil
			case "no-topic":
				m.Topic = nil
			case "no-id":
				m.SystemProperties.MessageId = ""
			case "no-system-properties":
				m.SystemProperties = nil
			}
		}
		return rs
	})
	meter := newRecMeter()
	bodies := []string{"no-handle", "no-topic", "no-id", "no-system-properties", "ok"}
	sendBodies(t, ctx, s.Addr(), "t", false, bodies...)
	src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: f.addr, Meter: meter}, "t", "g", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < len(bodies) {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		body := string(m.Meta.Body)
		seen[body] = true
		var me *rmqflow.MalformedMessageError
		if body == "ok" {
			if m.Err != nil {
				t.Errorf("ok: %v", m.Err)
			} else if err := src.Acker().Ack(ctx, m.Handle); err != nil {
				t.Errorf("ack ok: %v", err)
			}
			continue
		}
		if !errors.Is(m.Err, rmqflow.ErrMalformedMessage) || !errors.As(m.Err, &me) {
			t.Errorf("%s emitted with Err %v, want a *MalformedMessageError", body, m.Err)
		}
	}
	if got := meter.get(rmqflow.MetricMalformed); got != 4 {
		t.Errorf("%s = %d, want 4", rmqflow.MetricMalformed, got)
	}
}

// TestSourcePerBindingShare (#19): a binding that floods takes at most its own
// share of the queue (2 × MaxMessageNum × FetchConcurrency); another binding
// still gets its messages in.
func TestSourcePerBindingShare(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	for _, n := range []string{"a", "b"} {
		if err := s.CreateTopic(n, rmqfake.TopicLite); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateGroup("g"+n, rmqfake.LiteBind(n), rmqfake.Wildcard()); err != nil {
			t.Fatal(err)
		}
	}
	var blockB atomic.Bool
	blockB.Store(true)
	s.Intercept("ReceiveMessage", func(c rmqfake.Call) rmqfake.Verdict {
		if blockB.Load() && c.Request.(*v2.ReceiveMessageRequest).GetGroup().GetName() == "gb" {
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "b is down for now")}
		}
		return rmqfake.Verdict{}
	})
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Lite:          []rmqflow.LiteBinding{{Topic: "a", Group: "ga"}, {Topic: "b", Group: "gb"}},
		MaxMessageNum: 4, AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	sendBodies(t, ctx, s.Addr(), "a", true, numbered("a", 20)...)
	waitFor(t, 10*time.Second, func() bool { return s.Stats().Groups["ga"].InFlight >= 8 })
	blockB.Store(false)
	sendBodies(t, ctx, s.Addr(), "b", true, numbered("b", 3)...)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Groups["gb"].InFlight < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("binding b got %d of its 3 messages in 10 s while a holds %d (queue %d)",
				s.Stats().Groups["gb"].InFlight, s.Stats().Groups["ga"].InFlight, src.QueueLen())
		}
		time.Sleep(20 * time.Millisecond) // polling the fake's counts; there is no event for them
	}
	// The fake counts a message in flight before it streams it to the
	// client: wait for b's three to reach the queue as well.
	for src.QueueLen() < 11 {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d within 10 s, want 8 + 3 (a holds %d, b %d in flight)",
				src.QueueLen(), s.Stats().Groups["ga"].InFlight, s.Stats().Groups["gb"].InFlight)
		}
		time.Sleep(20 * time.Millisecond) // no event for the queue length either
	}
	if got := s.Stats().Groups["ga"].InFlight; got != 8 {
		t.Errorf("binding a holds %d messages, want its share of 2 × 4", got)
	}
	if got := src.QueueLen(); got != 11 {
		t.Errorf("queue holds %d, want 8 + 3", got)
	}
}

// TestSourcePermanentErrorsRealBroker (#16) on RocketMQ 5.5.0: an unknown
// topic ends Start with a typed TOPIC_NOT_FOUND (a simple-mode session opens
// on it, and the source used to retry its receives for ever); an unknown
// group is refused at the session's settings. Neither hangs.
func TestSourcePermanentErrorsRealBroker(t *testing.T) {
	ep := rmqtest.Endpoint(t)
	missing := rmqtest.Unique("missing")
	for _, c := range []struct {
		name         string
		mode         rmqflow.Mode
		topic, group string
		typed        error
	}{
		{"simple, unknown topic", rmqflow.ModeSimple, missing, rmqtest.NormalGroup("b"), client.ErrTopicNotFound},
		{"simple, unknown group", rmqflow.ModeSimple, rmqtest.NormalTopic("b"), missing, nil},
		{"lite, unknown group", rmqflow.ModeLite, rmqtest.LiteTopic("a"), missing, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := rmqtest.Context(t, 20*time.Second)
			cfg := rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: ep}, Mode: c.mode, AwaitDuration: 5 * time.Second}
			if c.mode == rmqflow.ModeSimple {
				cfg.Topic, cfg.Group = c.topic, c.group
			} else {
				cfg.Lite = []rmqflow.LiteBinding{{Topic: c.topic, Group: c.group}}
			}
			src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = src.Close(context.Background()) })
			err = startOrNext(t, src, src.Start(ctx))
			if err == nil {
				t.Fatal("the source started and delivered on a missing resource")
			}
			if c.typed != nil && !errors.Is(err, c.typed) {
				t.Fatalf("got %v, want %v", err, c.typed)
			}
			t.Logf("%s: %v", c.name, err)
		})
	}
}

// TestSourceEmitsQueuedBeforeReceiveError (#16): a source ended by a
// permanent receive error still hands out what it had queued, then the error.
func TestSourceEmitsQueuedBeforeReceiveError(t *testing.T) {
	ctx := rmqtest.Context(t, 30*time.Second)
	s := fakeNormal(t)
	f := newForger(t, s.Addr())
	var calls atomic.Int32
	f.set(nil, func(rs []*v2.ReceiveMessageResponse) []*v2.ReceiveMessageResponse {
		if calls.Add(1) == 1 {
			return rs
		}
		return []*v2.ReceiveMessageResponse{{Content: &v2.ReceiveMessageResponse_Status{Status: &v2.Status{Code: v2.Code_FORBIDDEN, Message: "forged"}}}}
	})
	sendBodies(t, ctx, s.Addr(), "t", false, "q1", "q2")
	src, err := startSimple(t, ctx, rmqflow.Connection{Endpoints: f.addr}, "t", "g", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var end error
	for m, err := range src.Messages(ctx) {
		if err != nil {
			end = err
			break
		}
		got = append(got, m.Value)
	}
	if len(got) != 2 || !errors.Is(end, client.ErrForbidden) {
		t.Fatalf("got %v then %v, want the 2 queued messages then FORBIDDEN", got, end)
	}
}
