package rmqflow_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// storeOrder records, per lite topic or message group, the bodies of the
// SendMessage calls rmqfake lets through, in the order it sees them; it fails
// the first call carrying body failOnce with a retriable error, before
// storing anything.
type storeOrder struct {
	mu       sync.Mutex
	failOnce string
	failed   bool
	seq      map[string][]string
	calls    int
}

func (o *storeOrder) hook(c rmqfake.Call) rmqfake.Verdict {
	msgs := c.Request.(*v2.SendMessageRequest).GetMessages()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	for _, m := range msgs {
		if !o.failed && string(m.GetBody()) == o.failOnce {
			o.failed = true
			return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "injected: try again")}
		}
	}
	for _, m := range msgs {
		key := m.GetSystemProperties().GetLiteTopic()
		if key == "" {
			key = m.GetSystemProperties().GetMessageGroup()
		}
		o.seq[key] = append(o.seq[key], string(m.GetBody()))
	}
	return rmqfake.Verdict{}
}

// inOrder reports the first key whose bodies ("<key>-<i>") were not stored
// as 0, 1, 2, ... n-1, exactly once each.
func inOrder(seq map[string][]string, keys []string, n int) error {
	for _, k := range keys {
		got := seq[k]
		for i, b := range got {
			if b != fmt.Sprintf("%s-%d", k, i) {
				return fmt.Errorf("%s stored %v: position %d holds %s", k, got, i, b)
			}
		}
		if len(got) != n {
			return fmt.Errorf("%s stored %d records, want %d: %v", k, len(got), n, got)
		}
	}
	return nil
}

// TestSinkKeepsOrderPerKey: records of one lite topic, and of one message
// group, are stored in the order they were written even with several
// senders, small batches and a retried send: the record that failed once is
// stored before every later record of its key (before the fix another sender
// stored them while it waited out its backoff).
func TestSinkKeepsOrderPerKey(t *testing.T) {
	for _, tc := range []struct {
		name, topic string
		typ         rmqfake.TopicType
		rec         func(key string, i int) rmqflow.Record
	}{
		{"lite topics", "lt", rmqfake.TopicLite, func(key string, i int) rmqflow.Record {
			return rmqflow.Record{LiteTopic: key, Body: []byte(fmt.Sprintf("%s-%d", key, i))}
		}},
		{"message groups", "ft", rmqfake.TopicFIFO, func(key string, i int) rmqflow.Record {
			return rmqflow.Record{MessageGroup: key, Body: []byte(fmt.Sprintf("%s-%d", key, i))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rmqfake.NewForTest(t)
			if err := s.CreateTopic(tc.topic, tc.typ); err != nil {
				t.Fatal(err)
			}
			const n = 40
			keys := []string{"k1", "k2", "k3"}
			o := &storeOrder{failOnce: "k1-3", seq: map[string][]string{}}
			s.Intercept("SendMessage", o.hook)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
				Topic: tc.topic, Concurrency: 4, BatchSize: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close(ctx)
			var fs []*rmqflow.SendFuture
			for i := range n {
				for _, k := range keys {
					fs = append(fs, sink.Write(ctx, tc.rec(k, i)))
				}
			}
			for i, f := range fs {
				if _, err := f.Wait(ctx); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			if !o.failed {
				t.Fatal("the injected failure never fired: the test proves nothing")
			}
			if err := inOrder(o.seq, keys, n); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d SendMessage calls", o.calls)
		})
	}
}

// TestSinkOrderPerLiteTopicEndToEnd: with four senders, the records of each
// lite topic come back to a consumer in the order they were written, on the
// real broker as on rmqfake.
func TestSinkOrderPerLiteTopicEndToEnd(t *testing.T) {
	const topic, group = "rmqflow-lite-sink", "rmqflow-lite-sink-g"
	const perTopic, topics = 60, 4
	ctx := rmqtest.Context(t, 2*time.Minute)
	run := rmqtest.Unique("sinkorder")
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(t), Topic: topic, Concurrency: 4, BatchSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	var fs []*rmqflow.SendFuture
	for i := range perTopic {
		for k := range topics {
			fs = append(fs, sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", run, k), Body: []byte(strconv.Itoa(i))}))
		}
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn(t), Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	next := map[string]int{}
	seen := 0
	for seen < perTopic*topics {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", seen, perTopic*topics, err)
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Fatalf("ack: %v", err)
		}
		if !ofRun(run, m) {
			continue
		}
		i, err := strconv.Atoi(m.Value)
		if err != nil {
			t.Fatalf("body %q", m.Value)
		}
		lt := m.Meta.LiteTopic
		if i < next[lt] {
			continue // a redelivery of one already seen (its ack raced the invisibility)
		}
		if i != next[lt] {
			t.Fatalf("%s: got record %d, want %d (stored out of order)", strings.TrimPrefix(lt, run), i, next[lt])
		}
		next[lt]++
		seen++
	}
}

// TestSinkKeepsGroupOrderAcrossQueues: records of several message groups
// written interleaved to a FIFO topic with four queues come back to a FIFO
// consumer in each group's order. Before the fix the sink sent records of
// different groups in one call, which the broker stores in the queue of the
// call's first group: a group's records were split over queues, and a
// consumer reading the queues on their own saw them out of order.
func TestSinkKeepsGroupOrderAcrossQueues(t *testing.T) {
	rmqtest.CheckGoroutines(t)
	s := rmqfake.NewForTest(t)
	must(t, s.CreateTopic("ft", rmqfake.TopicFIFO, rmqfake.Queues(4)))
	must(t, s.CreateGroup("fg", rmqfake.FIFO()))
	ctx := rmqtest.Context(t, time.Minute)
	c := rmqflow.Connection{Endpoints: s.Addr()}
	const n = 30
	groups := []string{"g1", "g2", "g3", "g4", "g5"}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: "ft", Concurrency: 2, BatchSize: 8})
	must(t, err)
	var fs []*rmqflow.SendFuture
	for i := range n {
		for _, g := range groups {
			fs = append(fs, sink.Write(ctx, rmqflow.Record{MessageGroup: g, Body: []byte(fmt.Sprintf("%s-%d", g, i))}))
		}
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	must(t, sink.Close(ctx))
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, Mode: rmqflow.ModeSimple, Topic: "ft", Group: "fg",
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	must(t, src.Start(ctx))
	defer src.Close(context.Background())
	next := map[string]int{}
	for seen := 0; seen < n*len(groups); seen++ {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("after %d: %v", seen, err)
		}
		g := m.Meta.MessageGroup
		if want := fmt.Sprintf("%s-%d", g, next[g]); m.Value != want {
			t.Fatalf("group %s: got %s, want %s (stored out of order across queues)", g, m.Value, want)
		}
		next[g]++
		must(t, src.Acker().Ack(ctx, m.Handle))
	}
}

// TestSinkUnorderedSendsOneLiteTopicConcurrently: with Unordered, records of
// one lite topic are in flight together (each in a call of its own), so a
// hot lite topic is not held to one record per round trip; without it, never
// more than one at a time.
func TestSinkUnorderedSendsOneLiteTopicConcurrently(t *testing.T) {
	for _, unordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("unordered=%v", unordered), func(t *testing.T) {
			s := rmqfake.NewForTest(t)
			if err := s.CreateTopic("lt", rmqfake.TopicLite); err != nil {
				t.Fatal(err)
			}
			const want = 4 // calls of the one lite topic to hold at once
			var (
				mu             sync.Mutex
				inFlight, most int
				perCall        = true
				enough         = make(chan struct{})
				hold           = 2 * time.Second
			)
			if !unordered {
				hold = 100 * time.Millisecond // ordered: a second call never comes while one is held
			}
			s.Intercept("SendMessage", func(c rmqfake.Call) rmqfake.Verdict {
				n := len(c.Request.(*v2.SendMessageRequest).GetMessages())
				mu.Lock()
				perCall = perCall && n == 1
				inFlight++
				most = max(most, inFlight)
				if inFlight == want {
					close(enough)
				}
				mu.Unlock()
				select { // hold the call until want are in flight (or hold passed)
				case <-enough:
				case <-time.After(hold):
				}
				mu.Lock()
				inFlight--
				mu.Unlock()
				return rmqfake.Verdict{}
			})
			ctx := rmqtest.Context(t, 30*time.Second)
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
				Topic: "lt", LiteTopic: "hot", Concurrency: want, Unordered: unordered}) // want senders: 4 in flight even if each takes one record
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close(ctx)
			recs := make([]rmqflow.Record, want)
			for i := range recs {
				recs[i] = rmqflow.Record{Body: []byte(strconv.Itoa(i))}
			}
			for i, err := range func() []error { _, errs := sink.Send(ctx, recs...); return errs }() {
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !perCall {
				t.Error("a call carried several lite records: the broker would lose them (scenario k)")
			}
			if unordered && most < want {
				t.Errorf("Unordered: at most %d calls of one lite topic in flight, want %d", most, want)
			}
			if !unordered && most != 1 {
				t.Errorf("ordered: %d calls of one lite topic in flight at once, want 1", most)
			}
		})
	}
}
