package officialclient_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The official Java client 5.2.0 (rmqfake/officialclient_java, a Maven
// project this test builds) runs the flows below against rmqfake, served by
// `rmqflow broker` as another language's test suite would start it, and
// against the real broker ($RMQFLOW_ENDPOINT). Each flow is one JVM that
// prints one JSON line of what the client saw; the same assertions hold on
// both targets, so a difference between them fails the test.

// javaFlowTimeout is each flow's own deadline (the program's --timeout); the
// process gets javaFlowSlack more to start, close and print.
const (
	javaFlowTimeout = 60 * time.Second
	javaFlowSlack   = 30 * time.Second
	// javaParallel bounds the JVMs running at once (each takes a core while
	// it starts).
	javaParallel = 4
)

// javaFlow is one flow of the Java program and what its JSON must say.
type javaFlow struct {
	name    string
	check   func(t *testing.T, run string, r map[string]any)
	timeout time.Duration // 0: javaFlowTimeout
}

// javaFlows: see rmqfake/officialclient_java/.../Flows.java for what each
// does. The numbers (10 messages, message 3 nacked; 30 messages, message 7
// failed once) are the program's.
var javaFlows = []javaFlow{
	{name: "lite-push-wildcard", check: func(t *testing.T, run string, r map[string]any) {
		// A wildcard group, the 5.2.0 client as shipped: every message once,
		// nothing before the client's first COMPLETE_ADD sync, 30 s after
		// its start (rmqfake: at once after it, as with -fast-lite-dispatch;
		// RocketMQ 5 to 15 s after it).
		want := map[string]string{}
		for i := range 10 {
			want[strconv.Itoa(i)] = "[1]"
		}
		checkAttempts(t, "attempts", r["attempts"], want)
		if ms, _ := r["first_ms"].(float64); ms < 29000 {
			t.Errorf("first delivery %v ms after the consumer started, want none before its first subscription sync at 30 s", r["first_ms"])
		}
	}, timeout: 80 * time.Second},
	{name: "lite-push-retry", check: func(t *testing.T, run string, r map[string]any) {
		// An exact lite group that is not FIFO: the client nacks each failed
		// message with ChangeInvisibleDuration(1 s) and no lite topic, which
		// RocketMQ 5.5.0 answers without applying it to the lite topic; the
		// proxy stops renewing the message, so it comes back when the 60 s
		// of its auto_renew pop end (observed 59.7 to 60.2 s after the
		// failure), with attempt 2, and is consumed. rmqfake before the fix:
		// held for its 3 h, never back.
		want := map[string]string{}
		for i := range 20 {
			want[strconv.Itoa(i)] = "[1 2]"
		}
		checkAttempts(t, "attempts", r["attempts"], want)
		if r["consumed"] != 20.0 {
			t.Errorf("consumed %v of 20", r["consumed"])
		}
		back, _ := r["back_ms"].(map[string]any)
		for k, v := range back {
			if ms, _ := v.(float64); ms < 50000 || ms > 75000 {
				t.Errorf("message %s back %v ms after its failure, want 50000..75000 (the proxy's 60 s pop invisibility, not the 1 s nack)", k, v)
			}
		}
	}, timeout: 100 * time.Second},
	{name: "producer-simple", check: func(t *testing.T, run string, r map[string]any) {
		// Normal: every message once, message 3 nacked (1 s) and back as attempt 2.
		want := map[string]string{}
		for i := range 10 {
			want[strconv.Itoa(i)] = "[1]"
		}
		want["3"] = "[1 2]"
		checkAttempts(t, "normal_attempts", r["normal_attempts"], want)
		// FIFO: the order sent, each with its message group.
		checkOrder(t, "fifo_order", r["fifo_order"], 10)
		if r["fifo_group_ok"] != true {
			t.Errorf("fifo_group_ok %v: a FIFO message came without its message group", r["fifo_group_ok"])
		}
		// Delay (3 s): each once, with the delivery timestamp sent, not
		// before it. The broker's timer wheel files a message under its
		// time rounded down to the second (timerPrecisionMs 1000), so up to
		// a second early is the broker's own precision.
		delay, _ := r["delay"].([]any)
		var bodies []string
		for _, d := range delay {
			m, _ := d.(map[string]any)
			bodies = append(bodies, fmt.Sprint(m["body"]))
			late, _ := m["lateness_ms"].(float64)
			if m["attempt"] != 1.0 || m["timestamp_ok"] != true || late < -1000 || late > 15000 {
				t.Errorf("delay message %v: attempt %v, timestamp_ok %v, %v ms after its delivery time; want attempt 1, its timestamp, -1000..15000 ms",
					m["body"], m["attempt"], m["timestamp_ok"], m["lateness_ms"])
			}
		}
		slices.Sort(bodies)
		if !slices.Equal(bodies, []string{"0", "1", "2"}) {
			t.Errorf("delay messages %v, want 0, 1, 2 once each", bodies)
		}
	}},
	{name: "push", check: func(t *testing.T, run string, r map[string]any) {
		checkFailedOnce(t, r)
	}},
	{name: "lite-push", check: func(t *testing.T, run string, r map[string]any) {
		if lt, _ := r["lite_topics"].([]any); len(lt) != 1 || lt[0] != run {
			t.Errorf("lite topics subscribed %v, want [%s]", r["lite_topics"], run)
		}
		checkFailedOnce(t, r)
		// One consumption thread, FIFO lite group: first deliveries in send order.
		checkOrder(t, "first", r["first"], 30)
		// After unsubscribeLite(run) (and subscribing run-m): a message to
		// run is not delivered, one to run-m is.
		if lt, _ := r["lite_topics_after"].([]any); len(lt) != 1 || lt[0] != run+"-m" {
			t.Errorf("lite topics after the unsubscribe %v, want [%s-m]", r["lite_topics_after"], run)
		}
		if got := fmt.Sprint(r["after_unsubscribe"]); got != "[marker]" {
			t.Errorf("received after the unsubscribe %s, want [marker] (not the message sent to the unsubscribed lite topic)", got)
		}
	}},
	{name: "dlq", check: func(t *testing.T, run string, r map[string]any) {
		// Normal: the proxy dead-letters it when it comes back past its 2
		// attempts; the DLQ copy has one more reconsume than the retry copy
		// (2 + 1), so a reader sees attempt 4. FIFO: the client forwards it
		// after its 2 local attempts; the copy of the stored message
		// (reconsume 0) is read as attempt 2; the message behind it in its
		// message group is consumed after that.
		for part, attempt := range map[string]float64{"normal": 4, "fifo": 2} {
			p, _ := r[part].(map[string]any)
			for _, k := range []string{"attempts", "attempts_later"} {
				if got := fmt.Sprint(p[k]); got != "[1 2]" {
					t.Errorf("%s: %s %s, want [1 2] (failed twice, then not again)", part, k, got)
				}
			}
			d, _ := p["dlq"].(map[string]any)
			group := map[string]string{"normal": "rmqflow-official-java-dlq-g", "fifo": "rmqflow-official-java-dlqfifo-g"}[part]
			if d["topic"] != "%DLQ%"+group || d["body"] != "x" || d["keys_ok"] != true || d["attempt"] != attempt {
				t.Errorf("%s: the DLQ copy read back %v; want topic %%DLQ%%%s, body x, the run's keys, attempt %v", part, d, group, attempt)
			}
		}
		if p, _ := r["fifo"].(map[string]any); p["next_after_dlq"] != true {
			t.Errorf("fifo: next_after_dlq %v: the next message of the group was not consumed after the failed one left", p["next_after_dlq"])
		}
	}},
	{name: "transaction", check: func(t *testing.T, run string, r map[string]any) {
		// Committed: delivered; rolled back: never; left open: checked
		// (the checker commits it) and delivered.
		got := fmt.Sprint(r["received"])
		if got != "[commit:1 open:1]" && got != "[open:1 commit:1]" {
			t.Errorf("received %s (body:attempt), want commit:1 and open:1", got)
		}
		checked, _ := r["checked"].([]any)
		if len(checked) == 0 || slices.ContainsFunc(checked, func(c any) bool { return c != "open" }) {
			t.Errorf("the checker was asked about %v, want the open transaction only", checked)
		}
	}},
	{name: "recall", check: func(t *testing.T, run string, r map[string]any) {
		if r["recall_handle"] != true {
			t.Errorf("the delay message's send receipt had no recall handle")
		}
		if e, _ := r["recall_error"].(string); e != "" {
			hint := ""
			if strings.Contains(e, "operation is forbidden") {
				hint = " (RocketMQ 5.5.0 recalls only with recallMessageEnable=true, which scripts/rocketmq.sh sets: a broker started before that change needs a restart)"
			}
			t.Errorf("recall: %s%s", e, hint)
		}
		if got := fmt.Sprint(r["received"]); got != "[marker]" {
			t.Errorf("received %s, want only the marker (the recalled message never)", got)
		}
	}},
}

// checkFailedOnce: 30 messages consumed, message 7 failed on attempt 1 and
// consumed on attempt 2, every other one delivered once.
func checkFailedOnce(t *testing.T, r map[string]any) {
	t.Helper()
	if r["consumed"] != 30.0 {
		t.Errorf("consumed %v of 30", r["consumed"])
	}
	want := map[string]string{}
	for i := range 30 {
		want[strconv.Itoa(i)] = "[1]"
	}
	want["7"] = "[1 2]"
	checkAttempts(t, "attempts", r["attempts"], want)
}

func checkAttempts(t *testing.T, field string, v any, want map[string]string) {
	t.Helper()
	got, _ := v.(map[string]any)
	for k, w := range want {
		if g := fmt.Sprint(got[k]); g != w {
			t.Errorf("%s: message %s delivered with attempts %s, want %s", field, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected message %s", field, k)
		}
	}
}

// checkOrder: v is 0..n-1 in order.
func checkOrder(t *testing.T, field string, v any, n int) {
	t.Helper()
	want := make([]string, n)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	var got []string
	l, _ := v.([]any)
	for _, x := range l {
		got = append(got, fmt.Sprint(x))
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s %v, want 0..%d in send order", field, got, n-1)
	}
}

// TestOfficialJavaFlows runs every flow of the official Java client against
// rmqfake (`rmqflow broker -fixtures scripts/rocketmq/fixtures.txt`) and the
// real broker, at most javaParallel JVMs at a time.
func TestOfficialJavaFlows(t *testing.T) {
	real := os.Getenv("RMQFLOW_ENDPOINT")
	if real == "" {
		t.Fatal("RMQFLOW_ENDPOINT is not set: run through `make test` (scripts/test.sh), which starts RocketMQ")
	}
	repo := repoRoot(t)
	jar := buildJavaFlows(t, repo)
	fake := startRmqflowBroker(t, repo)
	sem := make(chan struct{}, javaParallel)
	for _, target := range []struct{ name, ep string }{{"rmqfake", fake}, {"rocketmq", real}} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			for _, f := range javaFlows {
				t.Run(f.name, func(t *testing.T) {
					t.Parallel()
					sem <- struct{}{}
					defer func() { <-sem }()
					run := fmt.Sprintf("java-%s-%s-%d", target.name, f.name, time.Now().UnixNano())
					timeout := f.timeout
					if timeout == 0 {
						timeout = javaFlowTimeout
					}
					r := runJavaFlow(t, jar, target.ep, f.name, run, timeout)
					f.check(t, run, r)
				})
			}
		})
	}
}

// repoRoot is the rmqflow repository this module sits in (../..).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "rocketmq", "fixtures.txt")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

// buildJavaFlows builds rmqfake/officialclient_java with Maven into
// <repo>/.cache/officialclient-java (outside git) unless the jar there was
// built from the same sources, and returns the jar. Maven runs offline first
// (the dependencies are usually in ~/.m2 already), then online. Java and
// Maven are required: the Java client's flows are part of the test suite.
func buildJavaFlows(t *testing.T, repo string) string {
	t.Helper()
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (%v): the official Java client's flows need a JDK 17 and Maven on PATH", tool, err)
		}
	}
	src := filepath.Join(repo, "rmqfake", "officialclient_java")
	cache := filepath.Join(repo, ".cache", "officialclient-java")
	jar := filepath.Join(cache, "target", "rmqflow-official-java.jar")
	sum := javaSourceHash(t, src)
	stamp := filepath.Join(cache, "sources.sha256")
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		if _, err := os.Stat(jar); err == nil {
			return jar
		}
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	args := []string{"-q", "-B", "-f", filepath.Join(src, "pom.xml"), "-Dflows.buildDir=" + filepath.Join(cache, "target"), "package"}
	out, err := exec.Command("mvn", append([]string{"-o"}, args...)...).CombinedOutput()
	if err != nil {
		t.Logf("mvn -o (offline) failed, building online: %v\n%s", err, lastLines(string(out), 20))
		if out, err = exec.Command("mvn", args...).CombinedOutput(); err != nil {
			t.Fatalf("mvn package %s: %v\n%s", src, err, lastLines(string(out), 60))
		}
	}
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", jar, time.Since(t0).Round(time.Millisecond))
	return jar
}

// javaSourceHash hashes pom.xml and everything under src/.
func javaSourceHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	add := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
		return nil
	}
	if err := add(filepath.Join(dir, "pom.xml")); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(filepath.Join(dir, "src"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return add(path)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// startRmqflowBroker builds cmd/rmqflow and starts `rmqflow broker` on a
// free port with the project's fixtures, as another language's suite would
// (docs/rmqfake.md), and returns the endpoint it prints. -v logs the
// server's errors; they are shown if the test fails.
func startRmqflowBroker(t *testing.T, repo string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rmqflow")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rmqflow")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rmqflow: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "broker", "-listen", "127.0.0.1:0", "-fixtures", filepath.Join(repo, "scripts", "rocketmq", "fixtures.txt"),
		"-fast-lite-dispatch", "-json", "-v")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("rmqflow broker did not stop within 10 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("rmqflow broker stderr:\n%s", lastLines(stderr.String(), 40))
		}
	})
	var l string
	select {
	case l = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("rmqflow broker printed nothing in 30 s")
	}
	var hello struct {
		Listening string `json:"listening"`
	}
	if err := json.Unmarshal([]byte(l), &hello); err != nil || hello.Listening == "" {
		t.Fatalf("rmqflow broker's first line %q (%v); stderr:\n%s", l, err, stderr.String())
	}
	return hello.Listening
}

// runJavaFlow runs one flow and returns its JSON line; the client's log and
// the program's stderr are shown if the test fails.
func runJavaFlow(t *testing.T, jar, ep, flow, run string, timeout time.Duration) map[string]any {
	t.Helper()
	logs := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+javaFlowSlack)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", "-jar", jar, "--endpoint", ep, "--flow", flow, "--run", run,
		"--timeout", fmt.Sprintf("%ds", int(timeout.Seconds())), "--logs", logs)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("java stderr:\n%s", lastLines(stderr.String(), 30))
			_ = filepath.WalkDir(logs, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					if b, err := os.ReadFile(p); err == nil {
						t.Logf("client log %s (last lines):\n%s", filepath.Base(p), lastLines(string(b), 60))
					}
				}
				return nil
			})
		}
	})
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r map[string]any
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &r); jerr != nil {
		t.Fatalf("flow %s on %s: %v, output %q: %v", flow, ep, err, stdout.String(), jerr)
	}
	ms, _ := r["elapsed_ms"].(float64)
	t.Logf("flow %s on %s: %s in the flow, %s in all", flow, ep, time.Duration(ms)*time.Millisecond, time.Since(t0).Round(time.Millisecond))
	if r["error"] != nil || err != nil {
		t.Errorf("flow %s on %s: %v (exit: %v); it saw %s", flow, ep, r["error"], err, lastLines(stdout.String(), 1))
	}
	return r
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// lockedBuffer is a bytes.Buffer safe for a child's writes and our reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
