package rmqbenthos_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// buildConnect builds cmd/rmqflow-connect into a temporary directory.
func buildConnect(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rmqflow-connect")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/rmqflow-connect").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestConnectLintAndList: `rmqflow-connect lint` accepts every shipped
// example and refuses a config with a mistake in a rocketmq field; `list`
// shows the three components.
func TestConnectLintAndList(t *testing.T) {
	bin := buildConnect(t)
	examples, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(examples) < 3 {
		t.Fatalf("examples: %v %v", examples, err)
	}
	out, err := exec.Command(bin, append([]string{"lint"}, examples...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("lint %v: %v\n%s", examples, err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("input:\n  rocketmq:\n    endpoints: 127.0.0.1:8081\n    lite_topics: [x]\noutput:\n  drop: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "lint", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "lite_topics") {
		t.Errorf("lint of a config with an unknown field: %v\n%s; want it refused, naming the field", err, out)
	}
	for kind, name := range map[string]string{"inputs": "rocketmq", "outputs": "rocketmq", "processors": "rocketmq_ack"} {
		out, err := exec.Command(bin, "list", kind).CombinedOutput()
		if err != nil || !strings.Contains(string(out), name) {
			t.Errorf("list %s: %v; want %s in\n%s", kind, err, name, out)
		}
	}
}

// TestConnectKilledLosesNothing: rmqflow-connect copies 300 messages of 30
// lite topics to a file and is killed (SIGKILL) mid-stream; a second run
// with the same config finishes the job. Every message is in the file
// (duplicates, from the killed run's last moments, are allowed and counted),
// and nothing is left on the broker.
func TestConnectKilledLosesNothing(t *testing.T) {
	bin := buildConnect(t)
	s := fake(t)
	ctx := rmqtest.Context(t, 2*time.Minute)
	prefix := rmqtest.Unique("bkl")
	want := map[string]bool{}
	var recs []rmqflow.Record
	for i := 0; i < 300; i++ {
		body := fmt.Sprintf("%s-%03d", prefix, i)
		want[body] = true
		recs = append(recs, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", prefix, i%30), Body: []byte(body)})
	}
	send(t, ctx, s.Addr(), reqTopic, recs...)
	dir := t.TempDir()
	outFile := filepath.Join(dir, "out.txt")
	conf := filepath.Join(dir, "copy.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
http:
  enabled: false
logger:
  level: WARN
input:
  rocketmq:
    endpoints: %s
    lite:
      - topic: %s
        group: %s
    invisible_duration: 10s
    concurrency: 16
pipeline:
  processors:
    - sleep:
        duration: 5ms
output:
  file:
    path: %s
    codec: lines
`, s.Addr(), reqTopic, reqGroup, outFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := func() map[string]int {
		f, err := os.Open(outFile)
		if err != nil {
			return map[string]int{}
		}
		defer f.Close()
		got := map[string]int{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			got[sc.Text()]++
		}
		return got
	}
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", conf)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}

	first := run()
	waitFor(t, time.Minute, "the first run copied 60 messages", func() bool { return len(lines()) >= 60 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	atKill := len(lines())

	second := run()
	waitFor(t, time.Minute, "every message copied after the restart", func() bool {
		got := lines()
		for b := range want {
			if got[b] == 0 {
				return false
			}
		}
		return true
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("the second run after SIGTERM: %v, want a clean exit", err)
	}
	got := lines()
	dups := 0
	for b, n := range got {
		if !want[b] {
			t.Errorf("unexpected line %q", b)
		}
		dups += n - 1
	}
	waitFor(t, 20*time.Second, "nothing left on the broker", func() bool {
		c := s.Stats().Groups[reqGroup]
		return c.InFlight == 0 && c.Backlog == 0
	})
	t.Logf("300 messages; %d copied when killed; lost 0; duplicates %d", atKill, dups)
}
