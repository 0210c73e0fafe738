package rmqio

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/rmqflow/rmqflow"
)

// TestCoderRoundTrip: the registered coder keeps every field, the handle
// included, encodes equal messages equally, and refuses every truncation.
func TestCoderRoundTrip(t *testing.T) {
	m := AckableMessage{Payload: []byte("p"), Topic: "agents", LiteTopic: "s1", MessageID: "id", Tag: "t",
		Keys: []string{"k1", "k2"}, Properties: map[string]string{"a": "1", "b": "2"}, MessageGroup: "g",
		BornTime: time.Unix(1, 5).UTC(), StoreTime: time.Unix(2, 7).UTC(), DeliveryAttempt: 3, DeadLettered: true, Handle: []byte{1, 2, 3}}
	b := encodeMessage(m)
	got, err := decodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v, want %+v", got, m)
	}
	if !bytes.Equal(encodeMessage(got), b) {
		t.Fatal("encoding is not deterministic")
	}
	for i := 0; i < len(b); i++ {
		if _, err := decodeMessage(b[:i]); err == nil {
			t.Fatalf("decoding %d of %d bytes succeeded", i, len(b))
		}
	}
	if _, err := decodeMessage(append(b, 0)); err == nil {
		t.Fatal("decoding with a trailing byte succeeded")
	}
}

// FuzzDecodeMessage: no input panics the decoder, and what it decodes
// encodes back to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(encodeMessage(AckableMessage{Payload: []byte("x"), Keys: []string{"k"}, Properties: map[string]string{"a": "b"},
		StoreTime: time.Unix(5, 0), Handle: []byte{9}}))
	f.Add([]byte{codecVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		again, err := decodeMessage(encodeMessage(m))
		if err != nil {
			t.Fatalf("re-encoding a decoded message fails: %v", err)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip changed %+v into %+v", m, again)
		}
	})
}

// TestConfigErrors: a bad configuration fails the pipeline's construction
// with an error naming the field, before any job runs.
func TestConfigErrors(t *testing.T) {
	conn := Connection{Endpoints: "127.0.0.1:1"}
	for name, tc := range map[string]struct {
		build func(s beam.Scope)
		want  string
	}{
		"no endpoints": {func(s beam.Scope) { Read(s, ReadConfig{MainTopic: "t", Group: "g"}) }, "Endpoints"},
		"no group":     {func(s beam.Scope) { Read(s, ReadConfig{Connection: conn, MainTopic: "t"}) }, "Group"},
		"half credentials": {func(s beam.Scope) {
			Read(s, ReadConfig{Connection: Connection{Endpoints: "127.0.0.1:1", AccessKeyEnv: "AK"}, MainTopic: "t", Group: "g"})
		}, "SecretKeyEnv"},
		"negative shards": {func(s beam.Scope) { Read(s, ReadConfig{Connection: conn, MainTopic: "t", Group: "g", Shards: -1}) }, "Shards"},
		"short invisible": {func(s beam.Scope) {
			Read(s, ReadConfig{Connection: conn, MainTopic: "t", Group: "g", InvisibleDuration: time.Second})
		}, "InvisibleDuration"},
		"two filters": {func(s beam.Scope) {
			Read(s, ReadConfig{Connection: conn, Simple: true, Topic: "t", Group: "g", FilterTag: "a", FilterSQL: "b"})
		}, "FilterTag"},
		"negative ack": {func(s beam.Scope) {
			Ack(s, AckConfig{Connection: conn, MaxBatch: -1}, beam.Create(s, AckableMessage{}))
		}, "MaxBatch"},
		"write no topic": {func(s beam.Scope) { Write(s, WriteConfig{Connection: conn}, beam.Create(s, Record{})) }, "Topic"},
		"write bad sink": {func(s beam.Scope) {
			Write(s, WriteConfig{Connection: conn, Topic: "t", BatchSize: -1}, beam.Create(s, Record{}))
		}, "BatchSize"},
		"throttle slack": {func(s beam.Scope) {
			Throttle(s, ThrottleConfig{AckConfig: AckConfig{Connection: conn}, Slack: -1}, beam.Create(s, AckableMessage{}))
		}, "Slack"},
		"throttle attempts": {func(s beam.Scope) {
			Throttle(s, ThrottleConfig{AckConfig: AckConfig{Connection: conn}, MaxDefers: -1}, beam.Create(s, AckableMessage{}))
		}, "MaxDefers"},
		"retry backoff": {func(s beam.Scope) {
			Retry(s, RetryConfig{AckConfig: AckConfig{Connection: conn}, Backoff: -1}, beam.Create(s, AckableMessage{}))
		}, "Backoff"},
		"retry backoff max": {func(s beam.Scope) {
			Retry(s, RetryConfig{AckConfig: AckConfig{Connection: conn}, BackoffMax: 13 * time.Hour}, beam.Create(s, AckableMessage{}))
		}, "BackoffMax"},
		"retry on valve": {func(s beam.Scope) {
			Retry(s, RetryConfig{AckConfig: AckConfig{Connection: conn}, OnValve: 7}, beam.Create(s, AckableMessage{}))
		}, "OnValve"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				err, _ := r.(error)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("construction panicked with %v, want an error naming %s", r, tc.want)
				}
			}()
			_, s := beam.NewPipelineWithRoot()
			tc.build(s)
		})
	}
}

// TestCredentialsFromWorkerEnvironment: the pipeline holds the names of the
// credentials' environment variables, never their values; a worker without
// them fails with an error naming the variables, not the values.
func TestCredentialsFromWorkerEnvironment(t *testing.T) {
	c := Connection{Endpoints: "127.0.0.1:1", AccessKeyEnv: "RMQIO_TEST_AK", SecretKeyEnv: "RMQIO_TEST_SK"}
	if _, err := c.rmqflow(); err == nil || !strings.Contains(err.Error(), "RMQIO_TEST_AK") {
		t.Fatalf("without the variables: %v", err)
	}
	t.Setenv("RMQIO_TEST_AK", "ak-value")
	t.Setenv("RMQIO_TEST_SK", "sk-value")
	got, err := c.rmqflow()
	if err != nil {
		t.Fatal(err)
	}
	if got.Credentials.AccessKey != "ak-value" || got.Credentials.AccessSecret != "sk-value" {
		t.Fatalf("credentials %q/%q", got.Credentials.AccessKey, got.Credentials.AccessSecret)
	}
	fn := &readFn{Cfg: ReadConfig{Connection: c, MainTopic: "t", Group: "g"}}
	if s := fmt.Sprintf("%+v", fn); strings.Contains(s, "sk-value") || strings.Contains(s, "ak-value") {
		t.Fatalf("the DoFn carries a credential: %s", s)
	}
}

// TestReadProcessAck: a backlog over several lite topics is read once
// through Prism, every message reaches the work and is acked, and no ack
// fails; on rmqfake the broker counted every message acked once.
func TestReadProcessAck(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		closeReaders(t)
		const n, lites = 300, 10
		label := "readack-" + tg.name
		resetSeen(label)
		want := produce(t, tg.endpoint, "rmqflow-beam-a", label, n, lites)
		p, s := beam.NewPipelineWithRoot()
		msgs := Read(s, ReadConfig{Connection: tg.conn(), MainTopic: "rmqflow-beam-a", Group: "rmqflow-beam-a-g",
			AwaitDuration: 5 * time.Second, MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: tg.idle})
		worked := beam.ParDo(s, &recordFn{Label: label}, msgs)
		passert.Empty(s, Ack(s, AckConfig{Connection: tg.conn()}, worked))
		if err := ptest.Run(p); err != nil {
			t.Fatal(err)
		}
		got := seenBodies(label)
		if m := missing(want, got); len(m) > 0 {
			t.Fatalf("%d of %d messages never reached the work: %v", len(m), n, m[:min(5, len(m))])
		}
		t.Logf("%s: %d messages read, %d duplicates", tg.name, n, duplicates(got))
		if tg.fake != nil {
			if st := tg.fake.Stats().Topics["rmqflow-beam-a"]; st.Acked != n {
				t.Fatalf("rmqfake counted %d acks of %d messages", st.Acked, n)
			}
		}
	})
}

// TestReadNeverAcks: Read on its own acks nothing: the messages it read are
// still the group's, and come back once their invisibility ends.
func TestReadNeverAcks(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t) // before the server stops (cleanups run last first)
	const n = 20
	produce(t, s.Addr(), "rmqflow-beam-a", "noack", n, 4)
	p, sc := beam.NewPipelineWithRoot()
	msgs := Read(sc, ReadConfig{Connection: Connection{Endpoints: s.Addr()}, MainTopic: "rmqflow-beam-a", Group: "rmqflow-beam-a-g",
		MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: 2 * time.Second})
	passert.Count(sc, msgs, "messages read", n)
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
	st := s.Stats().Topics["rmqflow-beam-a"]
	if st.Acked != 0 || st.InFlight+st.Backlog != n {
		t.Fatalf("after Read alone: %d acked, %d in flight, %d in the backlog; want 0 acked and all %d still the group's",
			st.Acked, st.InFlight, st.Backlog, n)
	}
}

// TestCrashMidStreamLosesNothing: a job whose worker dies mid-stream (its
// bundles fail after 100 messages) and is then run again loses nothing: the
// messages the first job did not ack come back to the second, which acks
// them; duplicates are counted, not hidden.
func TestCrashMidStreamLosesNothing(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		closeReaders(t)
		const n, lites = 300, 6
		label := "crash-" + tg.name
		resetSeen(label)
		want := produce(t, tg.endpoint, "rmqflow-beam-b", label, n, lites)
		cfg := ReadConfig{Connection: tg.conn(), MainTopic: "rmqflow-beam-b", Group: "rmqflow-beam-b-g",
			AwaitDuration: 5 * time.Second, InvisibleDuration: rmqflow.MinInvisibleDuration,
			MaxBundleMessages: 20, MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: tg.idle}

		p1, s1 := beam.NewPipelineWithRoot()
		survived := beam.ParDo(s1, &crashFn{Label: label, After: 100}, Read(s1, cfg))
		Ack(s1, AckConfig{Connection: tg.conn()}, beam.ParDo(s1, &recordFn{Label: label}, survived))
		if err := ptest.Run(p1); err == nil {
			t.Fatal("the job whose worker died succeeded")
		}
		first := len(seenBodies(label))
		// The worker's process ends: its readers close.
		if err := closeSources(t.Context()); err != nil {
			t.Fatal(err)
		}

		// The rerun waits out the invisibility of what the first job read.
		cfg.StopAfterIdle = rmqflow.MinInvisibleDuration + tg.idle
		p2, s2 := beam.NewPipelineWithRoot()
		worked := beam.ParDo(s2, &recordFn{Label: label}, Read(s2, cfg))
		passert.Empty(s2, Ack(s2, AckConfig{Connection: tg.conn()}, worked))
		if err := ptest.Run(p2); err != nil {
			t.Fatal(err)
		}
		got := seenBodies(label)
		if m := missing(want, got); len(m) > 0 {
			t.Fatalf("%d of %d messages lost: %v", len(m), n, m[:min(5, len(m))])
		}
		t.Logf("%s: the first job worked %d messages before dying, the rerun the rest; %d duplicates", tg.name, first, duplicates(got))
		if first == 0 || first >= n {
			t.Fatalf("the first job worked %d of %d messages: the crash did not happen mid-stream", first, n)
		}
		if tg.fake != nil {
			if st := tg.fake.Stats().Topics["rmqflow-beam-b"]; st.Acked != n {
				t.Fatalf("rmqfake counted %d acks of %d messages", st.Acked, n)
			}
		}
	})
}

// TestReadCheckpointsUnderContinuousStream: under a stream that never
// pauses, Read still ends its bundles (it checkpoints itself), so messages
// are acked while the stream goes on: Ack acks only what a committed bundle
// made, so an ack before the stream ends shows a bundle of Read ended. The
// stream runs until rmqfake has counted 50 acks (or fails after 60 s).
func TestReadCheckpointsUnderContinuousStream(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t)
	label := "stream"
	resetSeen(label)
	sink, err := rmqflow.NewSink(t.Context(), rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()},
		Topic: "rmqflow-beam-c", Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(t.Context())
	type result struct {
		bodies        map[string]bool
		ackedAtTheEnd int64
		err           error
	}
	produced := make(chan result, 1)
	go func() {
		// A message every 2 ms, each stored before the next: one long
		// stream, until acks show up while it runs.
		r := result{bodies: map[string]bool{}}
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; ; i++ {
			if acked := s.Stats().Topics["rmqflow-beam-c"].Acked; acked >= 50 || time.Now().After(deadline) {
				r.ackedAtTheEnd = acked
				produced <- r
				return
			}
			time.Sleep(2 * time.Millisecond)
			body := fmt.Sprintf("stream-%d", i)
			if _, r.err = sink.Write(t.Context(), rmqflow.Record{LiteTopic: fmt.Sprintf("stream-l%d", i%5), Body: []byte(body)}).Wait(t.Context()); r.err != nil {
				produced <- r
				return
			}
			r.bodies[body] = true
		}
	}()
	p, sc := beam.NewPipelineWithRoot()
	msgs := Read(sc, ReadConfig{Connection: Connection{Endpoints: s.Addr()}, MainTopic: "rmqflow-beam-c", Group: "rmqflow-beam-c-g",
		MaxBundleTime: 100 * time.Millisecond, StopAfterIdle: 3 * time.Second})
	worked := beam.ParDo(sc, &recordFn{Label: label}, msgs)
	passert.Empty(sc, Ack(sc, AckConfig{Connection: Connection{Endpoints: s.Addr()}}, worked))
	res, err := ptest.RunWithMetrics(p)
	if err != nil {
		t.Fatal(err)
	}
	r := <-produced // the job ends only after the stream stopped
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ackedAtTheEnd < 50 {
		t.Fatalf("only %d messages were acked during a 60 s stream: Read's bundles did not end", r.ackedAtTheEnd)
	}
	if m := missing(r.bodies, seenBodies(label)); len(m) > 0 {
		t.Fatalf("%d of %d messages never reached the work", len(m), len(r.bodies))
	}
	checkpoints := counter(res, "read_checkpoints")
	t.Logf("%d messages, %d acked while the stream ran; Read checkpointed %d times", len(r.bodies), r.ackedAtTheEnd, checkpoints)
	if checkpoints < 2 {
		t.Fatalf("Read checkpointed %d times", checkpoints)
	}
	if got := s.Stats().Topics["rmqflow-beam-c"].Acked; got != int64(len(r.bodies)) {
		t.Fatalf("acked %d of %d", got, len(r.bodies))
	}
}

// counter is the committed (else attempted) value of rmqio's counter name.
func counter(res beam.PipelineResult, name string) int64 {
	var sum int64
	for _, c := range res.Metrics().AllMetrics().Counters() {
		if c.Namespace() == "rmqio" && c.Name() == name {
			sum += c.Result()
		}
	}
	return sum
}

// TestThrottleDefersTheHotLiteTopic: with one hot lite topic and several
// quiet ones, Throttle defers hot messages on the broker (its
// messages_deferred counter); they come back, and in the end every message
// was worked and acked.
func TestThrottleDefersTheHotLiteTopic(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t)
	label := "throttle"
	resetSeen(label)
	want := produce(t, s.Addr(), "rmqflow-beam-d", "hot", 200, 1)
	for b := range produce(t, s.Addr(), "rmqflow-beam-d", "cold", 40, 4) {
		want[b] = true
	}
	conn := Connection{Endpoints: s.Addr()}
	p, sc := beam.NewPipelineWithRoot()
	msgs := Read(sc, ReadConfig{Connection: conn, MainTopic: "rmqflow-beam-d", Group: "rmqflow-beam-d-g",
		MaxBundleMessages: 20, MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: 3 * time.Second})
	admitted := Throttle(sc, ThrottleConfig{AckConfig: AckConfig{Connection: conn}, MinCount: 5, Defer: time.Second}, msgs)
	passert.Empty(sc, Ack(sc, AckConfig{Connection: conn}, beam.ParDo(sc, &recordFn{Label: label}, admitted)))
	res, err := ptest.RunWithMetrics(p)
	if err != nil {
		t.Fatal(err)
	}
	if m := missing(want, seenBodies(label)); len(m) > 0 {
		t.Fatalf("%d of %d messages never worked: %v", len(m), len(want), m[:min(5, len(m))])
	}
	deferred := counter(res, "messages_deferred")
	t.Logf("deferred %d times", deferred)
	if deferred == 0 {
		t.Fatal("the hot lite topic was never deferred")
	}
	if st := s.Stats().Topics["rmqflow-beam-d"]; st.Acked != int64(len(want)) {
		t.Fatalf("acked %d of %d", st.Acked, len(want))
	}
}

// TestAckFailuresAreACollection: the messages Ack cannot ack come out of it
// as AckFailure elements, each naming its message: a handle that does not
// decode, one for another endpoint (never sent: the pool acks only at its
// own), one the broker refuses, and a copy from the dead-letter topic the
// broker refuses, marked DeadLettered.
func TestAckFailuresAreACollection(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		closeReaders(t)
		handle := func(h rmqflow.ReceiptHandle) []byte {
			b, err := h.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		bogus := rmqflow.ReceiptHandle{Endpoints: tg.endpoint, Group: "rmqflow-beam-d-g", Topic: "rmqflow-beam-d",
			LiteTopic: "l", MessageID: "01BOGUS", Handle: "not-a-handle", DeliveryAttempt: 1}
		elsewhere := bogus
		elsewhere.Endpoints, elsewhere.MessageID = "127.0.0.1:1", "01ELSEWHERE"
		copied := bogus
		copied.Topic, copied.MessageID = "%DLQ%rmqflow-beam-d-g", "01DLQCOPY"
		in := []AckableMessage{
			{MessageID: "01UNDECODABLE", Handle: []byte{0xff, 0x00}},
			{MessageID: "01ELSEWHERE", Handle: handle(elsewhere)},
			{MessageID: "01BOGUS", Handle: handle(bogus)},
			{MessageID: "01DLQCOPY", Topic: copied.Topic, DeadLettered: true, Handle: handle(copied)},
		}
		p, s := beam.NewPipelineWithRoot()
		failures := Ack(s, AckConfig{Connection: tg.conn()}, beam.CreateList(s, in))
		ids := beam.ParDo(s, failureID, failures)
		passert.Equals(s, ids, "01UNDECODABLE", "01ELSEWHERE", "01BOGUS", "01DLQCOPY dead-lettered")
		if err := ptest.Run(p); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWriteAcksAfterStored: Write stores each record in its lite topic and
// only then acks the handles the record carries; the records can be read
// back, and the messages they were made from are acked.
func TestWriteAcksAfterStored(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t) // before the server stops (cleanups run last first)
	const n = 30
	produce(t, s.Addr(), "rmqflow-beam-d", "src", n, 3)
	p, sc := beam.NewPipelineWithRoot()
	msgs := Read(sc, ReadConfig{Connection: Connection{Endpoints: s.Addr()}, MainTopic: "rmqflow-beam-d", Group: "rmqflow-beam-d-g",
		MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: 2 * time.Second})
	recs := beam.ParDo(sc, answerOf, msgs)
	passert.Empty(sc, Write(sc, WriteConfig{Connection: Connection{Endpoints: s.Addr()}, Topic: "rmqflow-beam-out"}, recs))
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if got := st.Topics["rmqflow-beam-out"].Sent; got != n {
		t.Fatalf("stored %d of %d records", got, n)
	}
	if got := st.Topics["rmqflow-beam-d"].Acked; got != n {
		t.Fatalf("acked %d of the %d messages the records were made from", got, n)
	}
	for lite, ls := range st.Topics["rmqflow-beam-out"].LiteTopics {
		if !strings.HasPrefix(lite, "answer-src-l") || ls.Stored != n/3 {
			t.Errorf("lite topic %s holds %d records", lite, ls.Stored)
		}
	}
}

// TestWriteRefusedRecordIsReported: a record refused for good (a property
// name the broker reserves) comes out of Write as an AckFailure for each
// message it was made from, and those messages are not acked.
func TestWriteRefusedRecordIsReported(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t)
	const n = 5
	produce(t, s.Addr(), "rmqflow-beam-d", "wf", n, 1)
	p, sc := beam.NewPipelineWithRoot()
	msgs := Read(sc, ReadConfig{Connection: Connection{Endpoints: s.Addr()}, MainTopic: "rmqflow-beam-d", Group: "rmqflow-beam-d-g",
		MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: 2 * time.Second})
	failures := Write(sc, WriteConfig{Connection: Connection{Endpoints: s.Addr()}, Topic: "rmqflow-beam-out", MaxAttempts: 1},
		beam.ParDo(sc, refusedRecordOf, msgs))
	passert.Count(sc, beam.ParDo(sc, refusedID, failures), "refused", n)
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Topics["rmqflow-beam-d"].Acked != 0 || st.Topics["rmqflow-beam-out"].Sent != 0 {
		t.Fatalf("acked %d messages and stored %d records although every record was refused",
			st.Topics["rmqflow-beam-d"].Acked, st.Topics["rmqflow-beam-out"].Sent)
	}
}

// TestStopAfterIdleCountsFromTheReadsStart: a read that finds its worker's
// source kept from an earlier job (IdleClose), whose last message was long
// ago, does not end at its first empty bundle: StopAfterIdle counts from the
// read's own start too. A later bundle of the read still ends it once idle.
func TestStopAfterIdleCountsFromTheReadsStart(t *testing.T) {
	s := rmqfakeServer(t)
	closeReaders(t)
	cfg := ReadConfig{Connection: Connection{Endpoints: s.Addr()}, MainTopic: "rmqflow-beam-a", Group: "rmqflow-beam-a-g",
		MaxBundleTime: 100 * time.Millisecond, StopAfterIdle: 30 * time.Second}.withDefaults()
	idleFor := func(d time.Duration) {
		t.Helper()
		src, err := acquireSource(t.Context(), cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		src.lastMessage = time.Now().Add(-d)
		src.done()
	}
	fn := &readFn{Cfg: cfg}
	rest := fn.SplitRestriction(nil, fn.CreateInitialRestriction(nil))[0]
	bundle := func(r readRestriction) bool {
		t.Helper()
		cont, err := fn.ProcessElement(t.Context(), &lagEstimator{}, fn.CreateTracker(r), nil,
			func(beam.EventTime, AckableMessage) { t.Error("a message from an empty topic") })
		if err != nil {
			t.Fatal(err)
		}
		return cont.ShouldResume()
	}
	idleFor(time.Hour) // an earlier job's source
	if !bundle(rest) {
		t.Fatal("a new read ended at its first empty bundle: StopAfterIdle counted from an earlier job's last message")
	}
	idleFor(time.Hour)
	rest.Epoch++ // a later bundle of the same read
	if bundle(rest) {
		t.Fatal("a read idle for longer than StopAfterIdle did not end")
	}
}
