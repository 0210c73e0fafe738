package rmqio

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// example builds examples/<name> and returns the binary's path.
func example(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "./examples/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// exampleFake is rmqfake with the examples' fixtures, as the examples'
// comments start it (`rmqflow broker -fast-lite-dispatch -fixtures …`).
func exampleFake(t *testing.T) *rmqfake.Server {
	t.Helper()
	fs, err := rmqfake.LoadFixtures("examples/fixtures.txt")
	if err != nil {
		t.Fatal(err)
	}
	return rmqfake.NewForTest(t, rmqfake.WithFixtures(fs...), rmqfake.FastLiteDispatch())
}

// runExample runs bin until it ends by itself (its -stop-after-idle) and
// returns its standard output.
func runExample(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestExampleLitework: litework, run as its comment says against rmqfake,
// works every message once in the order of its conversation's turns (Beam
// state per lite topic), and acks every one.
func TestExampleLitework(t *testing.T) {
	bin := example(t, "litework")
	s := exampleFake(t)
	const n, lites = 60, 4
	produce(t, s.Addr(), "agents", "chat", n, lites)
	out := runExample(t, bin, "-rmq-endpoints", s.Addr(), "-stop-after-idle", "3s")
	line := regexp.MustCompile(`^(chat-l\d+) turn (\d+): (chat-\d+)$`)
	turns := map[string][]int{}
	bodies := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("unexpected output line %q", sc.Text())
		}
		k, _ := strconv.Atoi(m[2])
		turns[m[1]] = append(turns[m[1]], k)
		bodies[m[3]] = true
	}
	if len(bodies) != n {
		t.Fatalf("worked %d distinct messages of %d:\n%s", len(bodies), n, out)
	}
	for lite, ks := range turns {
		seen := map[int]bool{}
		for _, k := range ks {
			seen[k] = true
		}
		for k := 1; k <= n/lites; k++ {
			if !seen[k] {
				t.Fatalf("%s: turns %v lack turn %d (the state per conversation is wrong)", lite, ks, k)
			}
		}
	}
	if st := s.Stats().Topics["agents"]; st.Acked != n {
		t.Fatalf("acked %d of %d messages", st.Acked, n)
	}
}

// TestExampleLiteworkKilledAndRerun: litework SIGKILLed mid-stream (after
// some of its acks) and run again loses nothing: what the first process had
// read and not acked comes back after its invisibility, and the rerun works
// and acks it. Duplicates are counted, not hidden.
func TestExampleLiteworkKilledAndRerun(t *testing.T) {
	bin := example(t, "litework")
	s := exampleFake(t)
	const n, lites = 300, 5
	produce(t, s.Addr(), "agents", "chat", n, lites)
	var out1 bytes.Buffer
	first := exec.Command(bin, "-rmq-endpoints", s.Addr(), "-invisible-duration", "10s")
	first.Stdout, first.Stderr = &out1, io.Discard
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for s.Stats().Topics["agents"].Acked < 30 {
		if time.Now().After(deadline) {
			_ = first.Process.Kill()
			t.Fatalf("litework acked %d messages in 2 min", s.Stats().Topics["agents"].Acked)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = first.Process.Kill() // mid-stream: no Close, no give-back
	_ = first.Wait()
	ackedAtKill := s.Stats().Topics["agents"].Acked
	if ackedAtKill >= n {
		t.Fatalf("the first run acked all %d messages before it was killed: not mid-stream", n)
	}
	// The rerun waits out the 10 s invisibility of what the first had read.
	out2 := runExample(t, bin, "-rmq-endpoints", s.Addr(), "-invisible-duration", "10s", "-stop-after-idle", "15s")
	line := regexp.MustCompile(`^chat-l\d+ turn \d+: (chat-\d+)$`)
	count := func(out []byte) map[string]int {
		worked := map[string]int{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if m := line.FindStringSubmatch(sc.Text()); m != nil {
				worked[m[1]]++
			}
		}
		return worked
	}
	before, rerun := count(out1.Bytes()), count(out2)
	dups := 0
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("chat-%d", i)
		if before[body]+rerun[body] == 0 {
			t.Fatalf("chat-%d was never worked (acked %d at the kill)", i, ackedAtKill)
		}
		if rerun[body] > 1 {
			t.Fatalf("the rerun, never killed, worked chat-%d %d times", i, rerun[body])
		}
		if before[body] > 1 {
			t.Fatalf("the first run worked chat-%d %d times before its kill", i, before[body])
		}
		if before[body] == 1 && rerun[body] == 1 {
			dups++
		}
	}
	st := s.Stats()
	acked := st.Topics["agents"].Acked
	t.Logf("killed after %d acks; the first run worked %d messages, the rerun %d; %d worked twice; %d acks in all",
		ackedAtKill, len(before), len(rerun), dups, acked)
	// Nothing is left: no backlog, nothing in flight. An ack is counted
	// each time it takes effect, so a message acked before the kill and
	// redelivered (its lite topic's offset commits only up to the first
	// unacked message of the popped batch) is counted twice: at least n.
	g, ok := st.Groups["agents-g"]
	if !ok {
		t.Fatalf("rmqfake reports no group agents-g: %v", st.Groups)
	}
	if g.Backlog != 0 || g.InFlight != 0 || acked < n {
		t.Fatalf("after the rerun: group agents-g %+v, %d acks of %d messages", g.Counts, acked, n)
	}
	if acked-int64(n) > int64(dups) {
		t.Fatalf("%d acks for %d messages of which %d were worked twice", acked, n, dups)
	}
}

// TestExampleWindowcount: windowcount counts every message in exactly one
// window's record, writes each record, and acks the messages only after
// their record is stored.
func TestExampleWindowcount(t *testing.T) {
	bin := example(t, "windowcount")
	s := exampleFake(t)
	const n, lites = 90, 3
	produce(t, s.Addr(), "agents", "conv", n, lites)
	out := runExample(t, bin, "-rmq-endpoints", s.Addr(), "-stop-after-idle", "3s", "-window", "1s", "-watermark-lag", "1s")
	type count struct {
		LiteTopic string `json:"liteTopic"`
		Messages  int    `json:"messages"`
	}
	total, records := 0, 0
	perLite := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var c count
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		total += c.Messages
		perLite[c.LiteTopic] += c.Messages
		records++
	}
	if total != n {
		t.Fatalf("the records count %d messages of %d:\n%s", total, n, out)
	}
	for l := 0; l < lites; l++ {
		if lite := fmt.Sprintf("conv-l%d", l); perLite[lite] != n/lites {
			t.Errorf("%s: counted %d, want %d", lite, perLite[lite], n/lites)
		}
	}
	st := s.Stats()
	if got := st.Topics["counts"].Sent; got != int64(records) {
		t.Fatalf("stored %d records, printed %d", got, records)
	}
	if got := st.Topics["agents"].Acked; got != n {
		t.Fatalf("acked %d of %d messages", got, n)
	}
}
