package rmqkuiper_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecretsStayOutOfLogs: eKuiper logs a source's configuration section
// and an action's properties at info level, so the secret key is taken only
// from an environment variable (secret-key-env). A rule whose source and
// sink authenticate that way runs (debug logging on) without the secret in
// any log line, REST answer or metric; a plain secret-key is refused
// wherever it can be given (a rule's action, a conf key added over REST,
// etc/sources/rocketmq.yaml at start), without the secret in the refusal or
// the log.
func TestSecretsStayOutOfLogs(t *testing.T) {
	t.Parallel()
	tg := fakeTarget(t, "sec", false)
	const envSecret, plainSecret = "EnvSecret-7f3a9c", "PlainSecret-2b8d41"
	home := t.TempDir()
	section := tg.sourceSection()
	section["access-key"], section["secret-key-env"] = "ak-test", "RMQ_TEST_SECRET"
	sourceSections(t, home, map[string]map[string]any{"test": section})
	srv := startServer(t, home, "RMQ_TEST_SECRET="+envSecret, "KUIPER__BASIC__DEBUG=true")
	srv.stream("s", tg.in, "test")
	out := tg.readOut(t)
	srv.rule("auth", "SELECT n, meta(rocketmq_lite_topic) AS session, meta(rocketmq_seq) AS rocketmq_seq FROM s",
		[]map[string]any{tg.sinkAction(map[string]any{"access-key": "ak-test", "secret-key-env": "RMQ_TEST_SECRET"})}, nil)
	srv.waitRunning("auth")
	tg.send(t, rowsN(5, func(i int) map[string]any { return map[string]any{"n": i} }), func(i int) string { return tg.lite(i) })
	eventually(t, 60*time.Second, "every row written", func() (bool, string) {
		return len(out.snapshot()) >= 5, fmt.Sprint(len(out.snapshot()))
	})
	// A plain secret-key in an action: refused when the rule is created.
	code, body := srv.try(http.MethodPost, "/rules", map[string]any{"id": "plain",
		"sql":     "SELECT n, meta(rocketmq_seq) AS rocketmq_seq FROM s",
		"actions": []map[string]any{tg.sinkAction(map[string]any{"access-key": "ak-test", "secret-key": plainSecret})},
		"options": map[string]any{"disableBufferFullDiscard": true}})
	if code/100 == 2 || !strings.Contains(string(body), "secret-key-env") || strings.Contains(string(body), plainSecret) {
		t.Errorf("a rule with a plain secret-key: %d %s", code, body)
	}
	// A plain secret-key in a conf key added over REST is refused by the
	// source's Validate (TestParseSource); the -tags core build the tests
	// run has no metadata API (404).
	code, body = srv.try(http.MethodPut, "/metadata/sources/rocketmq/confKeys/plain",
		map[string]any{"endpoints": tg.endpoint, "consumer-group": tg.inG, "access-key": "ak-test", "secret-key": plainSecret})
	if code != http.StatusNotFound && (code/100 == 2 || !strings.Contains(string(body), "secret-key-env") || strings.Contains(string(body), plainSecret)) {
		t.Errorf("a conf key with a plain secret-key: %d %s", code, body)
	}
	// Nothing the server answers or logs holds either secret.
	for _, path := range []string{"/rules/auth", "/rules/auth/status", "/rules/auth/topo", "/rules"} {
		if b := srv.call(http.MethodGet, path, nil); strings.Contains(string(b), envSecret) || strings.Contains(string(b), plainSecret) {
			t.Errorf("GET %s holds a secret: %s", path, b)
		}
	}
	srv.stop()
	logs := srv.log.String()
	if !strings.Contains(logs, "provision sink") || !strings.Contains(logs, "ak-test") {
		t.Fatalf("the log does not show the configurations this test looks at:\n%s", logs)
	}
	_ = filepath.Walk(filepath.Join(home, "log"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			b, _ := os.ReadFile(path)
			logs += string(b)
		}
		return nil
	})
	for _, s := range []string{envSecret, plainSecret} {
		if i := strings.Index(logs, s); i >= 0 {
			t.Errorf("the secret %s is in the log: ...%s...", s, logs[max(0, i-300):min(len(logs), i+100)])
		}
	}
	// A plain secret-key in etc/sources/rocketmq.yaml (which eKuiper logs
	// whenever a rule's source starts): rmqflow-sql does not start.
	home = t.TempDir()
	section["secret-key"] = plainSecret
	delete(section, "secret-key-env")
	sourceSections(t, home, map[string]map[string]any{"test": section})
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "RMQFLOW_SQL_HOME="+home, "RMQFLOW_SQL_REST="+freeAddr(t), "RMQFLOW_SQL_HTTPPUSH="+freeAddr(t))
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(b), "secret-key-env") || strings.Contains(string(b), plainSecret) {
		t.Errorf("a plain secret-key in rocketmq.yaml: exit %v, output %q; want exit 1 naming secret-key-env", err, b)
	}
}
