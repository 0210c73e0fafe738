package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHarnessOnEmulator runs the harness end to end on an in-process rmqfake
// with the Go peers it builds: it pins the contract between the harness and
// the peers (flags in, one JSON line out), the fresh topic per run, and the
// report. Every run must ack its messages, see no foreign message, and carry
// a window.
func TestHarnessOnEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the peers: not in -short")
	}
	out := t.TempDir()
	report := filepath.Join(out, "report.md")
	var stdout, stderr bytes.Buffer
	code := run1([]string{"-emulator", "-quick", "-peers", "rmqflow/loop,rmqflow/runner,raw/raw",
		"-window", "1s", "-window-messages", "3000", "-warmup", "300", "-out", out, "-report", report}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("harness exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	f, err := os.Open(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	topics := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Peer   string `json:"peer"`
			Mode   string `json:"mode"`
			ID     string `json:"id"`
			Result result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		r := line.Result
		seen[line.Peer+" "+line.Mode] = true
		topics[line.ID] = true
		if r.Error != "" || r.Messages <= 0 || r.Seconds <= 0 || r.Foreign != 0 || r.WindowStartNs <= 0 || r.WindowEndNs <= r.WindowStartNs {
			t.Errorf("%s %s: bad result %+v", line.Peer, line.Mode, r)
		}
	}
	if len(seen) != 6 {
		t.Errorf("runs %v, want rmqflow/loop, rmqflow/runner and raw/raw in lite and normal", seen)
	}
	if len(topics) != 6 {
		t.Errorf("%d distinct topics for 6 emulator runs, want one each", len(topics))
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Targets", "## (a) Drain a backlog: lite", "`rmqflow/runner`", "Runner ≥ 0.8× Source + AckAsync"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
