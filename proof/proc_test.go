//go:build proof

package proof

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// envInt reads a positive integer setting, or def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// seeded returns the run's random source: RMQFLOW_PROOF_SEED, or a fresh seed
// that is logged so that a failing run can be repeated.
func seeded(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RMQFLOW_PROOF_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RMQFLOW_PROOF_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (RMQFLOW_PROOF_SEED=%d repeats the schedule)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

// workDir is where a test's children write their logs. It is removed when
// the test passes and kept (its path logged) when it fails.
func workDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rmqflow-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RMQFLOW_PROOF_KEEP") == "1" {
			t.Logf("child logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// proc is a child process with its stdout parsed: "handled N" lines update
// handled and wake waiters.
type proc struct {
	name    string
	cmd     *exec.Cmd
	errPath string
	handled atomic.Int64
	changed chan struct{} // receives (non-blocking) when handled grows
	lines   chan string   // other stdout lines
	exited  chan struct{}
	waitErr error
	exitAt  time.Time
	killed  bool
}

// start runs bin with args, stderr to <dir>/<name>.err.
func start(t *testing.T, dir, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, changed: make(chan struct{}, 1), lines: make(chan string, 64), exited: make(chan struct{})}
	p.errPath = filepath.Join(dir, name+".err")
	errf, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = errf
	dieWithParent(p.cmd)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	_ = errf.Close() // the child has its own descriptor
	var reading sync.WaitGroup
	reading.Add(1)
	go func() {
		defer reading.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "handled "); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					p.handled.Store(n)
					select {
					case p.changed <- struct{}{}:
					default:
					}
					continue
				}
			}
			select {
			case p.lines <- line:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		reading.Wait()
		p.waitErr = p.cmd.Wait()
		p.exitAt = time.Now()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// stderrTail returns the last lines of the child's stderr.
func (p *proc) stderrTail() string {
	b, _ := os.ReadFile(p.errPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 { // the consumer's status line comes every 10 s
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// waitHandled waits until the child has handled at least n messages. It
// fails the test when the child exits first, or makes no progress for
// stall.
func (p *proc) waitHandled(t *testing.T, ctx context.Context, n int64, stall time.Duration) {
	t.Helper()
	timer := time.NewTimer(stall)
	defer timer.Stop()
	last := p.handled.Load()
	for p.handled.Load() < n {
		select {
		case <-p.changed:
			if h := p.handled.Load(); h != last {
				last = h
				timer.Reset(stall)
			}
		case <-p.exited:
			if p.handled.Load() >= n {
				return
			}
			t.Fatalf("%s exited (%v) after handling %d of the %d awaited; stderr:\n%s", p.name, p.waitErr, p.handled.Load(), n, p.stderrTail())
		case <-timer.C:
			t.Fatalf("%s handled nothing for %v (at %d, waiting for %d); stderr:\n%s", p.name, stall, p.handled.Load(), n, p.stderrTail())
		case <-ctx.Done():
			t.Fatalf("%s: %v (at %d, waiting for %d)", p.name, ctx.Err(), p.handled.Load(), n)
		}
	}
}

// kill SIGKILLs the child and waits for it.
func (p *proc) kill() {
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits up to d for a clean exit (status 0).
func (p *proc) stop(t *testing.T, d time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Errorf("%s did not shut down cleanly: %v; stderr:\n%s", p.name, p.waitErr, p.stderrTail())
		}
	case <-time.After(d):
		p.kill()
		t.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, d)
	}
}

// wait waits for the child to exit by itself (a producer) and fails the
// test unless it exits 0 within d.
func (p *proc) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Fatalf("%s failed: %v; stderr:\n%s", p.name, p.waitErr, p.stderrTail())
		}
	case <-time.After(d):
		p.kill()
		t.Fatalf("%s did not finish within %v", p.name, d)
	}
}

// tail follows a log file as a child appends to it and counts the distinct
// messages of e seen across every file it followed.
type tail struct {
	e     Expected
	seen  map[[2]int]bool
	files map[string]int64 // offset read so far
}

func newTail(e Expected) *tail {
	return &tail{e: e, seen: map[[2]int]bool{}, files: map[string]int64{}}
}

// read consumes the complete lines appended to path since the last read.
func (tl *tail) read(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	off := tl.files[path]
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	end := strings.LastIndexByte(string(b), '\n')
	if end < 0 {
		return nil
	}
	recs, err := ParseLog(strings.NewReader(string(b[:end+1])))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range recs {
		if li := tl.e.index(r.Lite); li >= 0 {
			tl.seen[[2]int{li, r.Seq}] = true
		}
	}
	tl.files[path] = off + int64(end+1)
	return nil
}

func (tl *tail) distinct() int { return len(tl.seen) }
