package rmqflow_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// readmeExample returns the Go block of README.md's "Source → work → ack".
func readmeExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const head = "## Source → work → ack\n\n```go\n"
	i := strings.Index(s, head)
	if i < 0 {
		t.Fatal("README.md has no Go example under \"Source → work → ack\"")
	}
	s = s[i+len(head):]
	j := strings.Index(s, "```")
	if j < 0 {
		t.Fatal("README.md's example is not closed")
	}
	return s[:j]
}

// The program around the README's example: once the work on every message
// has started, the service stops (ctx is cancelled) while that work still
// runs, and acks after the stop.
const readmeMain = `package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

type Turn struct {
	Text string ` + "`json:\"text\"`" + `
}

var (
	endpoint   = os.Getenv("EXAMPLE_ENDPOINT")
	want, _    = strconv.Atoi(os.Getenv("EXAMPLE_MESSAGES"))
	started    atomic.Int64
	stopSource context.CancelFunc
)

func callModel(t Turn) string {
	if started.Add(1) == int64(want) {
		stopSource() // a normal stop, with the work in flight
	}
	time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
	return t.Text
}

func store(string) {}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	stopSource = cancel
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}
`

// TestReadmeExample (#20) compiles the README's example into a program, runs
// it against rmqfake and checks that a normal stop is not an error and that
// every message was acked.
func TestReadmeExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	block := readmeExample(t)
	if strings.Count(block, `"127.0.0.1:18081"`) != 1 {
		t.Fatal("the README's example does not name the endpoint 127.0.0.1:18081 once")
	}
	block = strings.Replace(block, `"127.0.0.1:18081"`, "endpoint", 1)
	imports := []string{`"context"`, `"github.com/rmqflow/rmqflow"`}
	for _, pkg := range []string{"sync", "log", "errors", "fmt", "time"} {
		if strings.Contains(block, pkg+".") {
			imports = append(imports, `"`+pkg+`"`)
		}
	}
	example := "package main\n\nimport (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\nfunc run(ctx context.Context) error {\n" + block + "}\n"
	dir := t.TempDir()
	gomod := fmt.Sprintf("module readmeexample\n\ngo 1.26\n\nrequire github.com/rmqflow/rmqflow v0.0.0\n\nreplace github.com/rmqflow/rmqflow => %s\n", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": readmeMain, "example.go": example} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's example does not compile: %v\n%s\n%s", err, out, example)
	}

	const n = 200
	s := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	if err := s.CreateTopic("chat", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("chat-workers", rmqfake.LiteBind("chat"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: s.Addr()}, Topic: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("session-%d", i), Body: []byte(`{"text":"hi"}`)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink.Close(ctx)

	run := exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "EXAMPLE_ENDPOINT="+s.Addr(), fmt.Sprintf("EXAMPLE_MESSAGES=%d", n))
	out, err := run.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) || err != nil {
		t.Errorf("the example exited with %v on a normal stop:\n%s", err, out)
	}
	g := s.Stats().Groups["chat-workers"]
	if g.Acked != n {
		t.Errorf("acked %d of %d messages (in flight %d); output:\n%s", g.Acked, n, g.InFlight, out)
	}
}
