package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

func TestDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "Commands:") {
		t.Errorf("no command: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"frobnicate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"help"}, &out, &errOut); code != 0 {
		t.Errorf("help: exit %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(out.String(), "  "+c.name+" ") {
			t.Errorf("help does not list %s:\n%s", c.name, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "rmqflow ") || !strings.Contains(out.String(), runtime.Version()) {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
	errOut.Reset()
	if code := run([]string{"broker", "-topic", "t:purple"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "purple") {
		t.Errorf("bad topic spec: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"broker", "-access-key", "ak"}, &out, &errOut); code != 2 {
		t.Errorf("-access-key without -secret-key: exit %d, %q", code, errOut.String())
	}
}

// The help text is the flag set's own: every flag is documented, and every
// example parses into valid options and resources (TestBrokerSpecWordsTakeEffect
// checks that each SPEC word of the help takes effect).
func TestBrokerHelpIsTrueToTheCode(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"help", "broker"}, &out, &errOut); code != 0 {
		t.Fatalf("help broker: exit %d %s", code, errOut.String())
	}
	if errOut.Len() > 0 {
		t.Errorf("help broker wrote to stderr: %q", errOut.String())
	}
	var out2, errOut2 bytes.Buffer
	if code := run([]string{"broker", "-help"}, &out2, &errOut2); code != 0 || errOut2.Len() > 0 || out2.String() != out.String() {
		t.Errorf("broker -help: exit %d, stderr %q, stdout the same as help broker: %v", code, errOut2.String(), out2.String() == out.String())
	}
	help := out.String()
	fs, _ := brokerFlagSet(&bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "  -"+f.Name) {
			t.Errorf("help does not document -%s", f.Name)
		}
	})
	if !strings.Contains(help, `(default "127.0.0.1:8081")`) {
		t.Error("help does not give the default address")
	}
	for _, e := range brokerExamples {
		if !strings.Contains(help, "rmqflow broker "+e.args) {
			t.Errorf("example %q not in the help", e.args)
		}
		fs, f := brokerFlagSet(&bytes.Buffer{})
		args := strings.Fields(e.args)
		for i, a := range args {
			if strings.HasSuffix(a, "fixtures.txt") {
				args[i] = filepath.Join("..", "..", a) // relative to the repository root
			}
		}
		if err := fs.Parse(args); err != nil {
			t.Errorf("example %q: %v", e.args, err)
			continue
		}
		if _, err := f.options(); err != nil {
			t.Errorf("example %q: %v", e.args, err)
		}
		if _, err := f.resources(); err != nil {
			t.Errorf("example %q: %v", e.args, err)
		}
	}
}

// The built binary serves topics and groups from its flags, and stops with
// exit code 0 on SIGTERM.
func TestBrokerBinarySIGTERM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rmqflow")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin, "broker", "-listen", "127.0.0.1:0",
				"-topic", "cli-lite:lite", "-group", "cli-lite-g:bind=cli-lite:wildcard:retry=2", "-fast-lite-dispatch")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			lines := bufio.NewScanner(stdout)
			if !lines.Scan() {
				t.Fatalf("no output; stderr: %s", stderr.String())
			}
			first := lines.Text()
			const prefix = "rmqfake listening on "
			if !strings.HasPrefix(first, prefix) {
				t.Fatalf("first line %q", first)
			}
			addr := strings.Fields(strings.TrimPrefix(first, prefix))[0]
			exercise(t, addr)

			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var rest []string
			for lines.Scan() {
				rest = append(rest, lines.Text())
			}
			if err := cmd.Wait(); err != nil { // an *exec.ExitError for a non-zero exit
				t.Fatalf("after %v: %v (stderr %s)", sig, err, stderr.String())
			}
			if cmd.ProcessState.ExitCode() != 0 || strings.Join(rest, "\n") != "rmqfake stopped" {
				t.Errorf("exit %d, output after the signal %q", cmd.ProcessState.ExitCode(), rest)
			}
		})
	}
}

// exercise sends, receives and acks one lite message through addr.
func exercise(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(sc client.SessionConfig) *client.Client {
		c, err := client.New(client.Config{Endpoints: addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		if _, err := c.OpenSession(ctx, sc); err != nil {
			t.Fatalf("session against the binary: %v", err)
		}
		return c
	}
	p := open(client.SessionConfig{Type: client.Producer})
	c := open(client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "cli-lite-g", Subscriptions: []client.Subscription{{Topic: "cli-lite"}}, LiteWildcard: true})
	if _, err := p.Send(ctx, &client.Message{Topic: "cli-lite", LiteTopic: "chat-1", Body: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Receive(ctx, client.ReceiveRequest{Group: "cli-lite-g", Topic: "cli-lite", Lite: true, InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hi" {
		t.Fatalf("receive from the binary: %d messages, %v", len(msgs), err)
	}
	res, err := c.Ack(ctx, "cli-lite-g", "cli-lite", []client.AckEntry{{MessageID: msgs[0].MessageID, ReceiptHandle: msgs[0].ReceiptHandle, LiteTopic: "chat-1"}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("ack: %v %v", err, res)
	}
}
