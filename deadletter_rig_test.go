package rmqflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// parkRig is the setup the tests of a Runner's dead-letter function share:
// rmqfake with the LITE main topic "main" and its wildcard group "g", a
// NORMAL topic "parked" with its group "parked-g", and a sink to each (in,
// for the test's messages; dlq, where they are parked), closed when the
// test ends.
type parkRig struct {
	fake    *rmqfake.Server
	conn    rmqflow.Connection
	in, dlq *rmqflow.Sink
}

// newParkRig makes a parkRig on fake, which has "main" and "g" already
// (fakeLite, or a group of another retry limit).
func newParkRig(t *testing.T, ctx context.Context, fake *rmqfake.Server) *parkRig {
	t.Helper()
	must(t, fake.CreateTopic("parked", rmqfake.TopicNormal))
	must(t, fake.CreateGroup("parked-g"))
	p := &parkRig{fake: fake, conn: rmqflow.Connection{Endpoints: fake.Addr()}}
	var err error
	for _, s := range []struct {
		sink  **rmqflow.Sink
		topic string
	}{{&p.in, "main"}, {&p.dlq, "parked"}} {
		*s.sink, err = rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: p.conn, Topic: s.topic})
		must(t, err)
		sink := *s.sink
		t.Cleanup(func() { _ = sink.Close(context.Background()) })
	}
	return p
}

// write stores a message of body and keys in lite topic "k" of "main".
func (p *parkRig) write(t *testing.T, ctx context.Context, body string, keys ...string) {
	t.Helper()
	if _, err := p.in.Write(ctx, rmqflow.Record{LiteTopic: "k", Keys: keys, Body: []byte(body)}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// source is a new lite source of "main" and "g", not started (a Runner
// starts and closes it).
func (p *parkRig) source(t *testing.T) *rmqflow.Source[string] {
	t.Helper()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: p.conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	return src
}

// failingRunner is a Runner over a new source whose handler fails every
// message with "cannot parse", calling each (when not nil) first, and whose
// dead-letter function parks the message in "parked" (DeadLetterToSink),
// calling parked (when not nil) after each park that took.
func (p *parkRig) failingRunner(t *testing.T, cfg rmqflow.RunnerConfig, each func(*rmqflow.AckableMessage[string]), parked func()) *rmqflow.Runner[string] {
	t.Helper()
	r, err := rmqflow.NewRunner(p.source(t), func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if each != nil {
			each(m)
		}
		return rmqflow.Decision{}, errors.New("cannot parse")
	}, cfg)
	must(t, err)
	park := rmqflow.DeadLetterToSink[string](p.dlq)
	r.SetDeadLetter(func(ctx context.Context, m *rmqflow.AckableMessage[string], cause error) error {
		err := park(ctx, m, cause)
		if err == nil && parked != nil {
			parked()
		}
		return err
	})
	return r
}

// readParked reads the first copy in "parked" and acks it.
func (p *parkRig) readParked(t *testing.T, ctx context.Context) *rmqflow.AckableMessage[string] {
	t.Helper()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: p.conn, Mode: rmqflow.ModeSimple, Topic: "parked", Group: "parked-g",
		AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	must(t, err)
	defer src.Close(context.Background())
	must(t, src.Start(ctx))
	m, err := src.Next(ctx)
	must(t, err)
	must(t, src.Acker().Ack(ctx, m.Handle))
	return m
}
