package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

const (
	cliLeakAK     = "AK-canary-cli-41d0"
	cliLeakSecret = "SECRET-canary-cli-77b3e05c92"
)

// cliForbidden is what no output may contain: the secret, its hex and
// base64 forms, and the signature (hex HMAC-SHA1 of x-mq-date-time, and its
// base64) of every second from start to now.
func cliForbidden(start time.Time) map[string]string {
	out := map[string]string{}
	for name, s := range map[string]string{"secret": cliLeakSecret, "secret core": "77b3e05c92"} {
		out[name] = s
		out[name+" hex"] = hex.EncodeToString([]byte(s))
		out[name+" base64"] = base64.StdEncoding.EncodeToString([]byte(s))
		out[name+" base64url"] = base64.RawURLEncoding.EncodeToString([]byte(s))
	}
	for ts := start.Add(-2 * time.Second); ts.Before(time.Now().Add(2 * time.Second)); ts = ts.Add(time.Second) {
		dt := ts.UTC().Format("20060102T150405Z")
		h := hmac.New(sha1.New, []byte(cliLeakSecret))
		h.Write([]byte(dt))
		out["signature at "+dt] = hex.EncodeToString(h.Sum(nil))
		out["signature (base64) at "+dt] = base64.StdEncoding.EncodeToString(h.Sum(nil))
	}
	return out
}

// TestNoSecretsInCLIOutput builds rmqflow and runs produce and consume (and
// their help) with a known secret, given by RMQFLOW_SECRET_KEY or by
// -secret-key, against an rmqfake that accepts it, one that wants another
// key, and a dead endpoint; neither stdout nor stderr of any run may carry
// the secret, its hex or base64 forms, or a signature made with it. Each run
// must also end with the exit code its path documents, so that the test
// knows it went down that path.
func TestNoSecretsInCLIOutput(t *testing.T) {
	start := time.Now()
	bin := filepath.Join(t.TempDir(), "rmqflow")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	setup := func(s *rmqfake.Server) {
		for _, err := range []error{
			s.CreateTopic("chat", rmqfake.TopicLite),
			s.CreateGroup("chat-g", rmqfake.LiteBind("chat"), rmqfake.Wildcard()),
			s.CreateTopic("orders", rmqfake.TopicNormal),
			s.CreateGroup("billing"),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	ok := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch(), rmqfake.Credentials(cliLeakAK, cliLeakSecret))
	other := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch(), rmqfake.Credentials("AK-other", "other-secret"))
	setup(ok)
	setup(other)
	dead := "127.0.0.1:1"

	env := func(ep string) []string {
		var out []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "RMQFLOW_") {
				out = append(out, kv)
			}
		}
		out = append(out, "RMQFLOW_ACCESS_KEY="+cliLeakAK, "RMQFLOW_SECRET_KEY="+cliLeakSecret)
		if ep != "" {
			out = append(out, "RMQFLOW_ENDPOINT="+ep)
		}
		return out
	}
	flagEnv := func(ep string) []string { // the secret as a flag, not in the environment
		var out []string
		for _, kv := range env(ep) {
			if !strings.HasPrefix(kv, "RMQFLOW_SECRET_KEY=") {
				out = append(out, kv)
			}
		}
		return out
	}
	type run struct {
		name  string
		env   []string
		args  []string
		stdin string
		code  int // anyCode: any; nonZero: any but 0
	}
	const anyCode, nonZero = -2, -1
	runs := []run{
		{"help produce", env(ok.Addr()), []string{"help", "produce"}, "", exitOK},
		{"help consume", env(ok.Addr()), []string{"help", "consume"}, "", exitOK},
		{"help demo", env(ok.Addr()), []string{"help", "demo"}, "", exitOK},
		{"produce -help", env(ok.Addr()), []string{"produce", "-help"}, "", exitOK},
		{"consume -help", env(ok.Addr()), []string{"consume", "-help"}, "", exitOK},
		{"produce accepted", env(ok.Addr()), []string{"produce", "-topic", "chat", "-lite", "a", "-message", "hi", "-message", "again", "-json"}, "", exitOK},
		{"produce accepted from stdin", env(ok.Addr()), []string{"produce", "-topic", "chat", "-lite-per-line"}, "b\tone\nc\ttwo\n", exitOK},
		{"consume accepted", env(ok.Addr()), []string{"consume", "-topic", "chat", "-group", "chat-g", "-max", "4", "-json"}, "", exitOK},
		{"consume accepted, plain", env(ok.Addr()), []string{"consume", "-topic", "chat", "-group", "chat-g", "-idle", "1s"}, "", exitOK},
		{"produce unknown topic", env(ok.Addr()), []string{"produce", "-topic", "no-such-topic", "-message", "x"}, "", exitNotFound},
		{"consume unknown group", env(ok.Addr()), []string{"consume", "-topic", "chat", "-group", "no-such-group", "-idle", "5s"}, "", exitNotFound},
		{"consume unknown topic", env(ok.Addr()), []string{"consume", "-mode", "simple", "-topic", "no-such-topic", "-group", "billing", "-idle", "3s"}, "", exitNotFound},
		{"produce refused", env(other.Addr()), []string{"produce", "-topic", "chat", "-lite", "a", "-message", "x"}, "", exitAuth},
		{"produce refused, json", env(other.Addr()), []string{"produce", "-topic", "chat", "-lite", "a", "-message", "x", "-json"}, "", exitAuth},
		{"consume refused", env(other.Addr()), []string{"consume", "-topic", "chat", "-group", "chat-g", "-idle", "5s"}, "", exitAuth},
		{"consume refused, json", env(other.Addr()), []string{"consume", "-topic", "chat", "-group", "chat-g", "-idle", "5s", "-json"}, "", exitAuth},
		{"produce refused, secret flag", flagEnv(other.Addr()), []string{"produce", "-secret-key", cliLeakSecret, "-topic", "chat", "-lite", "a", "-message", "x"}, "", exitAuth},
		{"consume refused, secret flag", flagEnv(other.Addr()), []string{"consume", "-secret-key", cliLeakSecret, "-topic", "chat", "-group", "chat-g", "-idle", "5s"}, "", exitAuth},
		{"produce dead endpoint", env(dead), []string{"produce", "-timeout", "500ms", "-topic", "chat", "-lite", "a", "-message", "x"}, "", exitUnreachable},
		{"consume dead endpoint", env(dead), []string{"consume", "-timeout", "500ms", "-topic", "chat", "-group", "chat-g", "-idle", "3s"}, "", nonZero},
		{"produce bad endpoint", env("not an endpoint"), []string{"produce", "-topic", "chat", "-message", "x"}, "", exitUsage},
		{"consume bad flag", env(ok.Addr()), []string{"consume", "-topic", "chat", "-group", "chat-g", "-ack", "sometimes"}, "", exitUsage},
	}
	var outs []cliOutput
	for _, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, r.args...)
		cmd.Env = r.env
		cmd.Stdin = strings.NewReader(r.stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := cmd.ProcessState.ExitCode()
		if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
			t.Fatalf("%s: %v", r.name, err)
		}
		if r.code >= 0 && code != r.code {
			t.Errorf("%s: exit %d, want %d; stderr %q", r.name, code, r.code, stderr.String())
		}
		if r.code == nonZero && code == exitOK {
			t.Errorf("%s: exit 0 on a dead endpoint; stderr %q", r.name, stderr.String())
		}
		outs = append(outs, cliOutput{r.name, stdout.String(), stderr.String()})
	}
	outs = append(outs, brokerOutput(t, bin))
	if !strings.Contains(outs[7].stdout, `"handle"`) {
		t.Errorf("consume -json printed no handle, so handles were not checked: %q", outs[7].stdout)
	}
	bad := cliForbidden(start)
	for _, o := range outs {
		for stream, text := range map[string]string{"stdout": o.stdout, "stderr": o.stderr} {
			low := strings.ToLower(text)
			for name, f := range bad {
				if strings.Contains(low, strings.ToLower(f)) {
					t.Errorf("LEAK of the %s on the %s of %q: %.600q", name, stream, o.name, text)
				}
			}
		}
	}
}

type cliOutput struct{ name, stdout, stderr string }

// brokerOutput runs `rmqflow broker -v` requiring the canary secret, sends it
// requests signed with the wrong secret and with the right one (through
// produce), stops it, and returns what it printed.
func brokerOutput(t *testing.T, bin string) cliOutput {
	t.Helper()
	cmd := exec.Command(bin, "broker", "-listen", "127.0.0.1:0", "-v", "-access-key", cliLeakAK, "-secret-key", cliLeakSecret,
		"-topic", "chat:lite", "-group", "chat-g:bind=chat:wildcard")
	cmd.Env = os.Environ()
	var stdout, stderr lockedBuffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	first := make(chan string, 1)
	copied := make(chan struct{})
	go func() { // every line into stdout; the first one also to first
		defer close(copied)
		sc := bufio.NewScanner(pipe)
		for n := 0; sc.Scan(); n++ {
			stdout.Write(append(sc.Bytes(), '\n'))
			if n == 0 {
				first <- sc.Text()
			}
		}
		close(first)
	}()
	var addr string
	select {
	case line := <-first:
		if f := strings.Fields(strings.TrimPrefix(line, "rmqfake listening on ")); len(f) > 0 {
			addr = f[0]
		}
	case <-time.After(20 * time.Second):
	}
	if addr == "" {
		t.Fatalf("broker printed no address: %q %q", stdout.String(), stderr.String())
	}
	for _, secret := range []string{"wrong-secret", cliLeakSecret} {
		c := exec.Command(bin, "produce", "-endpoint", addr, "-access-key", cliLeakAK, "-secret-key", secret, "-timeout", "2s",
			"-topic", "chat", "-lite", "a", "-message", "x")
		out, _ := c.CombinedOutput()
		if secret == cliLeakSecret && c.ProcessState.ExitCode() != exitOK {
			t.Errorf("produce to the broker binary with its secret: exit %d: %s", c.ProcessState.ExitCode(), out)
		}
		if secret != cliLeakSecret && c.ProcessState.ExitCode() != exitAuth {
			t.Errorf("produce to the broker binary with a wrong secret: exit %d, want %d: %s", c.ProcessState.ExitCode(), exitAuth, out)
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-copied
	if err := cmd.Wait(); err != nil {
		t.Errorf("broker: %v (stderr %q)", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "rmqfake stopped") {
		t.Errorf("broker output %q: want its stop line", stdout.String())
	}
	return cliOutput{"broker -v", stdout.String(), stderr.String()}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
