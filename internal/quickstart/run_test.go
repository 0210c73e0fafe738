package quickstart

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var raceEnabled bool // set by race_test.go

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// program is a main package of the repository that blocks go run, built once.
type program struct {
	name  string // of the binary, on PATH
	mod   string // its module's directory, relative to the root
	pkg   string // its package, relative to mod
	tags  string // the -tags a go run line must give to get this build
	race  bool   // built with -race when the test is (the later make test steps build it so)
	env   []string
	once  sync.Once
	path  string
	err   error
	built time.Duration
}

// newPrograms returns the programs a test run builds, each to be built once
// in that run's directory (a fresh set per run: under -count N each run has a
// directory of its own).
func newPrograms() []*program {
	return []*program{
		{name: "rmqflow", mod: ".", pkg: "./cmd/rmqflow", race: true},
		{name: "rmqflow-connect", mod: "integrations/benthos", pkg: "./cmd/rmqflow-connect", race: true},
		{name: "litework", mod: "integrations/beam", pkg: "./examples/litework", race: true},
		// As the eKuiper step of make test and its TestMain build it.
		{name: "rmqflow-sql", mod: "integrations/ekuiper", pkg: "./cmd/rmqflow-sql", tags: "core", env: []string{"CGO_ENABLED=0"}},
	}
}

// build builds p into dir (once per test run).
func (p *program) build(root, dir string) error {
	p.once.Do(func() {
		start := time.Now()
		p.path = filepath.Join(dir, p.name)
		args := []string{"build", "-o", p.path}
		if p.race && raceEnabled {
			args = append(args, "-race")
		}
		if p.tags != "" {
			args = append(args, "-tags", p.tags)
		}
		cmd := exec.Command("go", append(args, p.pkg)...)
		cmd.Dir = filepath.Join(root, p.mod)
		cmd.Env = append(os.Environ(), p.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			p.err = fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), p.mod, err, out)
		}
		p.built = time.Since(start)
	})
	return p.err
}

// The go shim: the test binary, run under the name go (a symlink).
const (
	shimEnv    = "QUICKSTART_GO_SHIM" // the real go, for what the shim does not answer
	shimMapEnv = "QUICKSTART_GO_MAP"  // dir|tags=binary;…
)

func TestMain(m *testing.M) {
	if real := os.Getenv(shimEnv); real != "" && filepath.Base(os.Args[0]) == "go" {
		shim(real, os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

// shim answers `go run [-C dir] [-tags t] PKG ARGS…` and `go build -o FILE
// PKG` for a PKG (relative to the working directory and -C) that is one of the
// programs with the binary built for it; anything else goes to the real go.
func shim(realGo string, args []string) {
	real := func() {
		err := syscall.Exec(realGo, append([]string{"go"}, args...), os.Environ())
		fmt.Fprintf(os.Stderr, "quickstart go shim: %v\n", err)
		os.Exit(1)
	}
	if len(args) == 0 || (args[0] != "run" && args[0] != "build") {
		real()
	}
	wd, err := os.Getwd()
	if err != nil {
		real()
	}
	tags, out := "", ""
	i := 1
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		flag, val, hasVal := strings.Cut(args[i], "=")
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
		}
		switch flag {
		case "-C":
			if i != 1 {
				real() // go requires -C first: let it say so
			}
			wd = abs(wd, val)
		case "-tags":
			tags = val
		case "-o":
			out = val
		default:
			real()
		}
		if !hasVal {
			i++
		}
	}
	if i >= len(args) || !(strings.HasPrefix(args[i], "./") || strings.HasPrefix(args[i], "../")) ||
		(args[0] == "build" && (out == "" || i != len(args)-1)) {
		real()
	}
	key := filepath.Join(wd, args[i]) + "|" + tags
	for _, kv := range strings.Split(os.Getenv(shimMapEnv), ";") {
		k, bin, _ := strings.Cut(kv, "=")
		if k != key {
			continue
		}
		if args[0] == "build" {
			b, err := os.ReadFile(bin)
			if err == nil {
				err = os.WriteFile(abs(wd, out), b, 0o755)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "quickstart go shim: %v\n", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
		if err := os.Chdir(wd); err != nil { // go run -C runs the program there
			fmt.Fprintf(os.Stderr, "quickstart go shim: %v\n", err)
			os.Exit(1)
		}
		err := syscall.Exec(bin, append([]string{filepath.Base(bin)}, args[i+1:]...), os.Environ())
		fmt.Fprintf(os.Stderr, "quickstart go shim: %v\n", err)
		os.Exit(1)
	}
	real()
}

// abs is path p as seen from directory wd.
func abs(wd, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(wd, p)
}

// harness holds what the blocks share: the binaries, the shim, the address locks.
type harness struct {
	root     string
	bin      string // the binaries and the go shim
	env      []string
	programs []*program
	mu       sync.Mutex
	locks    map[string]*sync.Mutex
}

func newHarness(t *testing.T) *harness {
	root := repoRoot(t)
	realGo, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "go")); err != nil {
		t.Fatal(err)
	}
	// HOME changes per block: keep go's caches and settings where they are.
	out, err := exec.Command(realGo, "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV", "GOTOOLCHAIN").Output()
	if err != nil {
		t.Fatal(err)
	}
	goenv := strings.Split(strings.TrimSpace(string(out)), "\n")
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RMQFLOW_") || strings.HasPrefix(k, "KUIPER") || k == "KuiperBaseKey" ||
			k == "PATH" || k == "HOME" || k == "TMPDIR" || k == "GOFLAGS" || strings.HasPrefix(k, "QUICKSTART_") {
			continue
		}
		env = append(env, kv)
	}
	for i, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV", "GOTOOLCHAIN"} {
		if i < len(goenv) && goenv[i] != "" {
			env = append(env, k+"="+goenv[i])
		}
	}
	var keys []string
	programs := newPrograms()
	for _, p := range programs {
		keys = append(keys, filepath.Join(root, p.mod, p.pkg)+"|"+p.tags+"="+filepath.Join(bin, p.name))
	}
	env = append(env,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		shimEnv+"="+realGo,
		shimMapEnv+"="+strings.Join(keys, ";"),
	)
	return &harness{root: root, bin: bin, env: env, programs: programs, locks: map[string]*sync.Mutex{}}
}

// lock takes the locks of addrs (in a fixed order) and returns their release.
func (h *harness) lock(addrs []string) func() {
	sorted := append([]string(nil), addrs...)
	sort.Strings(sorted)
	var held []*sync.Mutex
	for _, a := range sorted {
		h.mu.Lock()
		l := h.locks[a]
		if l == nil {
			l = new(sync.Mutex)
			h.locks[a] = l
		}
		h.mu.Unlock()
		l.Lock()
		held = append(held, l)
	}
	return func() {
		for _, l := range held {
			l.Unlock()
		}
	}
}

// programsOf returns the programs a block's lines name.
func (h *harness) programsOf(b block) []*program {
	var ps []*program
	for _, p := range h.programs {
		for _, c := range b.cmds {
			if strings.Contains(c.text, strings.TrimPrefix(p.pkg, "./")) || regexp.MustCompile(`(^|[\s;&|(])`+regexp.QuoteMeta(p.name)+`\s`).MatchString(c.text) {
				ps = append(ps, p)
				break
			}
		}
	}
	return ps
}

// TestQuickstart runs every quickstart block (see the package doc).
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the commands and runs the quickstarts (-short)")
	}
	h := newHarness(t)
	blocks, _ := allBlocks(t, h.root)
	for _, b := range blocks {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range h.programsOf(b) {
				if err := p.build(h.root, h.bin); err != nil {
					t.Fatal(err)
				}
			}
			release := h.lock(b.wait)
			defer release()
			start := time.Now()
			h.run(t, b)
			t.Logf("%v: %d commands in %v", b, len(b.cmds), time.Since(start).Round(time.Millisecond))
		})
	}
}

// run runs one block in one shell (see the package doc).
func (h *harness) run(t *testing.T, b block) {
	for _, a := range b.wait {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Fatalf("%v: %s is in use before the block started: another process would answer in its place", b, a)
		}
	}
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	outFile := func(i int) string { return filepath.Join(dir, fmt.Sprintf("out-%d", i)) }
	for i, c := range b.cmds {
		// Each command writes to a file of its own (background ones keep it),
		// reports its status on fd 3 and the shell waits on fd 4 for the
		// harness to have checked it.
		fmt.Fprintf(&script, "exec >'%s' 2>&1\n%s\necho \"%d $?\" >&3\nread _quickstart_next <&4 || exit 99\n", outFile(i), c.text, i)
	}
	scriptPath := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(scriptPath, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	nextR, nextW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer nextW.Close()
	shellOut := filepath.Join(dir, "shell")
	so, err := os.Create(shellOut)
	if err != nil {
		t.Fatal(err)
	}
	defer so.Close()
	sh := exec.Command("sh", scriptPath)
	sh.Dir = h.root
	sh.Env = append(append([]string(nil), h.env...), "HOME="+home, "TMPDIR="+dir)
	sh.Stdout, sh.Stderr = so, so
	sh.ExtraFiles = []*os.File{statusW, nextR}
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	statusW.Close()
	nextR.Close()
	pgid := sh.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- sh.Wait() }()
	defer stopGroup(t, pgid, b.wait)

	statuses := make(chan string)
	go func() {
		sc := bufio.NewScanner(statusR)
		for sc.Scan() {
			statuses <- sc.Text()
		}
		close(statuses)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	dump := func() string {
		var s strings.Builder
		for i := range b.cmds {
			out, _ := os.ReadFile(outFile(i))
			fmt.Fprintf(&s, "--- %s:%d: %s\n%s", b.file, b.cmds[i].line, b.cmds[i].text, out)
		}
		out, _ := os.ReadFile(shellOut)
		fmt.Fprintf(&s, "--- the shell\n%s", out)
		return s.String()
	}
	waits := b.wait
	for i, c := range b.cmds {
		var status string
		select {
		case status = <-statuses:
		case err := <-exited:
			t.Fatalf("%s:%d: the shell ended (%v) before %q finished\n%s", b.file, c.line, err, c.text, dump())
		case <-ctx.Done():
			t.Fatalf("%s:%d: %q did not finish within the block's %v\n%s", b.file, c.line, c.text, b.timeout, dump())
		}
		if status != fmt.Sprintf("%d 0", i) {
			t.Fatalf("%s:%d: %q: exit status %q, want 0\n%s", b.file, c.line, c.text, strings.TrimPrefix(status, strconv.Itoa(i)+" "), dump())
		}
		if c.background {
			addr := ""
			if len(waits) > 0 {
				addr, waits = waits[0], waits[1:]
			}
			if err := awaitReady(ctx, addr, outFile(i), c.expect, b.vary); err != nil {
				t.Fatalf("%s:%d: %q never got ready: %v\n%s", b.file, c.line, c.text, err, dump())
			}
		} else if len(c.expect) > 0 {
			out, _ := os.ReadFile(outFile(i))
			if missing := match(c.expect, string(out), b.vary); missing != "" {
				t.Fatalf("%s:%d: %q printed no line matching the document's %q\n%s", b.file, c.line, c.text, missing, dump())
			}
		}
		if _, err := nextW.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("%v: the shell: %v\n%s", b, err, dump())
		}
	case <-ctx.Done():
		t.Fatalf("%v: the shell did not end\n%s", b, dump())
	}
}

// awaitReady waits until addr (if any) accepts connections and the file
// holds the expected lines.
func awaitReady(ctx context.Context, addr, file string, expect, vary []string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := true
		if addr != "" {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				ok = false
			} else {
				c.Close()
			}
		}
		missing := ""
		if ok && len(expect) > 0 {
			out, _ := os.ReadFile(file)
			missing = match(expect, string(out), vary)
			ok = missing == ""
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if missing != "" {
				return fmt.Errorf("no line matching the document's %q", missing)
			}
			return fmt.Errorf("%s accepts no connection", addr)
		case <-tick.C:
		}
	}
}

// match returns the first expected line that the output does not hold, in
// order, or "" (see the package doc for ... and vary).
func match(expect []string, out string, vary []string) string {
	lines := strings.Split(out, "\n")
	j := 0
	for _, e := range expect {
		re := lineRE(e, vary)
		for j < len(lines) && !re.MatchString(strings.TrimSpace(lines[j])) {
			j++
		}
		if j == len(lines) {
			return e
		}
		j++
	}
	return ""
}

func lineRE(e string, vary []string) *regexp.Regexp {
	q := regexp.QuoteMeta(e)
	q = strings.ReplaceAll(q, regexp.QuoteMeta("..."), ".*")
	for _, v := range vary {
		q = strings.ReplaceAll(q, regexp.QuoteMeta(v), `\S+?`)
	}
	return regexp.MustCompile("^" + q + "$")
}

// stopGroup stops the block's process group (SIGTERM, then SIGKILL after
// 10 s) and waits until its addresses are free for the next block.
func stopGroup(t *testing.T, pgid int, addrs []string) {
	alive := func() bool { return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) }
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for alive() && time.Now().Before(deadline) {
		<-tick.C
	}
	if alive() {
		t.Logf("process group %d still running 10 s after SIGTERM: SIGKILL", pgid)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for alive() {
			<-tick.C
		}
	}
	for _, a := range addrs {
		for {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline.Add(5 * time.Second)) {
				t.Errorf("%s still accepts connections after the block's processes ended", a)
				break
			}
			<-tick.C
		}
	}
}

func TestMatch(t *testing.T) {
	out := "noise\nrmqfake listening on 127.0.0.1:41873 (1 topics, 1 groups)\n{\"body\":\"hi\",\"x\":1}\n"
	for _, c := range []struct {
		expect []string
		vary   []string
		want   string
	}{
		{[]string{"rmqfake listening on 127.0.0.1:41873 (1 topics, 1 groups)"}, nil, ""},
		{[]string{"rmqfake listening on 127.0.0.1:8081 (1 topics, 1 groups)"}, nil, "rmqfake listening on 127.0.0.1:8081 (1 topics, 1 groups)"},
		{[]string{"rmqfake listening on 127.0.0.1:8081 (1 topics, 1 groups)"}, []string{"8081"}, ""},
		{[]string{`{"body":"hi",...}`}, nil, ""},
		{[]string{`{"body":"hi",...}`, "rmqfake listening on ..."}, nil, "rmqfake listening on ..."}, // order
		{[]string{"listening"}, nil, "listening"},                                                    // whole lines
	} {
		if got := match(c.expect, out, c.vary); got != c.want {
			t.Errorf("match(%q, vary %q) = %q, want %q", c.expect, c.vary, got, c.want)
		}
	}
}
