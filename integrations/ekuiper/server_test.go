package rmqkuiper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is rmqflow-sql, built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rmqflow-sql-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "rmqflow-sql")
	build := exec.Command("go", "build", "-tags", "core", "-o", binary, "./cmd/rmqflow-sql")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building rmqflow-sql:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one rmqflow-sql process.
type server struct {
	t    *testing.T
	home string
	addr string
	// push is the httppush listener's address.
	push string
	// token is the REST API's credential: RMQFLOW_SQL_TOKEN when the test
	// sets it, else what the server wrote to <home>/rest.token.
	token string
	cmd   *exec.Cmd
	log   *syncBuffer
	done  chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer starts rmqflow-sql on home (a new temp dir when empty) with
// free REST and httppush addresses on 127.0.0.1, waits until its REST API
// answers and reads its token.
func startServer(t *testing.T, home string, env ...string) *server {
	t.Helper()
	return startServerAt(t, home, freeAddr(t), env...)
}

// startServerAt is startServer with the REST API on addr (a 0.0.0.0
// address is reached on 127.0.0.1).
func startServerAt(t *testing.T, home, addr string, env ...string) *server {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	s := &server{t: t, home: home, addr: addr, log: &syncBuffer{}, done: make(chan error, 1)}
	if h, p, _ := net.SplitHostPort(addr); h == "0.0.0.0" || h == "::" {
		s.addr = net.JoinHostPort("127.0.0.1", p)
	}
	s.cmd = exec.Command(binary)
	s.push = freeAddr(t)
	s.cmd.Env = append(os.Environ(), "RMQFLOW_SQL_HOME="+home, "RMQFLOW_SQL_REST="+addr,
		"RMQFLOW_SQL_HTTPPUSH="+s.push, "KUIPER__BASIC__RULEPATROLINTERVAL=1s")
	s.cmd.Env = append(s.cmd.Env, env...)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RMQFLOW_SQL_TOKEN="); ok {
			s.token = v
		}
		if v, ok := strings.CutPrefix(kv, "RMQFLOW_SQL_HTTPPUSH="); ok {
			s.push = v
		}
	}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if s.token == "" {
					b, _ := os.ReadFile(filepath.Join(home, "rest.token"))
					s.token = strings.TrimSpace(string(b))
				}
				return s
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("rmqflow-sql exited before it served: %v\n%s", err, s.log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("rmqflow-sql did not answer /ping within 90 s\n%s", s.log)
		}
	}
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// stop ends the server with SIGTERM (SIGKILL after 30 s).
func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("rmqflow-sql ignored SIGTERM for 30 s\n%s", s.log)
	}
}

// kill ends the server as a crash does.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// call sends a REST request and fails the test unless it answers 2xx.
func (s *server) call(method, path string, body any) []byte {
	s.t.Helper()
	code, out := s.try(method, path, body)
	if code/100 != 2 {
		s.t.Fatalf("%s %s: %d: %s\nserver log:\n%s", method, path, code, out, s.log)
	}
	return out
}

// try sends a REST request and returns its status code and body.
func (s *server) try(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+s.addr+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// stream creates a rocketmq stream reading datasource with the source
// configuration section confKey.
func (s *server) stream(name, datasource, confKey string) {
	s.t.Helper()
	sql := fmt.Sprintf(`CREATE STREAM %s () WITH (TYPE="rocketmq", DATASOURCE="%s", FORMAT="JSON", CONF_KEY="%s", SHARED="false")`,
		name, datasource, confKey)
	s.call(http.MethodPost, "/streams", map[string]string{"sql": sql})
}

// sourceSections writes etc/sources/rocketmq.yaml into a home before its
// server starts (as JSON, which YAML reads), one section per CONF_KEY.
func sourceSections(t *testing.T, home string, sections map[string]map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(sections, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "etc", "sources")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rocketmq.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// rule creates and starts a rule; options default to what an acking rule
// needs (disableBufferFullDiscard).
func (s *server) rule(id, sql string, actions []map[string]any, options map[string]any) {
	s.t.Helper()
	if options == nil {
		options = map[string]any{"disableBufferFullDiscard": true}
	}
	s.call(http.MethodPost, "/rules", map[string]any{"id": id, "sql": sql, "actions": actions, "options": options})
}

// waitRunning waits until the rule's status is running with its source
// connected, and fails with the status when the rule stopped.
func (s *server) waitRunning(id string) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := s.status(id)
		if st["status"] == "running" && connected(st) {
			return
		}
		if st["status"] == "stopped" || time.Now().After(deadline) {
			s.t.Fatalf("rule %s: %v\nserver log:\n%s", id, st, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// connected reports whether every source_*_connection_status metric says 1.
func connected(st map[string]any) bool {
	n := 0
	for k, v := range st {
		if strings.HasPrefix(k, "source_") && strings.HasSuffix(k, "_connection_status") {
			n++
			if f, ok := v.(float64); !ok || f != 1 {
				return false
			}
		}
	}
	return n > 0
}

// status is a rule's status document.
func (s *server) status(id string) map[string]any {
	s.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(s.call(http.MethodGet, "/rules/"+id+"/status", nil), &m); err != nil {
		s.t.Fatal(err)
	}
	return m
}

// syncBuffer is the server's output, written by the process's pipes and read
// by failing tests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
