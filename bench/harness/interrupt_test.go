package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestInterruptedRunNotRecorded: a run the harness's own interruption ended
// (its context cancelled: a signal) is not written to results.jsonl, so that
// -resume runs its step again rather than keep the failure the interruption
// made (a killed 2026-12-01 run left a whole step of "context canceled"
// records that resume would have kept); a run that fails on its own is.
func TestInterruptedRunNotRecorded(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := &bench{cfg: config{out: dir}, log: io.Discard, results: f, tgt: &target{endpoint: "127.0.0.1:1"},
		bins: map[string][]string{"rmqflow": {filepath.Join(dir, "no-such-peer")}}}
	newRun := func() *run {
		return &run{Scenario: "drain", Peer: peer{Program: "rmqflow", Variant: "loop"}, Mode: "lite", ID: "r1"}
	}
	size := func() int64 {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.runOne(ctx, newRun(), 1, 2, nil)
	if n := size(); n != 0 {
		t.Fatalf("an interrupted run wrote %d bytes to results.jsonl", n)
	}
	b.runOne(context.Background(), newRun(), 2, 2, nil)
	if size() == 0 {
		t.Fatal("a run that failed on its own (no peer binary) was not recorded")
	}
}

// TestBacklogRefusedFailsOnlyItsStep: when the target refuses a drain step's
// backlog (here rmqfake's lite topic quota; on 2026-12-02 the real broker's
// "create mapped file failed" at 100,000 lite topics ended the whole run),
// the step's runs are recorded as failed with the reason and drainStep lets
// the next step go on; with no answer from the broker the run ends instead.
func TestBacklogRefusedFailsOnlyItsStep(t *testing.T) {
	fake, err := rmqfake.New(rmqfake.Addr("127.0.0.1:0"), rmqfake.MaxLiteTopics(10))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Stop()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := &bench{cfg: config{out: dir, size: 16}, log: io.Discard, results: f, tgt: &target{endpoint: fake.Addr(), fake: fake}}
	const topic = "refused"
	s := &step{backlog: &backlog{Topic: topic, Mode: "lite", RunID: "r1", Messages: 100, LiteTopics: 50}}
	for _, v := range []string{"loop", "runner"} {
		s.runs = append(s.runs, &run{Scenario: scTopics, Peer: peer{Program: "rmqflow", Variant: v}, Mode: "lite", ID: "r1", Topic: topic, Group: "g-" + v})
	}
	if err := b.tgt.create([]fixture{{Topic: topic, Lite: true, Groups: []string{"g-loop", "g-runner"}}}, dir); err != nil {
		t.Fatal(err)
	}
	done := 0
	if err := b.drainStep(context.Background(), s, &done, 2); err != nil {
		t.Fatalf("drainStep = %v, want nil (the step's runs fail, the run goes on)", err)
	}
	if done != 2 || len(b.runs) != 2 {
		t.Fatalf("done %d, %d runs kept; want 2 and 2", done, len(b.runs))
	}
	lines := readLines(t, filepath.Join(dir, "results.jsonl"))
	if len(lines) != 2 {
		t.Fatalf("%d lines in results.jsonl, want 2", len(lines))
	}
	for _, r := range b.runs {
		if !strings.Contains(r.Result.Error, "the backlog was not produced") {
			t.Errorf("%s: error %q, want the backlog's refusal", r.Peer.Name(), r.Result.Error)
		}
	}

	// No answer at all (nothing listens): the run ends, nothing recorded,
	// so that -resume repeats the step once the broker is back.
	b2 := &bench{cfg: config{out: dir, size: 16}, log: io.Discard, results: f, tgt: &target{endpoint: "127.0.0.1:1"}}
	s2 := &step{backlog: &backlog{Topic: topic, Mode: "lite", RunID: "r2", Messages: 10, LiteTopics: 1},
		runs: []*run{{Scenario: scTopics, Peer: peer{Program: "rmqflow", Variant: "loop"}, Mode: "lite", ID: "r2", Topic: topic, Group: "g-loop"}}}
	done = 0
	if err := b2.drainStep(context.Background(), s2, &done, 1); err == nil {
		t.Fatal("drainStep with no broker = nil, want its error")
	}
	if n := len(readLines(t, filepath.Join(dir, "results.jsonl"))); n != 2 || len(b2.runs) != 0 {
		t.Fatalf("with no broker: %d lines in results.jsonl, %d runs kept; want 2 (the earlier ones) and 0", n, len(b2.runs))
	}
}
