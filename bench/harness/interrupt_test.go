package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
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
