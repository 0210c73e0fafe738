package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestLiteSettingsFromScript: the harness reads a profile's values from
// scripts/rocketmq.sh (the one place they are written down) and gives the
// emulator the same values; the default profile writes nothing.
func TestLiteSettingsFromScript(t *testing.T) {
	repo, err := findRepo("")
	if err != nil {
		t.Fatal(err)
	}
	def, err := profileSettings(repo, "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(def) != 0 {
		t.Errorf("the default profile has settings %v, want none (the 5.5.0 defaults)", def)
	}
	many, err := profileSettings(repo, "many")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"maxClientEventCount", "liteEventCheckInterval", "liteEventFullDispatchDelayTimeForWildcardGroup"} {
		if many[k] == "" {
			t.Errorf("the many profile does not set %s: %v", k, many)
		}
	}
	t.Setenv("RMQ_MAX_CLIENT_EVENT_COUNT", "7") // an override of the caller's is not the profile
	if again, err := profileSettings(repo, "many"); err != nil || again["maxClientEventCount"] != many["maxClientEventCount"] {
		t.Errorf("with RMQ_MAX_CLIENT_EVENT_COUNT=7 in the environment the many profile read %v (%v), want %v", again, err, many)
	}
	if _, err := profileSettings(repo, "bogus"); err == nil || !strings.Contains(err.Error(), "want one of: default many") {
		t.Errorf("an unknown profile: %v, want the script's refusal", err)
	}
	opts, ignored, err := fakeLiteOptions(many)
	if err != nil || len(opts) != 3 {
		t.Errorf("rmqfake options for %v: %d (%v), want 3", many, len(opts), err)
	}
	for _, k := range ignored {
		if k == "maxClientEventCount" || k == "liteEventCheckInterval" {
			t.Errorf("%s is modelled by rmqfake but was ignored", k)
		}
	}
	if _, _, err := fakeLiteOptions(map[string]string{"maxClientEventCount": "lots"}); err == nil {
		t.Error("a value that is not a number was accepted")
	}
}

func TestParseLiteSettings(t *testing.T) {
	conf := "brokerName=broker-a\n# Lite topic TTL\nminLiteTTl=0\n# Lite dispatch (RMQ_LITE_PROFILE=many).\nmaxClientEventCount=20000\n\nliteEventCheckInterval = 1000\n"
	got := parseLiteSettings(conf)
	if len(got) != 2 || got["maxClientEventCount"] != "20000" || got["liteEventCheckInterval"] != "1000" {
		t.Errorf("parsed %v", got)
	}
	if got := parseLiteSettings("brokerName=a\nminLiteTTl=0\n"); len(got) != 0 {
		t.Errorf("a conf without lite dispatch lines parsed as %v", got)
	}
	if s := formatLiteSettings(nil); s != "the 5.5.0 defaults" {
		t.Errorf("formatLiteSettings(nil) = %q", s)
	}
}

// TestPlanLiteProfiles: the topics scenario runs once per profile; every
// other scenario under the first; the later profiles' steps come last, so
// that the broker changes profile once; cells of different profiles do not
// mix.
func TestPlanLiteProfiles(t *testing.T) {
	cfg, err := parseConfig([]string{"-emulator", "-scenarios", "drain,topics,handler", "-topic-counts", "100,10000", "-peers", "rmqflow/loop,raw/raw", "-seed", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.liteProfiles, ",") != "default,many" {
		t.Fatalf("-lite-profiles defaults to %v, want default,many", cfg.liteProfiles)
	}
	b := &bench{cfg: cfg, rng: rand.New(rand.NewPCG(3, 4)), stamp: "0101-000000"}
	steps := b.plan()
	keys := map[string]bool{}
	topics := map[string]int{}
	seenMany := false
	for _, s := range steps {
		for _, r := range s.runs {
			if r.Profile != s.profile {
				t.Errorf("run %s has profile %q in a step of %q", r.ID, r.Profile, s.profile)
			}
			if keys[r.Key()] && r.Scenario == scTopics {
				t.Errorf("two topics runs share the key %s", r.Key())
			}
			keys[r.Key()] = true
			if r.Scenario == scTopics {
				topics[r.Profile]++
			} else if r.Profile != "default" {
				t.Errorf("a %s run under %q, want the first profile", r.Scenario, r.Profile)
			}
		}
		if s.profile == "many" {
			seenMany = true
		} else if seenMany {
			t.Errorf("a %q step after the many steps: the broker would change profile twice", s.profile)
		}
	}
	// 2 counts × 2 peers, each peer on the emulator a step of its own.
	if topics["default"] != 4 || topics["many"] != 4 {
		t.Errorf("topics runs per profile %v, want 4 each", topics)
	}
	if _, err := parseConfig([]string{"-emulator", "-lite-profiles", "many,many"}, io.Discard); err == nil {
		t.Error("a repeated profile was accepted")
	}
}

// TestHarnessLiteProfilesOnEmulator runs the topics scenario under both
// profiles on the emulator: a new rmqfake with the many profile's values,
// both runs recorded with their profile, and the side-by-side table.
func TestHarnessLiteProfilesOnEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the peers: not in -short")
	}
	out := t.TempDir()
	report := filepath.Join(out, "report.md")
	var stdout, stderr bytes.Buffer
	// 300 lite topics and 600 messages: beyond the default event set of
	// 100, so the default run needs full dispatches; the many one not.
	code := run1([]string{"-emulator", "-scenarios", "topics", "-topic-counts", "300", "-peers", "rmqflow/loop",
		"-window", "30s", "-window-messages", "1200", "-warmup", "0", "-out", out, "-report", report}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("harness exit %d\nstderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "lite profile many on a new rmqfake: ") || !strings.Contains(stderr.String(), "maxClientEventCount=") {
		t.Errorf("the log does not say the emulator changed profile:\n%s", stderr.String())
	}
	f, err := os.Open(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]time.Duration{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Profile string `json:"lite_profile"`
			Result  result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if line.Result.Error != "" || line.Result.Messages <= 0 {
			t.Errorf("%s: %+v", line.Profile, line.Result)
		}
		got[line.Profile] = time.Duration(line.Result.Startup * float64(time.Second))
	}
	if len(got) != 2 {
		t.Fatalf("runs by profile %v, want default and many", got)
	}
	rep, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### Side by side", "`many` ÷ `default`", "Lite dispatch profile `many`: ", "maxClientEventCount="} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

// fakeScriptRepo is a checkout whose scripts/rocketmq.sh stands in for a
// broker: conf (and profiles) are the real script's; up "starts" a broker
// by writing the lite lines the real conf prints under its environment
// (what the real lite would print afterwards), and every down and up is
// logged with the RMQ_ variables it ran with. It returns the repo and a
// function that reads the log. The broker "found" at the start was started
// with env.
func fakeScriptRepo(t *testing.T, env ...string) (string, func() string) {
	t.Helper()
	real, err := findRepo("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `#!/usr/bin/env bash
set -eu
real=` + filepath.Join(real, "scripts", "rocketmq.sh") + `
state=` + state + `
case "$1" in
  conf|profiles) exec "$real" "$@" ;;
  lite) cat "$state/lite" ;;
  down) echo down >>"$state/calls"; : >"$state/lite" ;;
  up)
    echo "up $(env | grep -E '^RMQ_(LITE_PROFILE|MAX_CLIENT_EVENT_COUNT|LITE_EVENT_CHECK_MS|LITE_FULL_DISPATCH_DELAY_MS|LITE_CLIENT_FULL_DISPATCH_DELAY_MS|STORE_TYPE)=' | sort | tr '\n' ' ' | sed 's/ $//')" >>"$state/calls"
    "$real" conf | sed -n '/^# Lite dispatch/,$p' | grep -v '^#' >"$state/lite" || true ;;
  pids) echo "namesrv $PPID"; echo "broker $PPID"; echo "proxy $PPID" ;;
  *) exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "scripts", "rocketmq.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The broker the run finds.
	up := exec.Command(filepath.Join(dir, "scripts", "rocketmq.sh"), "up")
	up.Env = append(os.Environ(), env...)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("starting the found broker: %v: %s", err, out)
	}
	if err := os.Remove(filepath.Join(state, "calls")); err != nil {
		t.Fatal(err)
	}
	return dir, func() string {
		b, _ := os.ReadFile(filepath.Join(state, "calls"))
		return string(b)
	}
}

// TestRestoreProfileByName: a broker found running with the many profile
// (whose settings include storeType and persistConsumerOffsetIncrementally,
// which no single variable of scripts/rocketmq.sh sets) is restored by its
// profile's name after the run switched it to default; a broker found with
// settings of no profile is left as the run's last profile, and the log and
// the report say so.
func TestRestoreProfileByName(t *testing.T) {
	for _, k := range []string{"RMQ_LITE_PROFILE", "RMQ_MAX_CLIENT_EVENT_COUNT", "RMQ_LITE_EVENT_CHECK_MS", "RMQ_LITE_FULL_DISPATCH_DELAY_MS", "RMQ_LITE_CLIENT_FULL_DISPATCH_DELAY_MS", "RMQ_STORE_TYPE", "RMQ_BROKER_CONF"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	ctx := context.Background()
	t.Run("many", func(t *testing.T) {
		repo, calls := fakeScriptRepo(t, "RMQ_LITE_PROFILE=many")
		var log bytes.Buffer
		b := &bench{cfg: config{repo: repo}, log: &log, tgt: &target{repo: repo}}
		changed, err := b.useProfile(ctx, "default")
		if err != nil || !changed {
			t.Fatalf("useProfile(default) on a many broker: changed %v, %v\n%s", changed, err, log.String())
		}
		if changed, err := b.useProfile(ctx, "many"); err != nil || !changed {
			t.Fatalf("useProfile(many): changed %v, %v\n%s", changed, err, log.String())
		}
		if _, err := b.useProfile(ctx, "default"); err != nil {
			t.Fatal(err)
		}
		if err := b.restoreProfile(ctx); err != nil {
			t.Fatalf("restoreProfile: %v\n%s", err, log.String())
		}
		b.tgt.cpu.close()
		got := strings.Split(strings.TrimSpace(calls()), "\n")
		want := []string{"down", "up RMQ_LITE_PROFILE=default", "down", "up RMQ_LITE_PROFILE=many", "down", "up RMQ_LITE_PROFILE=default", "down", "up RMQ_LITE_PROFILE=many"}
		if !slices.Equal(got, want) {
			t.Errorf("the script ran\n%q\nwant\n%q\nlog:\n%s", got, want, log.String())
		}
		if !strings.Contains(log.String(), "restarting the broker with the lite profile it had, many") {
			t.Errorf("the log does not name the profile restored:\n%s", log.String())
		}
		if b.restoreNote != "" {
			t.Errorf("a note for a restored broker: %q", b.restoreNote)
		}
	})
	t.Run("no profile", func(t *testing.T) {
		repo, calls := fakeScriptRepo(t, "RMQ_LITE_PROFILE=many", "RMQ_MAX_CLIENT_EVENT_COUNT=7")
		var log bytes.Buffer
		b := &bench{cfg: config{repo: repo}, log: &log, tgt: &target{repo: repo}}
		if _, err := b.useProfile(ctx, "default"); err != nil {
			t.Fatal(err)
		}
		if err := b.restoreProfile(ctx); err != nil {
			t.Fatalf("restoreProfile: %v", err)
		}
		b.tgt.cpu.close()
		if got := strings.Count(calls(), "up "); got != 1 {
			t.Errorf("%d starts, want 1 (the default profile; none to restore):\n%s", got, calls())
		}
		for _, want := range []string{"maxClientEventCount=7", "no profile of scripts/rocketmq.sh", "left running with the lite profile default"} {
			if !strings.Contains(log.String(), want) || !strings.Contains(b.restoreNote, want) {
				t.Errorf("the log and the report note do not say %q:\nlog: %s\nnote: %s", want, log.String(), b.restoreNote)
			}
		}
	})
}

// topicsOnEmulator runs the topics scenario on the emulator at counts
// (under the many profile only, one peer) and returns its results.jsonl
// lines and report.
func topicsOnEmulator(t *testing.T, counts string) ([]map[string]any, string) {
	t.Helper()
	out := t.TempDir()
	report := filepath.Join(out, "report.md")
	var stdout, stderr bytes.Buffer
	code := run1([]string{"-emulator", "-scenarios", "topics", "-topic-counts", counts, "-lite-profiles", "many", "-peers", "rmqflow/loop",
		"-window", "30s", "-window-messages", "200", "-warmup", "0", "-out", out, "-report", report}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("harness exit %d\nstderr:\n%s", code, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	rep, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	return lines, string(rep)
}

// TestTopicsFillEveryLiteTopic: a topics step named N lite topics puts a
// message in each of the N, whatever its window's backlog (200 messages
// here: a backlog of 5,110 before, so 6,000 lite topics were 5,110), and
// the report says how many lite topics were filled, counted on rmqfake.
func TestTopicsFillEveryLiteTopic(t *testing.T) {
	cfg, err := parseConfig([]string{"-emulator", "-scenarios", "topics", "-topic-counts", "100,1000000", "-peers", "rmqflow/loop,raw/raw"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: cfg, rng: rand.New(rand.NewPCG(1, 2)), stamp: "0101-000000"}
	for _, s := range b.plan() {
		if s.backlog != nil && s.backlog.Messages < s.backlog.LiteTopics {
			t.Errorf("a backlog of %d messages for %d lite topics", s.backlog.Messages, s.backlog.LiteTopics)
		}
	}
	if testing.Short() {
		t.Skip("builds the peers: not in -short")
	}
	lines, rep := topicsOnEmulator(t, "100,6000")
	filled := map[float64]float64{}
	for _, l := range lines {
		f, _ := l["lite_topics_filled"].(float64)
		filled[l["lite_topics"].(float64)] = f
	}
	if filled[100] != 100 || filled[6000] != 6000 {
		t.Errorf("lite topics filled by count %v, want 100 and 6000", filled)
	}
	if !strings.Contains(rep, "| lite topics filled |") || !strings.Contains(rep, "| 6,000 | 6,000 |") {
		t.Errorf("the report does not give the lite topics filled:\n%s", rep)
	}
}

// TestTopicsReportEmulatorMemory: on the emulator the topics table gives
// rmqfake's heap after each backlog, per message and per lite topic (issue
// 25 point 3: 1,000,000 lite topics on rmqfake "with its memory reported").
func TestTopicsReportEmulatorMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the peers: not in -short")
	}
	lines, rep := topicsOnEmulator(t, "100,6000")
	for _, l := range lines {
		heap, _ := l["emulator_heap_bytes"].(float64)
		bl, _ := l["emulator_backlog_heap_bytes"].(float64)
		// 6,000 or 5,110 messages of 1 KiB: the backlog's heap holds at
		// least their bodies, and the heap at least the backlog.
		if bl < 5000*1024 || heap < bl {
			t.Errorf("%v lite topics: heap %v B, backlog %v B", l["lite_topics"], heap, bl)
		}
	}
	// The rate at each count as a share of the smallest count's, with one
	// profile too (issue 25: 1,000,000 within 20% of 100 on rmqfake).
	for _, want := range []string{"rmqfake heap MB", "backlog B/msg", "B per lite topic", "× the same profile's rate at 100 lite topics", "| `rmqflow/loop` | 6,000 | "} {
		if !strings.Contains(rep, want) {
			t.Errorf("the report lacks %q:\n%s", want, rep)
		}
	}
}

// TestBacklogOnASlowBroker: a broker that answers sends in 4 s (a freshly
// restarted one on a loaded machine: 2026-12-03, the warm-up after `make
// bench-quick` started the broker failed with "SendMessage: DeadlineExceeded"
// while the proxy logged the sends answered OK after the client gave up)
// still gets its backlog: the harness's producer is not what it measures,
// and waits longer than a client's default 3 s.
func TestBacklogOnASlowBroker(t *testing.T) {
	fake, err := rmqfake.New(rmqfake.Addr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Stop()
	if err := fake.CreateTopic("slow", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	fake.SetFault("SendMessage", rmqfake.Fault{Latency: 4 * time.Second})
	tgt := &target{endpoint: fake.Addr(), fake: fake}
	if _, err := tgt.produceBacklog(context.Background(), "slow", "lite", "slow", 40, 20, 16); err != nil {
		t.Fatalf("a backlog on a broker answering in 4 s: %v", err)
	}
	if got := fake.Stats().Topics["slow"].Sent; got != 40 {
		t.Errorf("%d stored, want 40", got)
	}
}
