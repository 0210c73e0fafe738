//go:build proof

package proof

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the module root (this file is in <root>/proof).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(file))
}

// restartProxy restarts the real broker's proxy alone (scripts/rocketmq.sh
// restart-proxy) and returns when its gRPC port serves again, with the time
// that took. Only the proof suites do this: it cuts every client of the
// broker for about 15 s.
func restartProxy(t testing.TB) time.Duration {
	t.Helper()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "rocketmq.sh"), "restart-proxy")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/rocketmq.sh restart-proxy: %v\n%s", err, out)
	}
	d := time.Since(t0)
	t.Logf("proxy restarted in %v: %s", d.Round(100*time.Millisecond), strings.TrimSpace(string(out)))
	return d
}

// buildOnce builds the child program and the rmqflow CLI once per test
// binary, without -race (they are the system under test, and the race
// detector would make 200,000 messages take minutes; RMQFLOW_PROOF_RACE=1
// builds them with it).
var (
	buildMu  sync.Mutex
	builtDir string
)

// binaries returns the paths of the child program and of the rmqflow CLI.
func binaries(t testing.TB) (child, cli string) {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "rmqflow-proof-bin-")
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"build"}
		if os.Getenv("RMQFLOW_PROOF_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "-o", dir+string(os.PathSeparator), "./proof/internal/child", "./cmd/rmqflow")
		t0 := time.Now()
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("built the child and the CLI in %v", time.Since(t0).Round(100*time.Millisecond))
		builtDir = dir
	}
	return filepath.Join(builtDir, "child"), filepath.Join(builtDir, "rmqflow")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}
