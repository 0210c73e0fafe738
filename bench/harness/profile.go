package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The emulator's CPU targets (10 µs per message, 100,000 msg/s, 1,000,000
// lite topics within 20% of 100) are missed on this machine; a miss must say
// exactly why. runProfiles runs a benchmark with its timed region under the
// CPU profiler and reads the profile back as shares of the CPU by where it was spent: the package
// of the function on CPU, grouped (gRPC, HTTP/2, protobuf, the Go runtime,
// system calls, rmqfake, rmqflow).

// profiled is one benchmark to profile.
type profiled struct {
	pkg, pattern, benchtime string
}

// profiles are the benchmarks behind the emulator's targets.
var profiles = []profiled{
	{"./rmqfake", "BenchmarkProduceReceiveAck", "200000x"},
	{".", "BenchmarkScaleLiteTopics/lite=100", "100000x"},
	{".", "BenchmarkScaleLiteTopics/lite=1000000", "100000x"},
}

// profileGroups are the groups in the order a line lists them.
var profileGroups = []string{"Go runtime", "system calls and netpoll", "gRPC", "HTTP/2", "protobuf", "rmqfake", "rmqflow", "the benchmark's own code", "other"}

// profileGroup is the group of a function named as pprof names it
// ("google.golang.org/grpc/internal/transport.(*http2Client).reader").
func profileGroup(fn string) string {
	pkg := fn
	if i := strings.IndexAny(pkg, "(["); i >= 0 {
		pkg = pkg[:i] // a receiver or type arguments may hold other packages' paths
	}
	slash := strings.LastIndexByte(pkg, '/')
	if dot := strings.IndexByte(pkg[slash+1:], '.'); dot >= 0 {
		pkg = pkg[:slash+1+dot]
	}
	under := func(prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }
	switch {
	case under("github.com/rmqflow/rmqflow/rmqfake"):
		return "rmqfake"
	case strings.HasSuffix(pkg, "_test"):
		return "the benchmark's own code"
	case under("github.com/rmqflow/rmqflow"):
		return "rmqflow"
	case under("google.golang.org/grpc"):
		return "gRPC"
	case under("golang.org/x/net/http2"):
		return "HTTP/2"
	case under("google.golang.org/protobuf"), under("github.com/apache/rocketmq-clients"):
		return "protobuf" // the generated stubs are protobuf's code
	case under("syscall"), under("internal/runtime/syscall"), under("internal/poll"), pkg == "net":
		return "system calls and netpoll"
	case fn == "runtime.netpoll":
		return "system calls and netpoll"
	case under("runtime"), under("internal/runtime"):
		return "Go runtime"
	}
	return "other"
}

// profileShares reads `go tool pprof -top` output: each group's share of
// the flat samples, the cumulative shares of garbage collection's
// background marking and of allocation, and the samples' total.
func profileShares(top string) (flat map[string]float64, gc, alloc float64, total time.Duration) {
	flat = map[string]float64{}
	var sum time.Duration
	var gcCum, allocCum time.Duration
	for _, l := range strings.Split(top, "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		fl, err1 := time.ParseDuration(f[0])
		cum, err2 := time.ParseDuration(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		fn := strings.Join(f[5:], " ")
		flat[profileGroup(fn)] += float64(fl)
		sum += fl
		switch fn {
		case "runtime.gcBgMarkWorker":
			gcCum = cum
		case "runtime.mallocgc":
			allocCum = cum
		}
	}
	if sum == 0 {
		return nil, 0, 0, 0
	}
	for g := range flat {
		flat[g] /= float64(sum)
	}
	return flat, float64(gcCum) / float64(sum), float64(allocCum) / float64(sum), sum
}

// profileLine is one benchmark's breakdown: shares of the CPU and, with the
// benchmark's own CPU per message (NaN if it reports none), µs per message.
func profileLine(name string, top string, perMsg float64) string {
	flat, gc, alloc, total := profileShares(top)
	if total == 0 {
		return fmt.Sprintf("Profile %s: no samples", name)
	}
	us := func(share float64) string {
		if perMsg != perMsg || perMsg <= 0 {
			return ""
		}
		return " (" + num(share*perMsg, 1) + " µs)"
	}
	var parts []string
	for _, g := range profileGroups {
		if s, ok := flat[g]; ok && s >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %s%%%s", g, num(s*100, 0), us(s)))
		}
	}
	s := fmt.Sprintf("Profile %s: %s of CPU samples", name, total.Round(10*time.Millisecond))
	if perMsg == perMsg && perMsg > 0 {
		s += fmt.Sprintf(", %s µs per message", num(perMsg, 1))
	}
	return s + fmt.Sprintf(": %s; garbage collection's background marking %s%%, allocation %s%% (cumulative)",
		strings.Join(parts, ", "), num(gc*100, 0), num(alloc*100, 0))
}

// runProfiles profiles each benchmark of profiles in the checkout repo,
// appends the go test and pprof output to dir/logs/profile.log and returns
// one profileLine each.
func runProfiles(ctx context.Context, repo, dir string, log io.Writer) []string {
	tmp, err := os.MkdirTemp("", "rmqflow-profile-")
	if err != nil {
		return []string{"Profile: " + err.Error()}
	}
	defer os.RemoveAll(tmp)
	logPath := filepath.Join(dir, "logs", "profile.log")
	var lines []string
	for i, p := range profiles {
		fmt.Fprintf(log, "harness: [profile] go test -bench %s -benchtime %s %s, its timed region profiled ...\n", p.pattern, p.benchtime, p.pkg)
		prof := filepath.Join(tmp, fmt.Sprintf("cpu%d.out", i))
		// Not go test's -cpuprofile: it would profile the untimed setup too
		// (BenchmarkScaleLiteTopics produces its whole backlog untimed).
		// The benchmark profiles its own timed region (rmqtest.TimedCPUProfile).
		test := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^"+strings.ReplaceAll(p.pattern, "/", "$/^")+"$",
			"-benchtime", p.benchtime, "-count", "1", "-timeout", "30m", p.pkg)
		test.Dir = repo
		test.Env = append(os.Environ(), "RMQFLOW_TIMED_CPUPROFILE="+prof)
		out, err := test.CombinedOutput()
		appendFile(logPath, out)
		name := p.pattern + " (" + p.pkg + ")"
		if err != nil {
			lines = append(lines, fmt.Sprintf("Profile %s: FAILED: %v", name, err))
			continue
		}
		var bl []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "Benchmark") {
				bl = append(bl, l)
			}
		}
		top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=1000000", prof).Output()
		appendFile(logPath, top)
		if err != nil {
			lines = append(lines, fmt.Sprintf("Profile %s: pprof: %v", name, err))
			continue
		}
		lines = append(lines, profileLine(name, string(top), benchMetric(bl, p.pattern, "cpu-µs/msg")))
	}
	appendFile(logPath, []byte(strings.Join(lines, "\n")+"\n"))
	return lines
}

// profileMode is -profile DIR: it profiles the emulator's benchmarks into
// DIR/logs/profile.log (which -explain and the report read) and prints the
// lines; for a run whose harness predates the profiles.
func profileMode(dir string, stdout, stderr io.Writer) int {
	repo, err := findRepo("")
	if err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 2
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		fmt.Fprintln(stderr, "harness:", err)
		return 1
	}
	lines := runProfiles(context.Background(), repo, dir, stderr)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	if slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "FAILED") }) {
		return 1
	}
	return 0
}

// profileLines reads the lines runProfiles appended to dir's profile.log
// last: the lines starting with "Profile ".
func profileLines(dir string) []string {
	all := logLines(filepath.Join(dir, "logs", "profile.log"), "", func(l string) bool { return strings.HasPrefix(l, "Profile ") })
	if len(all) > len(profiles) {
		all = all[len(all)-len(profiles):]
	}
	return all
}
