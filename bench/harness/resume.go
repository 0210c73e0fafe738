package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A whole harness run takes longer than some machines stay up for (about
// three and a half hours on 2 cores with every scenario), so a run can be
// continued: run.json in the output directory keeps the arguments, the seed
// and the stamp its topic names derive from, and -resume DIR plans the same
// steps again, keeps every step whose runs are all in DIR/results.jsonl, and
// runs the rest. A step that was cut short runs again whole.

// runFile is DIR/run.json.
type runFile struct {
	Args    []string    `json:"args"` // the harness's arguments, without -resume
	Seed    uint64      `json:"seed"`
	Stamp   string      `json:"stamp"`
	Started time.Time   `json:"started"`
	Resumed []time.Time `json:"resumed,omitempty"`
	// Commits is the checkout's commit (git rev-parse HEAD, "+dirty" when
	// it has changes) at the start and at each resumption: parts measured
	// on different code are reported as such.
	Commits []string `json:"commits,omitempty"`
}

// commitOf describes the checkout at repo, or "unknown".
func commitOf(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "+dirty"
	}
	return c
}

// measuredChanges lists what the benchmark measures that differs between
// the checkouts named by commits (as commitOf writes them): files of the
// core package (the Go files at the top), client/, internal/, the bench
// module, the module files, the broker's scripts, and rmqfake when the run
// uses the emulator; tests and documents excepted. A dirty or unknown
// checkout, or a git that cannot answer, is listed as such. Empty: the parts
// measured the same code.
func measuredChanges(repo string, commits []string, emulator bool) []string {
	paths := []string{":(glob)*.go", "go.mod", "go.sum", "client", "internal", "bench", "scripts/rocketmq.sh", "scripts/rocketmq",
		":(exclude,glob)**/*_test.go", ":(exclude,glob)*_test.go", ":(exclude,glob)**/*.md"}
	if emulator {
		paths = append(paths, "rmqfake")
	}
	var out []string
	for i := 1; i < len(commits); i++ {
		a, b := commits[i-1], commits[i]
		if a == b {
			continue
		}
		if a == "unknown" || b == "unknown" || strings.HasSuffix(a, "+dirty") || strings.HasSuffix(b, "+dirty") {
			out = append(out, "(a checkout with uncommitted or unknown changes)")
			continue
		}
		args := append([]string{"-C", repo, "diff", "--name-only", a, b, "--"}, paths...)
		names, err := exec.Command("git", args...).Output()
		if err != nil {
			out = append(out, fmt.Sprintf("(git cannot compare %.12s and %.12s)", a, b))
			continue
		}
		for _, n := range strings.Fields(string(names)) {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

const runFileName = "run.json"

func writeRunFile(dir string, rf runFile) error {
	data, err := json.MarshalIndent(rf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, runFileName), append(data, '\n'), 0o644)
}

func readRunFile(dir string) (runFile, error) {
	var rf runFile
	data, err := os.ReadFile(filepath.Join(dir, runFileName))
	if err != nil {
		return rf, fmt.Errorf("-resume %s: %w (only a run of this harness can be resumed)", dir, err)
	}
	if err := json.Unmarshal(data, &rf); err != nil {
		return rf, fmt.Errorf("-resume %s: %s: %w", dir, runFileName, err)
	}
	if rf.Seed == 0 || rf.Stamp == "" {
		return rf, fmt.Errorf("-resume %s: %s has no seed or stamp", dir, runFileName)
	}
	return rf, nil
}

// resumeArgs finds -resume DIR (or -resume=DIR) in args. It returns the
// directory, or "" when there is none.
func resumeArgs(args []string) (string, error) {
	for i, a := range args {
		switch {
		case a == "-resume" || a == "--resume":
			if i+1 >= len(args) {
				return "", errors.New("-resume needs a directory")
			}
			if len(args) != 2 {
				return "", errors.New("-resume DIR takes no other flags: the resumed run keeps its own")
			}
			return args[i+1], nil
		case strings.HasPrefix(a, "-resume=") || strings.HasPrefix(a, "--resume="):
			if len(args) != 1 {
				return "", errors.New("-resume DIR takes no other flags: the resumed run keeps its own")
			}
			_, dir, _ := strings.Cut(a, "=")
			return dir, nil
		}
	}
	return "", nil
}

// saved is one run restored from results.jsonl.
type saved struct {
	ID         string  `json:"id"`
	Peer       string  `json:"peer"`
	Offered    float64 `json:"offered"`
	Lag        string  `json:"producer_lag"`
	Produced   float64 `json:"backlog_produced_per_s"`
	Broker     float64 `json:"broker_cpu_seconds"`
	BrokerBase float64 `json:"broker_baseline_cpu_per_second"`
	Settle     string  `json:"broker_settle"`
	Result     result  `json:"result"`
	Log        string  `json:"log"`
	Filled     int     `json:"lite_topics_filled"`
	Heap       int64   `json:"emulator_heap_bytes"`
	BLHeap     int64   `json:"emulator_backlog_heap_bytes"`
}

func savedKey(id, peer string) string { return id + "|" + peer }

// loadSaved reads the runs results.jsonl holds; a run recorded twice (its
// step ran again after an interruption) counts with its last record.
func loadSaved(path string) (map[string]saved, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]saved{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]saved{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var s saved
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			// The last line of a run killed mid-write may be cut short.
			continue
		}
		out[savedKey(s.ID, s.Peer)] = s
	}
	return out, sc.Err()
}

// restore fills a step's runs from saved records when every one of them is
// there, and reports whether it did.
func restore(s *step, prev map[string]saved) bool {
	for _, r := range s.runs {
		if _, ok := prev[savedKey(r.ID, r.Peer.Name())]; !ok {
			return false
		}
	}
	for _, r := range s.runs {
		sv := prev[savedKey(r.ID, r.Peer.Name())]
		r.Offered, r.Broker, r.BrokerBase, r.Result, r.LogPath = sv.Offered, sv.Broker, sv.BrokerBase, sv.Result, sv.Log
		r.Produced = sv.Produced
		r.Filled, r.Heap, r.BacklogHeap = sv.Filled, sv.Heap, sv.BLHeap
		r.Lag, _ = time.ParseDuration(sv.Lag)
		r.Settle, _ = time.ParseDuration(sv.Settle)
	}
	return true
}
