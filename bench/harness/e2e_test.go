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

// TestHarnessResume: a run cut short is continued with -resume DIR: the runs
// it recorded are kept as they are, the rest of the same plan (same seed,
// same topic names) runs, and the report says it was resumed. A second
// -resume of a finished run runs nothing again.
func TestHarnessResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the peers: not in -short")
	}
	out := t.TempDir()
	report := filepath.Join(out, "report.md")
	args := []string{"-emulator", "-quick", "-peers", "rmqflow/loop,raw/raw",
		"-window", "1s", "-window-messages", "2000", "-warmup", "200", "-out", out, "-report", report}
	var stdout, stderr bytes.Buffer
	if code := run1(args, &stdout, &stderr); code != 0 {
		t.Fatalf("harness exit %d\nstderr:\n%s", code, stderr.String())
	}
	path := filepath.Join(out, "results.jsonl")
	full := readLines(t, path)
	if len(full) != 4 {
		t.Fatalf("%d runs recorded, want 4 (2 peers × lite, normal)", len(full))
	}
	// Cut short after two runs, the second one's line half written.
	cut := full[0] + "\n" + full[1][:len(full[1])/2] + "\n"
	if err := os.WriteFile(path, []byte(cut), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run1([]string{"-resume", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("resume: exit %d\nstderr:\n%s", code, stderr.String())
	}
	after := readLines(t, path)
	if len(after) != 2+3 || after[0] != full[0] {
		t.Fatalf("after the resume results.jsonl has %d lines (first kept: %v), want the kept run, the cut line and 3 new runs", len(after), after[0] == full[0])
	}
	ids := map[string]bool{}
	for _, l := range full {
		ids[idOf(t, l)] = true
	}
	for _, l := range after[2:] {
		if !ids[idOf(t, l)] {
			t.Errorf("the resumed run used id %s, not one of the original plan's", idOf(t, l))
		}
	}
	rep, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rep), "resumed (`-resume`)") || !strings.Contains(string(rep), "1 of its 4 runs were recorded before") {
		t.Errorf("the report does not say the run was resumed with 1 run kept:\n%s", rep)
	}
	if !strings.Contains(string(rep), "-peers rmqflow/loop,raw/raw") {
		t.Errorf("the report's command is not the original one")
	}
	rf, err := readRunFile(out)
	if err != nil || len(rf.Commits) != 2 || len(rf.Resumed) != 1 || rf.Commits[0] == "" {
		t.Errorf("run.json after one resumption: %+v %v, want 2 commits and 1 resumption", rf, err)
	}
	if !strings.Contains(string(rep), "- Code: commit "+rf.Commits[1]) {
		t.Errorf("the report does not name the code's commit")
	}
	stderr.Reset()
	if code := run1([]string{"-resume", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("second resume: exit %d\nstderr:\n%s", code, stderr.String())
	}
	if n := len(readLines(t, path)); n != 5 {
		t.Errorf("a resume of a finished run recorded %d more runs, want none", n-5)
	}
	for _, bad := range [][]string{{"-resume"}, {"-resume", out, "-quick"}, {"-resume", t.TempDir()}} {
		if code := run1(bad, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", bad, code)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func idOf(t *testing.T, line string) string {
	t.Helper()
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return v.ID
}
