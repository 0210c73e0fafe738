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
	// Start's doc: close the source even when Start fails.
	if c, st := strings.Index(block, "defer src.Close("), strings.Index(block, "src.Start("); c < 0 || st < 0 || c > st {
		t.Error("the README's example does not defer src.Close before src.Start (Close is due after a failed Start too)")
	}
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
	// One body that does not decode: the example must neither work on it
	// (its Value is the zero Turn) nor ack it (that would drop it).
	if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: "session-bad", Body: []byte(`not json`)}).Wait(ctx); err != nil {
		t.Fatal(err)
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
		t.Errorf("acked %d messages, want the %d that decoded (in flight %d); output:\n%s", g.Acked, n, g.InFlight, out)
	}
	if !strings.Contains(string(out), "undecodable") {
		t.Errorf("the example did not log the body that does not decode; output:\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, " ack ") || strings.Contains(line, "ERROR") { // a failed ack logs "ack <handle>: <error>"
			t.Errorf("the example logged a failure on a normal stop: %s", line)
		}
	}

	// A failed Start (the group does not exist) is returned as an error.
	bare := rmqfake.NewForTest(t)
	if err := bare.CreateTopic("chat", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	fail := exec.CommandContext(ctx, bin)
	fail.Env = append(os.Environ(), "EXAMPLE_ENDPOINT="+bare.Addr(), "EXAMPLE_MESSAGES=1")
	out, err = fail.CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "run:") {
		t.Errorf("the example against an unknown group: %v, want exit 1 with its error:\n%s", err, out)
	}
}

// TestReadmeExamplesPointer: the README sends readers to runnable examples
// that exist, with a command that runs them (go doc shows no examples).
func TestReadmeExamplesPointer(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if strings.Contains(readme, "go doc -all") {
		t.Error("README.md still says go doc shows the runnable examples")
	}
	if !strings.Contains(readme, "`go test -run Example -v .`") || !strings.Contains(readme, "(example_test.go)") {
		t.Error("README.md does not point to example_test.go and `go test -run Example -v .`")
	}
	ex, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(ex), "\nfunc Example"); n < 2 {
		t.Errorf("example_test.go has %d Example functions", n)
	}
	if !strings.Contains(string(ex), "// Output:") {
		t.Error("example_test.go's examples have no // Output: (go test would not check them)")
	}
}
