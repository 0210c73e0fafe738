package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMeasuredChanges: a resumed run whose parts ran on commits that
// differ only in documentation, notes, tests or the integrations is not
// reported as having measured different code; any other change, a dirty or
// an unknown checkout is.
func TestMeasuredChanges(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		t.Helper()
		git("add", "-A")
		git("commit", "-q", "-m", msg)
		return git("rev-parse", "HEAD")
	}
	git("init", "-q")
	write("runner.go", "package a\n")
	write("docs/a.md", "a\n")
	write("rmqfake/f.go", "package rmqfake\n")
	write("client/c.go", "package client\n")
	c0 := commit("code")
	write("docs/a.md", "b\n")
	write("README.md", "r\n")
	write("notes/n.txt", "n\n")
	write("runner_test.go", "package a\n")
	write("client/c_test.go", "package client\n")
	write("integrations/benthos/x.go", "package b\n")
	write("conformance/s.go", "package conformance\n")
	c1 := commit("docs, notes, tests, integrations, conformance")
	write("rmqfake/f.go", "package rmqfake // changed\n")
	c1b := commit("the emulator")
	write("runner.go", "package a // changed\n")
	c2 := commit("code again")
	write("client/c.go", "package client // changed\n")
	c3 := commit("client")

	for _, c := range []struct {
		commits  []string
		emulator bool
		want     bool
	}{
		{[]string{c0, c0}, false, false},
		{[]string{c0, c1}, false, false},
		{[]string{c0, c1}, true, false},
		{[]string{c1, c1b}, false, false}, // the emulator, on a real-broker run
		{[]string{c1, c1b}, true, true},
		{[]string{c1b, c2}, false, true},
		{[]string{c2, c3}, false, true},
		{[]string{c0, c1, c1b, c2}, false, true},
		{[]string{c0, c0 + "+dirty"}, false, true},
		{[]string{c0, "unknown"}, false, true},
		{[]string{c0, "0000000000000000000000000000000000000000"}, false, true}, // git cannot answer
	} {
		if got := measuredChanges(repo, c.commits, c.emulator); (len(got) > 0) != c.want {
			t.Errorf("measuredChanges(%v, emulator=%v) = %v, want changes: %v", c.commits, c.emulator, got, c.want)
		}
	}
}
