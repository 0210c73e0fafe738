package rmqflow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestSinkPerRecordErrors: a record with an illegal lite topic fails on its
// own with ILLEGAL_LITE_TOPIC; the others are sent with their tag, keys and
// properties, and arrive.
func TestSinkPerRecordErrors(t *testing.T) {
	const topic, group = "rmqflow-lite-sink", "rmqflow-lite-sink-g"
	ctx := rmqtest.Context(t, time.Minute)
	run := rmqtest.Unique("sink")
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(t), Topic: topic, LiteTopic: run + "-default"})
	if err != nil {
		t.Fatal(err)
	}
	ids, errs := sink.Send(ctx,
		rmqflow.Record{Body: []byte("default"), Tag: "t1", Keys: []string{"k1"}, Properties: map[string]string{"p": "1"}},
		rmqflow.Record{LiteTopic: "bad topic!", Body: []byte("bad")},
		rmqflow.Record{LiteTopic: run + "-other", Body: []byte("other")},
	)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("good records failed: %v", errs)
	}
	if !errors.Is(errs[1], client.ErrIllegalLiteTopic) {
		t.Fatalf("bad lite topic: %v, want ILLEGAL_LITE_TOPIC", errs[1])
	}
	if ids[0] == "" || ids[2] == "" {
		t.Fatal("missing message ids")
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(ctx, rmqflow.Record{Body: []byte("late")}).Wait(ctx); !errors.Is(err, rmqflow.ErrSinkClosed) {
		t.Errorf("write after close: %v", err)
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
	got := map[string]*rmqflow.AckableMessage[string]{}
	for len(got) < 2 {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ofRun(run, m) {
			got[m.Value] = m
			// A real handle under a group that does not exist fails with a
			// typed error. (Whether the message stays unacked is not checked
			// here: the ack that follows would succeed either way.)
			wrong := m.Handle
			wrong.Group = "rmqflow-no-such-group"
			var se *client.StatusError
			if err := src.Acker().Ack(ctx, wrong); !errors.As(err, &se) {
				t.Errorf("ack under an unknown group: %v, want a StatusError", err)
			} else {
				t.Logf("ack under an unknown group: %v", err)
			}
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	d := got["default"]
	if d == nil || d.Meta.LiteTopic != run+"-default" || d.Meta.Tag != "t1" || len(d.Meta.Keys) != 1 || d.Meta.Keys[0] != "k1" || d.Meta.Properties["p"] != "1" {
		t.Fatalf("default record arrived as %+v", d)
	}
	if got["other"] == nil || got["other"].Meta.LiteTopic != run+"-other" {
		t.Fatalf("per-record lite topic lost: %+v", got["other"])
	}
	// Born and store times come from the producer's and the broker's clocks,
	// both this machine's here.
	if now := time.Now(); d.Meta.BornTime.IsZero() || d.Meta.StoreTime.Before(d.Meta.BornTime.Add(-time.Second)) || d.Meta.StoreTime.After(now) || now.Sub(d.Meta.StoreTime) > time.Minute {
		t.Errorf("born %v, stored %v, now %v: want born ≤ stored ≤ now, within a minute", d.Meta.BornTime, d.Meta.StoreTime, now)
	}
	if d.Meta.BornHost == "" {
		t.Error("no born host")
	}
}

// TestSimpleModeTagFilter: a SIMPLE-mode source reads a normal topic through
// a TAG filter, and the caller acks through the same API.
func TestSimpleModeTagFilter(t *testing.T) {
	const topic, group = "rmqflow-normal-simple", "rmqflow-normal-simple-g"
	ctx := rmqtest.Context(t, time.Minute)
	run := rmqtest.Unique("simple")
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(t), Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	_, errs := sink.Send(ctx,
		rmqflow.Record{Tag: "skip", Keys: []string{run}, Body: []byte("skip")},
		rmqflow.Record{Tag: "take", Keys: []string{run}, Body: []byte("take")},
	)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	_ = sink.Close(ctx)
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn(t), Mode: rmqflow.ModeSimple, Topic: topic, Group: group,
		Filter: client.TagFilter("take"), AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	for {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Fatal(err)
		}
		if m.Meta.Tag != "take" {
			t.Fatalf("filter let through tag %q", m.Meta.Tag)
		}
		if len(m.Meta.Keys) == 1 && m.Meta.Keys[0] == run {
			if m.Value != "take" || m.Handle.LiteTopic != "" || m.Handle.Topic != topic {
				t.Fatalf("got %+v", m)
			}
			return
		}
	}
}
