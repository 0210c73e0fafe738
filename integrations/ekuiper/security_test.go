package rmqkuiper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// raw sends a REST request as given (no token unless header has one) and
// returns its status, headers and body.
func (s *server) raw(method, path, contentType string, body []byte, header map[string]string) (int, http.Header, string) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+s.addr+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (s *server) bearer() map[string]string {
	return map[string]string{"Authorization": "Bearer " + s.token}
}

// ruleExists reports whether GET /rules/{id} finds the rule.
func (s *server) ruleExists(id string) bool {
	s.t.Helper()
	code, _ := s.try(http.MethodGet, "/rules/"+id, nil)
	return code == http.StatusOK
}

// levelError matches a log line at error level (logrus text format).
var levelError = regexp.MustCompile(`(?m)^.*level=error.*$`)

// TestRESTNeedsToken: the REST API answers nothing but /ping without the
// token rmqflow-sql generated at start; the token is in a 0600 file of the
// home, whose path (not the token) the start line gives; a wrong token is
// refused like a missing one; a fresh home logs nothing at error level.
func TestRESTNeedsToken(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "")
	started := srv.log.String()
	file := filepath.Join(srv.home, "rest.token")
	st, err := os.Stat(file)
	if err != nil {
		t.Fatalf("no token file: %v\n%s", err, srv.log)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", file, st.Mode().Perm())
	}
	if !strings.Contains(srv.log.String(), file) {
		t.Errorf("the start output does not name %s:\n%s", file, srv.log)
	}
	for what, h := range map[string]map[string]string{
		"no token":    nil,
		"wrong token": {"Authorization": "Bearer " + strings.Repeat("x", len(srv.token))},
		"not bearer":  {"Authorization": srv.token},
	} {
		for _, req := range [][2]string{{http.MethodGet, "/rules"}, {http.MethodGet, "/streams"}, {http.MethodPost, "/rules"}} {
			var body []byte
			if req[0] == http.MethodPost {
				body = []byte(`{"id": "open", "sql": "SELECT * FROM nothing", "actions": [{"log": {}}]}`)
			}
			code, _, out := srv.raw(req[0], req[1], "application/json", body, h)
			t.Logf("%s, %s %s: %d %s", what, req[0], req[1], code, strings.TrimSpace(out))
			if code != http.StatusUnauthorized {
				t.Errorf("%s, %s %s: %d, want 401", what, req[0], req[1], code)
			}
		}
	}
	if srv.ruleExists("open") {
		t.Error("a rule was created without the token")
	}
	// eKuiper's own REST server is on a unix socket only the server's user
	// reaches; the process listens on TCP only where its settings say.
	if st, err := os.Stat(filepath.Join(srv.home, "run")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, mode %v; want a 0700 directory", filepath.Join(srv.home, "run"), err, st)
	}
	if ports, err := listening(srv.cmd.Process.Pid); err != nil {
		t.Logf("listeners not checked: %v", err)
	} else if want := []string{srv.addr, srv.push}; !sameSet(ports, want) {
		t.Errorf("rmqflow-sql listens on %v, want %v (REST and httppush)", ports, want)
	}
	if code, _, _ := srv.raw(http.MethodGet, "/ping", "", nil, nil); code != http.StatusOK {
		t.Errorf("GET /ping without the token: %d, want 200", code)
	}
	if code, _, out := srv.raw(http.MethodGet, "/rules", "", nil, srv.bearer()); code != http.StatusOK {
		t.Errorf("GET /rules with the token: %d %s", code, out)
	}
	srv.stop()
	logs := srv.log.String()
	if strings.Contains(logs, srv.token) {
		t.Error("the token is in the server's output")
	}
	if lines := levelError.FindAllString(started, -1); len(lines) > 0 {
		t.Errorf("a fresh home logs at error level:\n%s", strings.Join(lines, "\n"))
	}
}

// TestRESTTokenFromEnv: RMQFLOW_SQL_TOKEN gives the token (no file is
// written, an old one is removed); a short one is refused at start without
// its value in the message.
func TestRESTTokenFromEnv(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "rest.token"), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := "env-token-" + strings.Repeat("k", 30)
	srv := startServer(t, home, "RMQFLOW_SQL_TOKEN="+token)
	if srv.token != token {
		t.Fatalf("the helper's token %q is not the environment's", srv.token)
	}
	if _, err := os.Stat(filepath.Join(home, "rest.token")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rest.token with RMQFLOW_SQL_TOKEN set: %v, want none", err)
	}
	if code, _, out := srv.raw(http.MethodGet, "/rules", "", nil, srv.bearer()); code != http.StatusOK {
		t.Errorf("GET /rules with the environment's token: %d %s", code, out)
	}
	if code, _, _ := srv.raw(http.MethodGet, "/rules", "", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /rules without the token: %d, want 401", code)
	}
	srv.stop()
	if strings.Contains(srv.log.String(), token) {
		t.Error("the token is in the server's output")
	}
	short := "short-secret-9"
	code, out := runRefused(t, "RMQFLOW_SQL_TOKEN="+short)
	t.Logf("short token: exit %d: %s", code, out)
	if code != 1 || !strings.Contains(out, "RMQFLOW_SQL_TOKEN") || strings.Contains(out, short) {
		t.Errorf("a short RMQFLOW_SQL_TOKEN: exit %d, output %q; want exit 1 naming the setting, not the value", code, out)
	}
}

// TestRESTRefusesCrossSite: a request a web page can send from another
// origin is refused even with the token: any request with an Origin header,
// preflights (without CORS headers), and writes whose content type a form
// or a plain fetch can send (text/plain, form-urlencoded, multipart) or
// that is not JSON.
func TestRESTRefusesCrossSite(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "")
	srv.call(http.MethodPost, "/streams", map[string]string{"sql": `CREATE STREAM mem () WITH (TYPE="memory", DATASOURCE="t", FORMAT="JSON")`})
	rule := []byte(`{"id": "xs", "sql": "SELECT * FROM mem", "actions": [{"log": {}}]}`)
	withOrigin := map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer " + srv.token}
	// The request, without and with the token.
	for what, h := range map[string]map[string]string{
		"cross-origin text/plain":            {"Origin": "http://evil.example"},
		"cross-origin text/plain with token": withOrigin,
	} {
		code, hdr, out := srv.raw(http.MethodPost, "/rules", "text/plain", rule, h)
		t.Logf("%s: %d %s %v", what, code, strings.TrimSpace(out), hdr.Values("Access-Control-Allow-Origin"))
		if code/100 == 2 || hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s: %d, Access-Control-Allow-Origin %q", what, code, hdr.Get("Access-Control-Allow-Origin"))
		}
	}
	code, hdr, out := srv.raw(http.MethodPost, "/rules", "application/json", rule, withOrigin)
	t.Logf("cross-origin JSON with token: %d %s", code, strings.TrimSpace(out))
	if code != http.StatusForbidden || hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("cross-origin JSON with the token: %d, want 403 without CORS headers", code)
	}
	code, hdr, out = srv.raw(http.MethodOptions, "/rules", "", nil, map[string]string{"Origin": "http://evil.example",
		"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"})
	t.Logf("preflight: %d %s %v", code, strings.TrimSpace(out), hdr)
	if code/100 == 2 || hdr.Get("Access-Control-Allow-Origin") != "" || hdr.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("preflight: %d, headers %v; want refused without CORS headers", code, hdr)
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("id", "xs")
	_ = mw.Close()
	for _, c := range []struct {
		ct   string
		body []byte
	}{
		{"text/plain", rule},
		{"text/plain;charset=UTF-8", rule},
		{"application/x-www-form-urlencoded", rule},
		{mw.FormDataContentType(), mp.Bytes()},
		{"", rule},
	} {
		code, _, out := srv.raw(http.MethodPost, "/rules", c.ct, c.body, srv.bearer())
		t.Logf("POST /rules as %q with the token: %d %s", c.ct, code, strings.TrimSpace(out))
		if code != http.StatusUnsupportedMediaType {
			t.Errorf("POST /rules as %q: %d, want 415", c.ct, code)
		}
	}
	if srv.ruleExists("xs") {
		t.Fatal("a refused request created the rule")
	}
	if code, _, out := srv.raw(http.MethodPost, "/rules", "application/json", rule, srv.bearer()); code != http.StatusCreated {
		t.Errorf("POST /rules as JSON with the token: %d %s", code, out)
	}
}

// TestHostEndpointsRefused: the REST endpoints that write files of the
// server's host or read files it names (uploads, imports) are refused.
func TestHostEndpointsRefused(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "")
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/config/uploads", `{"name": "x.txt", "content": "x"}`},
		{http.MethodDelete, "/config/uploads/x.txt", ``},
		{http.MethodPost, "/ruleset/import", `{"file": "/etc/hostname"}`},
		{http.MethodPost, "/data/import", `{"file": "/etc/hostname"}`},
		{http.MethodPost, "/v2/data/import", `{}`},
		{http.MethodPost, "/async/data/import", `{}`},
	} {
		code, _, out := srv.raw(c.method, c.path, "application/json", []byte(c.body), srv.bearer())
		t.Logf("%s %s: %d %s", c.method, c.path, code, strings.TrimSpace(out))
		if code != http.StatusForbidden {
			t.Errorf("%s %s: %d, want 403", c.method, c.path, code)
		}
	}
	if _, err := os.Stat(filepath.Join(srv.home, "data", "uploads", "x.txt")); err == nil {
		t.Error("an upload was written")
	}
}

// TestLocalIORefused: eKuiper's sinks and sources that act on the server's
// host are refused when a rule is created, unless RMQFLOW_SQL_LOCAL_SINKS /
// ..._SOURCES names them; the file sink then writes only under
// RMQFLOW_SQL_FILE_DIR.
func TestLocalIORefused(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "evil")
	srv := startServer(t, "")
	srv.call(http.MethodPost, "/streams", map[string]string{"sql": `CREATE STREAM sim () WITH (TYPE="simulator", FORMAT="JSON")`})
	create := func(id string, action map[string]any, sql string) (int, string) {
		if sql == "" {
			sql = "SELECT * FROM sim"
		}
		code, out := srv.try(http.MethodPost, "/rules", map[string]any{"id": id, "sql": sql, "actions": []map[string]any{action}})
		return code, string(out)
	}
	for i, a := range []map[string]any{
		{"file": map[string]any{"path": filepath.Join(outside, "out.txt")}},
		{"rocketmq_ack": map[string]any{"after": map[string]any{"file": map[string]any{"path": filepath.Join(outside, "out.txt")}}}},
		{"websocket": map[string]any{"path": "/ws"}},
		{"sse": map[string]any{"path": "/sse"}},
		{"neuron": map[string]any{"url": "ipc:///tmp/x.ipc"}},
	} {
		code, out := create("sink"+string(rune('a'+i)), a, "")
		t.Logf("%v: %d %s", a, code, out)
		if code/100 == 2 || !strings.Contains(out, "RMQFLOW_SQL_LOCAL_SINKS") && !strings.Contains(out, "after.file") {
			t.Errorf("%v: %d %s; want refused naming RMQFLOW_SQL_LOCAL_SINKS", a, code, out)
		}
	}
	for _, src := range []string{`TYPE="file", DATASOURCE="../../../../etc/hostname"`, `TYPE="httppush", DATASOURCE="/push"`} {
		name := "src" + strings.ToLower(regexp.MustCompile(`"(\w+)"`).FindStringSubmatch(src)[1])
		srv.call(http.MethodPost, "/streams", map[string]string{"sql": "CREATE STREAM " + name + " () WITH (" + src + ", FORMAT=\"JSON\")"})
		code, out := create("r"+name, map[string]any{"log": map[string]any{}}, "SELECT * FROM "+name)
		t.Logf("%s: %d %s", src, code, out)
		if code/100 == 2 || !strings.Contains(out, "RMQFLOW_SQL_LOCAL_SOURCES") {
			t.Errorf("a rule over %s: %d %s; want refused naming RMQFLOW_SQL_LOCAL_SOURCES", src, code, out)
		}
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("%s was created", outside)
	}
	srv.stop()

	// Allowed, under a directory.
	dir, home := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "etc", "sources"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "etc", "sources", "simulator.yaml"),
		[]byte("default:\n  data:\n    - n: 1\n  interval: 200ms\n  loop: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, home, "RMQFLOW_SQL_LOCAL_SINKS=file", "RMQFLOW_SQL_FILE_DIR="+dir)
	srv.call(http.MethodPost, "/streams", map[string]string{"sql": `CREATE STREAM sim () WITH (TYPE="simulator", FORMAT="JSON")`})
	for i, path := range []string{filepath.Join(outside, "out.txt"), filepath.Join(dir, "..", "evil", "out.txt"), "../evil/out.txt", dir, filepath.Join(dir, "{{.a}}.txt")} {
		code, out := create("f"+string(rune('a'+i)), map[string]any{"file": map[string]any{"path": path}}, "")
		t.Logf("file sink at %s: %d %s", path, code, out)
		if code/100 == 2 || !strings.Contains(out, "RMQFLOW_SQL_FILE_DIR") {
			t.Errorf("a file sink at %s: %d %s; want refused naming RMQFLOW_SQL_FILE_DIR", path, code, out)
		}
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("%s was created", outside)
	}
	for i, path := range []string{"sub/out.txt", filepath.Join(dir, "abs.txt")} {
		code, out := create("ok"+string(rune('a'+i)), map[string]any{"file": map[string]any{"path": path, "rollingCount": 1}}, "")
		if code != http.StatusCreated {
			t.Errorf("a file sink at %s under the directory: %d %s", path, code, out)
		}
	}
	eventually(t, 30*time.Second, "the file sink writes under the directory", func() (bool, string) {
		var found []string
		_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				found = append(found, p)
			}
			return nil
		})
		return len(found) >= 2, strings.Join(found, " ")
	})
}

// runRefused runs rmqflow-sql with env (on a fresh home and a free REST
// address unless env sets them) and returns its exit code and output; a
// server that starts is killed after 30 s.
func runRefused(t *testing.T, env ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary)
	cmd.Env = append(os.Environ(), "RMQFLOW_SQL_HOME="+t.TempDir(), "RMQFLOW_SQL_REST="+freeAddr(t),
		"RMQFLOW_SQL_HTTPPUSH="+freeAddr(t))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestNonLoopbackRefused: a listener on another address than loopback
// needs RMQFLOW_SQL_ALLOW_REMOTE=true; with it the REST API still needs the
// token.
func TestNonLoopbackRefused(t *testing.T) {
	t.Parallel()
	for _, env := range []string{
		"RMQFLOW_SQL_REST=0.0.0.0:" + portOf(freeAddr(t)),
		"RMQFLOW_SQL_REST=[::]:" + portOf(freeAddr(t)),
		"RMQFLOW_SQL_HTTPPUSH=0.0.0.0:" + portOf(freeAddr(t)),
	} {
		code, out := runRefused(t, env)
		t.Logf("%s: exit %d: %s", env, code, strings.TrimSpace(out))
		if code != 1 || !strings.Contains(out, "RMQFLOW_SQL_ALLOW_REMOTE") || strings.Contains(out, "0.0.0.0:"+"9081") {
			t.Errorf("%s: exit %d, output %q; want exit 1 naming RMQFLOW_SQL_ALLOW_REMOTE", env, code, out)
		}
	}
	addr := "0.0.0.0:" + portOf(freeAddr(t))
	srv := startServerAt(t, "", addr, "RMQFLOW_SQL_ALLOW_REMOTE=true")
	if code, _, _ := srv.raw(http.MethodGet, "/rules", "", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /rules on %s without the token: %d, want 401", addr, code)
	}
	if code, _, out := srv.raw(http.MethodGet, "/rules", "", nil, srv.bearer()); code != http.StatusOK {
		t.Errorf("GET /rules on %s with the token: %d %s", addr, code, out)
	}
}

// TestListenersNamed: the httppush listener is where RMQFLOW_SQL_HTTPPUSH
// says; the eKuiper settings rmqflow-sql replaces are refused, naming the
// rmqflow-sql setting to use; a taken httppush address is refused.
func TestListenersNamed(t *testing.T) {
	t.Parallel()
	push := freeAddr(t)
	srv := startServer(t, "", "RMQFLOW_SQL_HTTPPUSH="+push)
	eventually(t, 10*time.Second, "the httppush listener on "+push, func() (bool, string) {
		c, err := net.DialTimeout("tcp", push, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, "not listening"
	})
	srv.stop()
	for env, want := range map[string]string{
		"KUIPER__BASIC__RESTPORT=9999":            "RMQFLOW_SQL_REST",
		"KUIPER__BASIC__RESTIP=0.0.0.0":           "RMQFLOW_SQL_REST",
		"KUIPER__SOURCE__HTTPSERVERIP=0.0.0.0":    "RMQFLOW_SQL_HTTPPUSH",
		"KUIPER__SOURCE__HTTPSERVERPORT=1234":     "RMQFLOW_SQL_HTTPPUSH",
		"KUIPER__BASIC__AUTHENTICATION=true":      "RMQFLOW_SQL_TOKEN",
		"KUIPER__BASIC__PORT=20498":               "RMQFLOW_SQL_RPC",
		"RMQFLOW_SQL_RPC=127.0.0.1:20498":         "-tags core",
		"RMQFLOW_SQL_LOCAL_SINKS=file":            "RMQFLOW_SQL_FILE_DIR",
		"RMQFLOW_SQL_LOCAL_SINKS=rest":            "RMQFLOW_SQL_LOCAL_SINKS",
		"RMQFLOW_SQL_HTTPPUSH=" + srv.addrTaken(): "RMQFLOW_SQL_HTTPPUSH",
	} {
		code, out := runRefused(t, env)
		t.Logf("%s: exit %d: %s", env, code, strings.TrimSpace(out))
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d, output %q; want exit 1 naming %s", env, code, out, want)
		}
	}
}

// addrTaken is an address something listens on for the rest of the test.
func (s *server) addrTaken() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// listening lists the TCP addresses a process listens on (Linux /proc).
func listening(pid int) ([]string, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
				continue
			}
			out = append(out, procAddr(fs[1]))
		}
	}
	return out, nil
}

// procAddr decodes /proc/net/tcp's "0100007F:1F90" (IPv4 only; IPv6 as is).
func procAddr(s string) string {
	h, p, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(p, 16, 16)
	if len(h) != 8 {
		return s
	}
	v, _ := strconv.ParseUint(h, 16, 32)
	ip := net.IPv4(byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
