package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

func fakeForCLI(t *testing.T) *rmqfake.Server {
	t.Helper()
	t.Setenv("RMQFLOW_ENDPOINT", "") // the commands must not fall back to a real broker
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	if err := s.CreateTopic("chat", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("chat-g", rmqfake.LiteBind("chat"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTopic("orders", rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("billing"); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestProduceConsumeRoundTrip: produce from flags and stdin, consume as JSON
// lines, with ack after print; a second consume finds nothing left.
func TestProduceConsumeRoundTrip(t *testing.T) {
	s := fakeForCLI(t)
	ep := s.Addr()
	var out, errOut bytes.Buffer
	if code := run([]string{"produce", "-endpoint", ep, "-topic", "chat", "-lite", "alice", "-message", "hi", "-message", "again", "-json"}, &out, &errOut); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, errOut.String())
	}
	if n := strings.Count(out.String(), `"id":"`); n != 2 {
		t.Fatalf("produce printed %d ids: %s", n, out.String())
	}
	ctx := context.Background()
	f := produceFlags{conn: connFlags{endpoint: ep, timeout: 3 * time.Second}, topic: "chat", litePerLine: true, concurrency: 2, props: kvList{}}
	out.Reset()
	if code := produce(ctx, f, strings.NewReader("bob\tone\ncarol\ttwo\n"), &out, &errOut); code != 0 {
		t.Fatalf("produce from stdin: exit %d: %s", code, errOut.String())
	}

	out.Reset()
	if code := run([]string{"consume", "-endpoint", ep, "-topic", "chat", "-group", "chat-g", "-max", "4", "-json"}, &out, &errOut); code != 0 {
		t.Fatalf("consume: exit %d: %s", code, errOut.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m struct {
			Lite   string          `json:"lite_topic"`
			Body   string          `json:"body"`
			Handle json.RawMessage `json:"handle"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got[m.Body] = m.Lite
		if !bytes.Contains(m.Handle, []byte(`"v":1`)) {
			t.Errorf("handle not in its JSON form: %s", m.Handle)
		}
	}
	want := map[string]string{"hi": "alice", "again": "alice", "one": "bob", "two": "carol"}
	for body, lite := range want {
		if got[body] != lite {
			t.Errorf("body %q: lite topic %q, want %q (got %v)", body, got[body], lite, got)
		}
	}
	out.Reset()
	if code := run([]string{"consume", "-endpoint", ep, "-topic", "chat", "-group", "chat-g", "-idle", "1s"}, &out, &errOut); code != 0 || out.Len() != 0 {
		t.Fatalf("second consume: exit %d, printed %q", code, out.String())
	}
}

// TestCLIErrorsAndExitCodes: usage errors, an unreachable endpoint and an
// unknown group get the documented exit codes and say what is wrong.
func TestCLIErrorsAndExitCodes(t *testing.T) {
	s := fakeForCLI(t)
	cases := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"produce", "-topic", "chat"}, exitUsage, "-endpoint"},
		{[]string{"consume", "-endpoint", s.Addr(), "-topic", "chat", "-group", "chat-g", "-ack", "sometimes"}, exitUsage, "-ack"},
		{[]string{"consume", "-endpoint", "nohost", "-topic", "chat", "-group", "chat-g"}, exitUsage, "Endpoints"},
		{[]string{"produce", "-endpoint", "127.0.0.1:1", "-timeout", "500ms", "-topic", "chat", "-message", "x"}, exitUnreachable, "broker up"},
		{[]string{"consume", "-endpoint", s.Addr(), "-topic", "chat", "-group", "no-such-group"}, exitNotFound, "no-such-group"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut.String(), c.code, c.says)
		}
	}
}

// TestHelpIsTrueToTheCode: every command's help lists each of its flags and
// examples, and each example parses.
func TestHelpIsTrueToTheCode(t *testing.T) {
	for _, cmd := range []struct {
		name     string
		examples []example
	}{{"produce", produceExamples}, {"consume", consumeExamples}, {"demo", demoExamples}} {
		var out bytes.Buffer
		if code := run([]string{"help", cmd.name}, &out, io.Discard); code != 0 {
			t.Fatalf("help %s: exit %d", cmd.name, code)
		}
		for _, e := range cmd.examples {
			if !strings.Contains(out.String(), e.what) {
				t.Errorf("help %s misses example %q", cmd.name, e.what)
			}
		}
		for _, want := range []string{"-endpoint", "-json", "Exit codes"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("help %s misses %q", cmd.name, want)
			}
		}
		for _, e := range cmd.examples {
			// Run the example's flags through the real command with -help
			// appended: they must get past flag parsing.
			args := removeShell(append(strings.Fields(strings.ReplaceAll(e.args, "'", "")), "-help"))
			var o bytes.Buffer
			if code := run(append([]string{cmd.name}, args...), &o, &o); code != 0 {
				t.Errorf("example %q of %s does not parse: %s", e.args, cmd.name, o.String())
			}
		}
	}
}

// removeShell drops shell syntax (pipes, redirections) from an example.
func removeShell(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "|", "<", ">":
			i++ // and the word after it
			for i+1 < len(args) && args[i+1] != "-help" && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestDemoOnEmbeddedEmulator runs a small demo through the command, with
// RMQFLOW_NAMESPACE exported (the emulator's resources go in the namespace)
// and RMQFLOW_ENDPOINT overridden by an empty -endpoint.
func TestDemoOnEmbeddedEmulator(t *testing.T) {
	t.Setenv("RMQFLOW_ENDPOINT", "127.0.0.1:1") // -endpoint= below overrides it
	t.Setenv("RMQFLOW_NAMESPACE", "demo-ns")
	chart := filepath.Join(t.TempDir(), "demo.svg")
	var out, errOut bytes.Buffer
	code := run([]string{"demo", "-endpoint=", "-sessions", "4", "-hot", "60", "-model-call", "2ms", "-chart", chart, "-json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"throttled":true`) || !strings.Contains(out.String(), `"throttled":false`) {
		t.Errorf("demo output lacks both runs: %s", out.String())
	}
	b, err := os.ReadFile(chart)
	if err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Errorf("chart: %v %q", err, b)
	}
}

// TestDemoHotZero: -hot 0 means no hot session (it flooded with 400, zero
// read as "default"): two runs, no message of a hot session anywhere; with a
// hot session the demo runs the no-hot baseline first and prints the three
// runs' cold p99 side by side.
func TestDemoHotZero(t *testing.T) {
	t.Setenv("RMQFLOW_NAMESPACE", "")
	code, out, errOut := runCLI(t, "", "demo", "-endpoint=", "-sessions", "3", "-hot", "0", "-model-call", "1ms", "-chart", "")
	if code != exitOK {
		t.Fatalf("demo -hot 0: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "(hot)") || !strings.Contains(out, "no hot session") || strings.Count(out, "all cold sessions") != 2 {
		t.Errorf("demo -hot 0 output:\n%s", out)
	}
	code, out, errOut = runCLI(t, "", "demo", "-endpoint=", "-sessions", "3", "-hot", "30", "-model-call", "1ms", "-chart", "")
	if code != exitOK {
		t.Fatalf("demo -hot 30: exit %d: %s", code, errOut)
	}
	if strings.Count(out, "all cold sessions") != 3 || !strings.Contains(out, "cold sessions' p99: no hot session (baseline) ") ||
		!strings.Contains(out, ", throttle off ") || !strings.Contains(out, ", throttle on (fair share) ") {
		t.Errorf("demo -hot 30 output lacks the baseline beside the two runs:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "demo", "-endpoint=", "-hot", "-1"); code != exitUsage || !strings.Contains(errOut, "-hot -1") {
		t.Errorf("demo -hot -1: exit %d, want 2: %s", code, errOut)
	}
}

// TestDemoEnvironmentAndChart: the demo honours RMQFLOW_ENDPOINT (a dead one
// exits 3), writes its chart to the temporary directory by default (not the
// working directory), and exits 1 for an unwritable -chart, 2 for a bad
// flag, 4 on a broker without its topic and 5 when credentials are refused.
func TestDemoEnvironmentAndChart(t *testing.T) {
	t.Setenv("RMQFLOW_NAMESPACE", "")
	t.Setenv("RMQFLOW_ACCESS_KEY", "")
	t.Setenv("RMQFLOW_SECRET_KEY", "")
	t.Setenv("RMQFLOW_ENDPOINT", "127.0.0.1:1")
	small := []string{"-sessions", "2", "-hot", "10", "-model-call", "1ms", "-timeout", "1s"}
	if code, _, errOut := runCLI(t, "", append([]string{"demo"}, small...)...); code != exitUnreachable {
		t.Errorf("RMQFLOW_ENDPOINT dead: exit %d, want 3: %s", code, errOut)
	}
	t.Setenv("RMQFLOW_ENDPOINT", "")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Chdir(t.TempDir())
	code, out, errOut := runCLI(t, "", append([]string{"demo", "-json"}, small...)...)
	if code != exitOK {
		t.Fatalf("demo: exit %d: %s", code, errOut)
	}
	want := filepath.Join(tmp, "rmqflow-demo.svg")
	if !strings.Contains(out, `{"chart":"`+want+`"}`) {
		t.Errorf("chart not reported at %s: %s", want, out)
	}
	if _, err := os.Stat(want); err != nil {
		t.Errorf("chart: %v", err)
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Errorf("the demo wrote into the working directory: %v", entries)
	}
	if code, _, errOut := runCLI(t, "", append([]string{"demo", "-chart", filepath.Join(tmp, "no", "dir", "x.svg")}, small...)...); code != exitFailure {
		t.Errorf("unwritable -chart: exit %d, want 1: %s", code, errOut)
	}
	if code, _, _ := runCLI(t, "", "demo", "-sessions", "x"); code != exitUsage {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	bare := rmqfake.NewForTest(t)
	if code, _, errOut := runCLI(t, "", append([]string{"demo", "-endpoint", bare.Addr()}, small...)...); code != exitNotFound {
		t.Errorf("no demo topic: exit %d, want 4: %s", code, errOut)
	}
	locked := rmqfake.NewForTest(t, rmqfake.Credentials("ak", "sk"), rmqfake.AutoCreate())
	if code, _, errOut := runCLI(t, "", append([]string{"demo", "-endpoint", locked.Addr(), "-access-key", "ak", "-secret-key", "bad"}, small...)...); code != exitAuth {
		t.Errorf("refused credentials: exit %d, want 5: %s", code, errOut)
	}
}

// TestHelpForEveryCommand: "<cmd> -help" and "help <cmd>" print the same
// help and exit 0 for every command but bench (the harness prints its own:
// TestBenchExitCodes), help and version included; each names its exit codes.
func TestHelpForEveryCommand(t *testing.T) {
	clearEnv(t)
	for _, c := range commands() {
		if c.name == "bench" {
			continue
		}
		var a, b, errA, errB bytes.Buffer
		codeA := run([]string{c.name, "-help"}, &a, &errA)
		codeB := run([]string{"help", c.name}, &b, &errB)
		if codeA != 0 || codeB != 0 || a.String() != b.String() {
			t.Errorf("%s -help: exit %d; help %s: exit %d; outputs differ: %v\n%s\n---\n%s", c.name, codeA, c.name, codeB, a.String() != b.String(), a.String(), b.String())
		}
		for _, want := range []string{"Usage: rmqflow " + c.name, "Examples:", "Exit codes:"} {
			if !strings.Contains(a.String(), want) {
				t.Errorf("%s -help lacks %q:\n%s", c.name, want, a.String())
			}
		}
		if c.name != "help" && !strings.Contains(a.String(), "-json") {
			t.Errorf("%s -help lacks -json", c.name)
		}
	}
	// consume's help explains the wait for a backlog sent before it
	// connected, and the broker flag that removes it (issue 10, "Also").
	var ch bytes.Buffer
	run([]string{"consume", "-help"}, &ch, io.Discard)
	if !strings.Contains(ch.String(), "-fast-lite-dispatch") {
		t.Errorf("consume -help does not name rmqflow broker -fast-lite-dispatch:\n%s", ch.String())
	}
	var out bytes.Buffer
	if code := run([]string{"version", "-json"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), `"version":`) {
		t.Errorf("version -json: exit %d %q", code, out.String())
	}
	if code := run([]string{"help", "nope"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("help nope: exit %d", code)
	}
	if code := run([]string{"version", "extra"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("version extra: exit %d", code)
	}
}

// TestBenchExitCodes: bench exits 0 for its -help, 2 for a flag the harness
// does not know (the harness is built and run, so its own code comes
// through), 1 outside a checkout; never 3, 4 or 5.
func TestBenchExitCodes(t *testing.T) {
	if code, _, errOut := runCLI(t, "", "bench", "-no-such-flag"); code != exitUsage || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("bench -no-such-flag: exit %d, want 2: %s", code, errOut)
	}
	var out bytes.Buffer
	if code := run([]string{"bench", "-help"}, &out, io.Discard); code != exitOK || !strings.Contains(out.String(), "Usage: rmqflow bench") {
		t.Errorf("bench -help: exit %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "Exit codes: 0 done; 1 a run failed") {
		t.Errorf("bench -help does not list its exit codes: %s", out.String())
	}
	t.Chdir(t.TempDir())
	if code, _, errOut := runCLI(t, "", "bench", "-quick"); code != exitFailure || !strings.Contains(errOut, "checkout") {
		t.Errorf("bench outside a checkout: exit %d, want 1: %s", code, errOut)
	}
	// Help needs no checkout: it is given, and help exits 0 as help's own
	// text promises.
	for _, args := range [][]string{{"bench", "-help"}, {"help", "bench"}} {
		if code, out, errOut := runCLI(t, "", args...); code != exitOK || !strings.Contains(out, "Usage: rmqflow bench") {
			t.Errorf("%v outside a checkout: exit %d, want 0: %s%s", args, code, out, errOut)
		}
	}
}

// TestBenchFailedRunExits1: a run that fails (here a peer given 1 ms to
// finish, on the in-process emulator) makes bench exit 1, the harness's own
// code coming through.
func TestBenchFailedRunExits1(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the harness and a peer: not in -short")
	}
	code, out, errOut := runCLI(t, "", "bench", "-emulator", "-quick", "-peers", "rmqflow/loop", "-scenarios", "drain",
		"-window", "1s", "-window-messages", "100", "-warmup", "10", "-peer-timeout", "1ms", "-out", t.TempDir())
	if code != exitFailure || !strings.Contains(errOut, "runs failed") {
		t.Errorf("bench with a peer that cannot finish: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
