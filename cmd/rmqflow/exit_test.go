package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
	"google.golang.org/grpc/codes"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// cliBinary builds rmqflow once per test binary.
func cliBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "rmqflow-cli-test"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "rmqflow")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// cliEnv is the environment without RMQFLOW_* variables, plus extra.
func cliEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RMQFLOW_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// runCLI runs the command in process with a clean RMQFLOW_* environment
// (t.Setenv), stdin from stdin.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if args[0] == "produce" && stdin != "" {
		// produce reads os.Stdin; feed it through a pipe.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		old := os.Stdin
		os.Stdin = r
		defer func() { os.Stdin = old; r.Close() }()
		go func() { io.Copy(w, strings.NewReader(stdin)); w.Close() }()
	}
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func clearEnv(t *testing.T) {
	for _, k := range []string{"RMQFLOW_ENDPOINT", "RMQFLOW_NAMESPACE", "RMQFLOW_ACCESS_KEY", "RMQFLOW_SECRET_KEY", "RMQFLOW_BROKER_ADDR"} {
		t.Setenv(k, "")
	}
}

// TestProduceInput: -count/-size are bounded before anything is allocated or
// sent; blank lines are skipped and counted; a line over the 4 MiB body
// limit is named by its line number, counted as failed, and the lines after
// it are still sent; a line of exactly 4 MiB is sent.
func TestProduceInput(t *testing.T) {
	s := fakeForCLI(t)
	clearEnv(t)
	ep := s.Addr()
	for _, args := range [][]string{
		{"-count", "0"}, {"-count", "-1"}, {"-count", "1", "-size", "0"}, {"-count", "1", "-size", "-1"},
		{"-count", "1", "-size", "9223372036854775807"}, {"-count", "1", "-size", "2000000000"}, {"-count", "1", "-size", "4194305"},
		{"-size", "10"}, {"-count", "1", "-concurrency", "0"}, {"-message", "x", "-max-outage", "0s"},
	} {
		code, _, errOut := runCLI(t, "", append([]string{"produce", "-endpoint", ep, "-topic", "orders"}, args...)...)
		if code != exitUsage || strings.Contains(errOut, "goroutine") {
			t.Errorf("produce %v: exit %d, want 2: %s", args, code, errOut)
		}
	}
	if st := s.Stats(); st.Topics["orders"].Sent != 0 {
		t.Fatalf("a usage error sent %d messages", st.Topics["orders"].Sent)
	}
	code, out, errOut := runCLI(t, "", "produce", "-endpoint", ep, "-topic", "orders", "-count", "1", "-size", "4194304", "-json")
	if code != exitOK || !strings.Contains(out, `"sent":1`) {
		t.Fatalf("-size 4194304 (the limit): exit %d, %s %s", code, out, errOut)
	}

	exact := strings.Repeat("e", 4<<20)
	input := "one\n\n" + exact + "\n" + strings.Repeat("o", 4<<20+1) + "\r\n\ntwo\r\n" + "three"
	code, out, errOut = runCLI(t, input, "produce", "-endpoint", ep, "-topic", "orders", "-json")
	if code != exitFailure {
		t.Errorf("a line over the limit: exit %d, want 1; stderr %s", code, errOut)
	}
	if !strings.Contains(errOut, "line 4: body over the 4 MiB limit") {
		t.Errorf("the long line is not named by its number: %q", errOut)
	}
	var sum struct{ Sent, Failed, Skipped int }
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 4 || sum.Failed != 1 || sum.Skipped != 2 {
		t.Errorf("summary %+v, want sent 4 (one, 4 MiB, two, three), failed 1, skipped 2", sum)
	}
	// What arrived: the bodies, CR dropped, in full.
	src := fakeSourceBodies(t, ep, 5)
	for _, want := range []string{"one", "two", "three"} {
		if !src[want] {
			t.Errorf("body %q not received (got %d bodies)", want, len(src))
		}
	}
	if !src[exact] {
		t.Error("the 4 MiB line was not received whole")
	}
}

// fakeSourceBodies consumes n messages of orders/billing and returns their
// bodies.
func fakeSourceBodies(t *testing.T, ep string, n int) map[string]bool {
	t.Helper()
	code, out, errOut := runCLI(t, "", "consume", "-endpoint", ep, "-mode", "simple", "-topic", "orders", "-group", "billing", "-max", fmt.Sprint(n), "-idle", "5s", "-json")
	if code != exitOK {
		t.Fatalf("consume: exit %d: %s", code, errOut)
	}
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct{ Body string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		got[m.Body] = true
	}
	return got
}

// TestExitCodesUnknownTopicOrGroup: consume and produce exit 4 for an unknown
// topic or group, in lite and simple mode, with and without -sql, on rmqfake
// and on the real broker.
func TestExitCodesUnknownTopicOrGroup(t *testing.T) {
	realEP := os.Getenv(rmqtest.EnvEndpoint)
	s := fakeForCLI(t)
	type target struct{ ep, lite, liteG, normal, normalG string }
	check := func(t *testing.T, tg target) {
		for _, args := range [][]string{
			{"consume", "-topic", "no-such-topic", "-group", tg.liteG},
			{"consume", "-topic", tg.lite, "-group", "no-such-group"},
			{"consume", "-mode", "simple", "-topic", "no-such-topic", "-group", tg.normalG},
			{"consume", "-mode", "simple", "-topic", tg.normal, "-group", "no-such-group"},
			{"consume", "-mode", "simple", "-topic", "no-such-topic", "-group", tg.normalG, "-sql", "a = 1"},
			{"consume", "-mode", "simple", "-topic", tg.normal, "-group", "no-such-group", "-sql", "a = 1"},
			{"consume", "-mode", "simple", "-topic", "no-such-topic", "-group", tg.normalG, "-tag", "x"},
			{"produce", "-topic", "no-such-topic", "-message", "x"},
			{"produce", "-topic", "no-such-topic", "-lite", "l", "-message", "x"},
		} {
			full := append(append([]string{}, args...), "-endpoint", tg.ep)
			if args[0] == "consume" {
				full = append(full, "-idle", "20s") // an exit 0 after -idle would be the old bug
			}
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			cmd := exec.CommandContext(ctx, cliBinary(t), full...)
			cmd.Env = cliEnv()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Run()
			cancel()
			if code := cmd.ProcessState.ExitCode(); code != exitNotFound {
				t.Errorf("%v: exit %d, want 4; stderr %s", args, code, stderr.String())
			}
		}
	}
	t.Run("rmqfake", func(t *testing.T) { check(t, target{s.Addr(), "chat", "chat-g", "orders", "billing"}) })
	t.Run("broker", func(t *testing.T) {
		if realEP == "" {
			rmqtest.Endpoint(t) // skips or fails as every real-broker test does
		}
		check(t, target{realEP, "rmqflow-lite-client", "rmqflow-lite-client-g", "rmqflow-normal-client", "rmqflow-normal-client-g"})
	})
}

// startBrokerBinary runs `rmqflow broker -json` with args and returns the
// process and its address; the test kills it at the end.
func startBrokerBinary(t *testing.T, env []string, args ...string) (*exec.Cmd, string, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append([]string{"broker", "-listen", "127.0.0.1:0", "-json"}, args...)...)
	cmd.Env = cliEnv(env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(pipe)
	if !lines.Scan() {
		cmd.Wait() // stderr is written until the process has ended
		t.Fatalf("broker printed nothing; stderr %s", stderr.String())
	}
	var first struct {
		Listening string `json:"listening"`
		Topics    int    `json:"topics"`
	}
	if err := json.Unmarshal(lines.Bytes(), &first); err != nil || first.Listening == "" {
		t.Fatalf("first line %q: %v", lines.Text(), err)
	}
	return cmd, first.Listening, lines
}

// TestExitCodeAfterBrokerDies: produce stops with exit 3 after -max-outage
// once the broker is SIGKILLed mid-run (it used to log failures for
// minutes); consume without -idle does the same (it used to retry forever),
// and consume with -idle exits 3, not 0, when the broker died while it
// waited.
func TestExitCodeAfterBrokerDies(t *testing.T) {
	clearEnv(t)
	t.Run("produce", func(t *testing.T) {
		broker, addr, _ := startBrokerBinary(t, nil, "-topic", "orders")
		cmd := exec.Command(cliBinary(t), "produce", "-endpoint", addr, "-topic", "orders", "-count", "100000000", "-size", "10",
			"-timeout", "500ms", "-max-outage", "2s", "-json")
		cmd.Env = cliEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		lines := bufio.NewScanner(pipe)
		if !lines.Scan() || !strings.Contains(lines.Text(), `"id":"`) || strings.Contains(lines.Text(), `"error"`) {
			t.Fatalf("first line %q", lines.Text())
		}
		broker.Process.Kill()
		killed := time.Now()
		n := 0
		for lines.Scan() { // drain, or the child blocks on a full pipe
			n++
		}
		cmd.Wait()
		took := time.Since(killed)
		if code := cmd.ProcessState.ExitCode(); code != exitUnreachable || !strings.Contains(stderr.String(), "-max-outage") {
			t.Fatalf("exit %d after the broker died, want 3 naming -max-outage; stderr %q", code, stderr.String())
		}
		if took > 30*time.Second {
			t.Errorf("stopped %v after the kill (-max-outage 2s)", took)
		}
		if strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("want one line on stderr, got %q", stderr.String())
		}
		t.Logf("stopped %v after the kill, %d lines after the first", took.Round(time.Millisecond), n)
	})
	consumeUntilKilled := func(t *testing.T, extra ...string) (int, string, time.Duration) {
		s := fakeForCLI(t)
		clearEnv(t)
		polled := make(chan struct{})
		var once sync.Once
		s.Intercept("ReceiveMessage", func(rmqfake.Call) rmqfake.Verdict { once.Do(func() { close(polled) }); return rmqfake.Verdict{} })
		done := make(chan struct{})
		var code int
		var errOut string
		go func() {
			defer close(done)
			code, _, errOut = runCLI(t, "", append([]string{"consume", "-endpoint", s.Addr(), "-topic", "chat", "-group", "chat-g", "-timeout", "500ms"}, extra...)...)
		}()
		select {
		case <-polled:
		case <-done:
			t.Fatalf("consume ended before it polled: exit %d %s", code, errOut)
		}
		s.Stop()
		killed := time.Now()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("consume still running 60 s after the broker died")
		}
		return code, errOut, time.Since(killed)
	}
	t.Run("consume", func(t *testing.T) {
		code, errOut, took := consumeUntilKilled(t, "-max-outage", "1s")
		if code != exitUnreachable || !strings.Contains(errOut, "MaxOutage") {
			t.Errorf("exit %d after %v, want 3; stderr %q", code, took, errOut)
		}
	})
	t.Run("consume -idle", func(t *testing.T) {
		code, errOut, took := consumeUntilKilled(t, "-idle", "2s")
		if code != exitUnreachable || !strings.Contains(errOut, "-idle") {
			t.Errorf("exit %d after %v, want 3; stderr %q", code, took, errOut)
		}
	})
}

// TestExitCodesConsume: 0 done, 1 an ack failed, 2 usage, 3 unreachable,
// 5 refused credentials (4: TestExitCodesUnknownTopicOrGroup).
func TestExitCodesConsume(t *testing.T) {
	s := fakeForCLI(t)
	clearEnv(t)
	ep := s.Addr()
	// Two lite topics: the message whose ack fails holds its lite topic
	// until its invisibility ends; the other stays deliverable.
	for _, lite := range []string{"a", "b"} {
		if code, _, errOut := runCLI(t, "", "produce", "-endpoint", ep, "-topic", "chat", "-lite", lite, "-message", "m-"+lite); code != 0 {
			t.Fatalf("produce: %d %s", code, errOut)
		}
	}
	s.SetFault("AckMessage", rmqfake.Fault{ErrorRate: 1, Code: codes.Internal})
	code, out, errOut := runCLI(t, "", "consume", "-endpoint", ep, "-topic", "chat", "-group", "chat-g", "-max", "1")
	if code != exitFailure || !strings.Contains(errOut, "after-print") || strings.TrimSpace(out) == "" {
		t.Errorf("failed ack: exit %d, stdout %q, stderr %q; want 1", code, out, errOut)
	}
	s.ClearFaults()
	if code, _, errOut := runCLI(t, "", "consume", "-endpoint", ep, "-topic", "chat", "-group", "chat-g", "-max", "1"); code != exitOK {
		t.Errorf("consume: exit %d %s", code, errOut)
	}
	for _, args := range [][]string{{"-max-outage", "0s"}, {"-max", "-1"}, {"-mode", "push"}, {"-ca", filepath.Join(t.TempDir(), "none.pem")}} {
		if code, _, errOut := runCLI(t, "", append([]string{"consume", "-endpoint", ep, "-topic", "chat", "-group", "chat-g"}, args...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errOut)
		}
	}
	if code, _, errOut := runCLI(t, "", "consume", "-endpoint", "127.0.0.1:1", "-timeout", "500ms", "-topic", "chat", "-group", "chat-g"); code != exitUnreachable {
		t.Errorf("dead endpoint: exit %d, want 3: %s", code, errOut)
	}
	locked := rmqfake.NewForTest(t, rmqfake.Credentials("ak", "sk"), rmqfake.AutoCreate())
	if code, _, errOut := runCLI(t, "", "consume", "-endpoint", locked.Addr(), "-topic", "chat", "-group", "chat-g", "-access-key", "ak", "-secret-key", "wrong", "-idle", "5s"); code != exitAuth {
		t.Errorf("refused credentials: exit %d, want 5: %s", code, errOut)
	}
}

// TestExitCodesProduce: 0 sent, 1 (TestProduceInput), 2 usage, 3 unreachable
// (and TestExitCodeAfterBrokerDies), 4 unknown topic
// (TestExitCodesUnknownTopicOrGroup), 5 refused credentials; a refusal stops
// the run at once instead of failing every message.
func TestExitCodesProduce(t *testing.T) {
	s := fakeForCLI(t)
	clearEnv(t)
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", "127.0.0.1:1", "-timeout", "500ms", "-topic", "chat", "-message", "x"); code != exitUnreachable {
		t.Errorf("dead endpoint: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", s.Addr(), "-topic", "chat"+strings.Repeat("x", 300), "-message", "x"); code == exitOK {
		t.Errorf("illegal topic: exit 0: %s", errOut)
	}
	locked := rmqfake.NewForTest(t, rmqfake.Credentials("ak", "sk"), rmqfake.AutoCreate())
	code, out, errOut := runCLI(t, "", "produce", "-endpoint", locked.Addr(), "-topic", "orders", "-access-key", "ak", "-secret-key", "wrong", "-count", "100000", "-size", "1", "-json")
	if code != exitAuth {
		t.Errorf("refused credentials: exit %d, want 5: %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n > 1000 {
		t.Errorf("a refusal did not stop the run: %d lines", n)
	}
	code, out, errOut = runCLI(t, "", "produce", "-endpoint", s.Addr(), "-topic", "no-such-topic", "-count", "100000", "-size", "1", "-json")
	if code != exitNotFound || strings.Count(out, "\n") > 1000 {
		t.Errorf("unknown topic: exit %d, %d lines; want 4, stopped early: %s", code, strings.Count(out, "\n"), errOut)
	}
}

// TestQuietUnreachable: an unreachable endpoint gives one line on stderr
// (it gave six WARN lines first); -v shows the library's log lines.
func TestQuietUnreachable(t *testing.T) {
	for _, args := range [][]string{
		{"produce", "-topic", "chat", "-message", "x"},
		{"consume", "-topic", "chat", "-group", "chat-g"},
		{"consume", "-mode", "simple", "-topic", "orders", "-group", "billing"},
		{"demo", "-sessions", "1", "-hot", "1", "-chart", ""},
	} {
		for _, verbose := range []bool{false, true} {
			full := append(append([]string{}, args...), "-endpoint", "127.0.0.1:1", "-timeout", "1s")
			if verbose {
				full = append(full, "-v")
			}
			cmd := exec.Command(cliBinary(t), full...)
			cmd.Env = cliEnv()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Run()
			lines := strings.Count(stderr.String(), "\n")
			if code := cmd.ProcessState.ExitCode(); code != exitUnreachable {
				t.Errorf("%v: exit %d, want 3: %s", full, code, stderr.String())
			}
			if !verbose && (lines != 1 || !strings.Contains(stderr.String(), "broker up")) {
				t.Errorf("%v: want one clear line, got %q", full, stderr.String())
			}
			if verbose && lines < 2 {
				t.Errorf("%v: -v showed no log lines: %q", full, stderr.String())
			}
		}
	}
}

// TestTLSWithBrokerCA: `rmqflow broker -ca-out` writes the certificate the
// clients' -ca verifies; -tls alone fails verification with a message that
// names -ca (exit 3); -tls-insecure-skip-verify connects without one.
func TestTLSWithBrokerCA(t *testing.T) {
	clearEnv(t)
	ca := filepath.Join(t.TempDir(), "rmqfake.pem")
	_, addr, _ := startBrokerBinary(t, nil, "-ca-out", ca, "-topic", "chat:lite", "-group", "chat-g:bind=chat:wildcard", "-fast-lite-dispatch")
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", addr, "-topic", "chat", "-lite", "a", "-message", "over tls", "-ca", ca); code != exitOK {
		t.Fatalf("produce -ca: exit %d %s", code, errOut)
	}
	code, out, errOut := runCLI(t, "", "consume", "-endpoint", addr, "-topic", "chat", "-group", "chat-g", "-max", "1", "-idle", "10s", "-ca", ca)
	if code != exitOK || strings.TrimSpace(out) != "over tls" {
		t.Fatalf("consume -ca: exit %d, %q %s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "", "produce", "-endpoint", addr, "-topic", "chat", "-lite", "a", "-message", "x", "-tls", "-timeout", "2s")
	if code != exitUnreachable || !strings.Contains(errOut, "-ca FILE") {
		t.Errorf("-tls without -ca: exit %d, %q; want 3 naming -ca", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", addr, "-topic", "chat", "-lite", "a", "-message", "x", "-tls-insecure-skip-verify"); code != exitOK {
		t.Errorf("-tls-insecure-skip-verify: exit %d %s", code, errOut)
	}
	other := filepath.Join(t.TempDir(), "other.pem")
	_, _, _ = startBrokerBinary(t, nil, "-ca-out", other)
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", addr, "-topic", "chat", "-lite", "a", "-message", "x", "-ca", other, "-timeout", "2s"); code != exitUnreachable {
		t.Errorf("another broker's certificate: exit %d, want 3: %s", code, errOut)
	}
	if code, _, _ := runCLI(t, "", "produce", "-endpoint", addr, "-topic", "chat", "-message", "x", "-ca", ca+".missing"); code != exitUsage {
		t.Errorf("missing -ca file: exit %d, want 2", code)
	}
}

// TestBrokerCommand: -json lines, the RMQFLOW_* variables it reads (and
// RMQFLOW_ENDPOINT, which it does not), exit 1 on a port in use or an
// unwritable -ca-out, exit 2 on bad flags (0 on SIGINT/SIGTERM:
// TestBrokerBinarySIGTERM).
func TestBrokerCommand(t *testing.T) {
	clearEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	// RMQFLOW_ENDPOINT names a port in use: the broker must not try it.
	env := []string{"RMQFLOW_ENDPOINT=" + lis.Addr().String(), "RMQFLOW_NAMESPACE=ns1", "RMQFLOW_ACCESS_KEY=ak", "RMQFLOW_SECRET_KEY=sk"}
	broker, addr, lines := startBrokerBinary(t, env, "-topic", "orders", "-group", "billing")
	// The namespace and credentials came from the environment.
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", addr, "-namespace", "ns1", "-access-key", "ak", "-secret-key", "sk", "-topic", "orders", "-message", "x"); code != exitOK {
		t.Errorf("produce in ns1 with ak/sk: exit %d %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", addr, "-namespace", "ns1", "-topic", "orders", "-message", "x"); code != exitAuth {
		t.Errorf("produce unsigned: exit %d, want 5: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "produce", "-endpoint", addr, "-access-key", "ak", "-secret-key", "sk", "-topic", "orders", "-message", "x"); code != exitNotFound {
		t.Errorf("produce outside ns1: exit %d, want 4: %s", code, errOut)
	}
	// produce and consume take the endpoint, namespace and credentials from
	// RMQFLOW_* as well (issue 10, item 3).
	t.Setenv("RMQFLOW_ENDPOINT", addr)
	t.Setenv("RMQFLOW_NAMESPACE", "ns1")
	t.Setenv("RMQFLOW_ACCESS_KEY", "ak")
	t.Setenv("RMQFLOW_SECRET_KEY", "sk")
	if code, _, errOut := runCLI(t, "", "produce", "-topic", "orders", "-message", "from-env"); code != exitOK {
		t.Errorf("produce with RMQFLOW_*: exit %d %s", code, errOut)
	}
	if code, out, errOut := runCLI(t, "", "consume", "-mode", "simple", "-topic", "orders", "-group", "billing", "-max", "2", "-idle", "15s", "-json"); code != exitOK || !strings.Contains(out, "from-env") {
		t.Errorf("consume with RMQFLOW_*: exit %d, want the messages of ns1: %s%s", code, out, errOut)
	}
	broker.Process.Signal(os.Interrupt)
	if !lines.Scan() || lines.Text() != `{"stopped":true}` {
		t.Errorf("after SIGINT: %q", lines.Text())
	}
	if err := broker.Wait(); err != nil {
		t.Errorf("after SIGINT: %v", err)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"-listen", lis.Addr().String()}, exitFailure},
		{[]string{"-listen", "127.0.0.1:0", "-ca-out", filepath.Join(t.TempDir(), "no", "such", "dir", "ca.pem")}, exitFailure},
		{[]string{"-no-such-flag"}, exitUsage},
		{[]string{"-access-key", "ak"}, exitUsage},
		{[]string{"extra"}, exitUsage},
	} {
		cmd := exec.Command(cliBinary(t), append([]string{"broker"}, c.args...)...)
		cmd.Env = cliEnv()
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != c.code {
			t.Errorf("broker %v: exit %d, want %d: %s", c.args, code, c.code, out)
		}
	}
}
