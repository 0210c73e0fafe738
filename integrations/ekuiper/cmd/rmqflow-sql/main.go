// Command rmqflow-sql is LF Edge eKuiper's server with the rmqflow
// RocketMQ source "rocketmq" and sinks "rocketmq" and "rocketmq_ack"
// compiled in: streaming SQL over RocketMQ 5 lite topics, with acks that
// follow the rule's deliveries (docs/sql.md).
//
//	go run -C integrations/ekuiper -tags core ./cmd/rmqflow-sql
//
// It keeps its configuration, rules and logs in $RMQFLOW_SQL_HOME (default
// ~/.rmqflow-sql), creating it on first start, and serves eKuiper's REST API
// on 127.0.0.1:9081 ($RMQFLOW_SQL_REST sets another address) to callers
// that send its token (written to <home>/rest.token at each start, or
// $RMQFLOW_SQL_TOKEN). eKuiper itself listens on no REST port: the gate in
// front of it reaches it on a unix socket in <home>/run (0700). SIGINT or
// SIGTERM stops it.
package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lf-edge/ekuiper/v2/cmd"
	"github.com/lf-edge/ekuiper/v2/pkg/model"
	"github.com/lf-edge/ekuiper/v2/pkg/modules"

	rmqkuiper "github.com/rmqflow/rmqflow/integrations/ekuiper"
)

const usage = `rmqflow-sql: eKuiper's streaming SQL server with RocketMQ 5 (rmqflow) compiled in.

Usage: rmqflow-sql

Environment:
  RMQFLOW_SQL_HOME          configuration, rules and logs (default ~/.rmqflow-sql;
                            created with etc/kuiper.yaml and etc/sources/rocketmq.yaml
                            on first start)
  RMQFLOW_SQL_REST          the REST API's host:port (default 127.0.0.1:9081)
  RMQFLOW_SQL_TOKEN         the REST API's token (at least 32 characters); unset,
                            a new one is written to <home>/rest.token (0600) at
                            each start. Every request but GET /ping sends
                            "Authorization: Bearer <token>"
  RMQFLOW_SQL_HTTPPUSH      the listener of eKuiper's httppush source and
                            websocket/sse sinks (default 127.0.0.1:10081)
  RMQFLOW_SQL_RPC           builds without -tags core only, and required there:
                            the CLI's RPC server (no credential; loopback only)
  RMQFLOW_SQL_ALLOW_REMOTE  true: RMQFLOW_SQL_REST and ..._HTTPPUSH may listen
                            on other addresses than loopback
  RMQFLOW_SQL_LOCAL_SINKS   sinks acting on this host that rules may use, of
                            file, neuron, websocket, sse (default none)
  RMQFLOW_SQL_FILE_DIR      the directory the file sink writes under (required
                            with file in RMQFLOW_SQL_LOCAL_SINKS)
  RMQFLOW_SQL_LOCAL_SOURCES sources acting on this host that rules may use, of
                            file, neuron, httppush, websocket (default none)
  KUIPER__...               any eKuiper setting, as eKuiper reads it, but for
                            KUIPER__RULE__QOS (0), ...ISEVENTTIME (false),
                            ...CONCURRENCY (1) and the listeners and REST
                            authentication, which rmqflow-sql sets

Create a stream with curl (see docs/sql.md):
  curl -X POST 127.0.0.1:9081/streams -H "Authorization: Bearer $(cat ~/.rmqflow-sql/rest.token)" \
    -H 'Content-Type: application/json' \
    -d '{"sql":"CREATE STREAM agents () WITH (TYPE=\"rocketmq\", DATASOURCE=\"agents\", FORMAT=\"JSON\", CONF_KEY=\"default\", SHARED=\"false\")"}'

Exit codes: 0 stopped by a signal, 1 could not start, 2 bad usage.
`

func main() {
	for _, a := range os.Args[1:] {
		switch a {
		case "-h", "-help", "--help":
			fmt.Print(usage)
			os.Exit(0)
		default:
			fmt.Fprintf(os.Stderr, "rmqflow-sql: unknown argument %q\n\n%s", a, usage)
			os.Exit(2)
		}
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "rmqflow-sql: %v\n", err)
		os.Exit(1)
	}
	cmd.Main() // exits
}

// run prepares the home and the settings, starts the REST gate and sets
// eKuiper up to run behind it.
func run() error {
	s, err := prepare()
	if err != nil {
		return err
	}
	if err := rmqkuiper.GuardHostAccess(s.host); err != nil {
		return err
	}
	// eKuiper panics in a goroutine (exit 2) when its REST port is taken
	// and ignores a taken httppush port: the gate listens before eKuiper
	// starts, and the httppush address is checked free.
	rl, err := net.Listen("tcp", s.rest.String())
	if err != nil {
		return fmt.Errorf("the REST address %s is not free (set RMQFLOW_SQL_REST): %w", s.rest, err)
	}
	pl, err := net.Listen("tcp", s.httppush.String())
	if err != nil {
		rl.Close()
		return fmt.Errorf("the httppush address %s is not free (set RMQFLOW_SQL_HTTPPUSH): %w", s.httppush, err)
	}
	pl.Close()
	if err := s.writeToken(); err != nil {
		rl.Close()
		return err
	}
	inner, err := newInnerREST(s.home)
	if err != nil {
		rl.Close()
		return err
	}
	ekuiperListener = inner.listen
	rmqkuiper.RegisterWith(rmqkuiper.Config{RuleAPI: internalURL, Client: inner.client(),
		SourceFile: filepath.Join(s.home, "etc", "sources", "rocketmq.yaml")})
	modules.RegisterConfHook(s.confHook)
	srv := newGate(s.token, inner).server()
	go func() {
		if err := srv.Serve(rl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "rmqflow-sql: the REST API on %s: %v\n", s.rest, err)
			os.Exit(1)
		}
	}()
	where := "the token is RMQFLOW_SQL_TOKEN's value"
	if s.tokenFile != "" {
		where = "the token is in " + s.tokenFile + ", new at each start"
	}
	fmt.Fprintf(os.Stderr, "rmqflow-sql: REST API on http://%s (send \"Authorization: Bearer <token>\"; %s)\n", s.rest, where)
	fmt.Fprintf(os.Stderr, "rmqflow-sql: httppush listener on %s (no credential; used by the httppush source and websocket/sse sinks only)\n", s.httppush)
	if hasRPC {
		fmt.Fprintf(os.Stderr, "rmqflow-sql: eKuiper's CLI RPC server on %s (no credential)\n", s.rpc)
	}
	return nil
}

// confHook sets eKuiper's configuration after it read kuiper.yaml and its
// environment: the listeners where rmqflow-sql's settings say (eKuiper's
// REST "port" is only named in its start message: it serves on the unix
// socket of innerREST), its own REST authentication off (the gate checks
// the token), Prometheus and pprof, when turned on, on the REST API behind
// the gate rather than on ports of their own (Prometheus would listen on
// 0.0.0.0), and file access by URL kept to data/uploads.
func (s *settings) confHook(c *model.KuiperConf) {
	if c.Basic.RestTls != nil {
		fmt.Fprintln(os.Stderr, "rmqflow-sql: etc/kuiper.yaml sets basic.restTls: rmqflow-sql's REST API does not serve TLS (remove it; put a TLS proxy in front)")
		os.Exit(1)
	}
	c.Basic.RestIp, c.Basic.RestPort = s.rest.host, s.rest.port
	c.Basic.Authentication = false
	c.Basic.AllowExternalFileAccess = false
	if hasRPC {
		c.Basic.Ip, c.Basic.Port = s.rpc.host, s.rpc.port
	} else {
		c.Basic.Ip = "127.0.0.1"
	}
	if c.Source == nil {
		c.Source = &model.SourceConf{}
	}
	c.Source.HttpServerIp, c.Source.HttpServerPort = s.httppush.host, s.httppush.port
	if c.Basic.Prometheus {
		c.Basic.PrometheusPort = c.Basic.RestPort
	}
	if c.Basic.Pprof {
		c.Basic.PprofIp, c.Basic.PprofPort = c.Basic.RestIp, c.Basic.RestPort
	}
}

// prepare makes the home directory eKuiper runs in, points eKuiper at it
// and reads the settings.
func prepare() (*settings, error) {
	home := os.Getenv("RMQFLOW_SQL_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("no home directory for ~/.rmqflow-sql; set RMQFLOW_SQL_HOME: %w", err)
		}
		home = filepath.Join(h, ".rmqflow-sql")
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return nil, err
	}
	// plugins/<type>: a build without -tags core lists them at start and
	// stops when one is missing. etc/sinks and etc/multilingual: eKuiper
	// reads its UI metadata there and logs an error when they are missing.
	for _, d := range []string{"etc/sources", "etc/sinks", "etc/multilingual", "data", "log",
		"plugins/sources", "plugins/sinks", "plugins/functions", "plugins/portable"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := writeOnce(filepath.Join(home, "etc", "kuiper.yaml"), kuiperYAML); err != nil {
		return nil, err
	}
	// etc/mqtt_source.json: eKuiper reads the mqtt source's UI metadata
	// from it before the other sources' and logs an error without it.
	if err := writeOnce(filepath.Join(home, "etc", "mqtt_source.json"), func() (string, error) {
		return `{"about": {"trial": false, "description": {"en_US": "eKuiper's mqtt source (UI metadata; rmqflow-sql writes this stub)"}}, "libs": []}` + "\n", nil
	}); err != nil {
		return nil, err
	}
	if err := writeOnce(filepath.Join(home, "etc", "sources", "rocketmq.yaml"), func() (string, error) {
		return rmqkuiper.DefaultSourceYAML, nil
	}); err != nil {
		return nil, err
	}
	// eKuiper logs a stream's configuration section when a rule starts: a
	// plain secret-key there is refused before anything is logged.
	for _, name := range []string{"rocketmq.yaml", "rocketmq.json"} {
		if err := rmqkuiper.CheckSourceFile(filepath.Join(home, "etc", "sources", name)); err != nil {
			return nil, err
		}
	}
	// The rule defaults the ack-mode sink check cannot see (it reads each
	// rule's own options): a checkpoint (qos) restores rows of an earlier
	// run, event time reorders rows, concurrency too. They are forced over
	// kuiper.yaml, and an environment that asks otherwise is refused.
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if want, ok := forcedRule[strings.ToUpper(k)]; ok && !strings.EqualFold(strings.TrimSpace(v), want) {
			return nil, fmt.Errorf("%s=%s: rmqflow-sql keeps the rule default %s (a rule reading a rocketmq stream in ack-mode sink must not use it; see docs/sql.md)", k, v, want)
		}
	}
	s, err := readSettings(home)
	if err != nil {
		return nil, err
	}
	if hasRPC {
		// etc/client.yaml: where eKuiper's kuiper CLI, run with
		// KuiperBaseKey=<home>, finds the server's RPC port.
		if err := os.WriteFile(filepath.Join(home, "etc", "client.yaml"),
			[]byte(fmt.Sprintf("basic:\n  host: %s\n  port: %d\n", s.rpc.host, s.rpc.port)), 0o600); err != nil {
			return nil, err
		}
	}
	for k, v := range forcedRule {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	// The listeners are set in eKuiper's environment too (confHook sets
	// them again after kuiper.yaml), so that its checks of the file's
	// values see them.
	forced := map[string]string{
		"KuiperBaseKey":                  home,
		"KUIPER__BASIC__RESTIP":          s.rest.host,
		"KUIPER__BASIC__RESTPORT":        strconv.Itoa(s.rest.port),
		"KUIPER__SOURCE__HTTPSERVERIP":   s.httppush.host,
		"KUIPER__SOURCE__HTTPSERVERPORT": strconv.Itoa(s.httppush.port),
	}
	if hasRPC {
		forced["KUIPER__BASIC__IP"], forced["KUIPER__BASIC__PORT"] = s.rpc.host, strconv.Itoa(s.rpc.port)
	}
	for k, v := range forced {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	for k, v := range map[string]string{"KUIPER__BASIC__PPROF": "false", "KUIPER__BASIC__CONSOLELOG": "true"} {
		if _, set := os.LookupEnv(k); !set {
			if err := os.Setenv(k, v); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// forcedRule are the rule defaults rmqflow-sql sets over kuiper.yaml.
var forcedRule = map[string]string{
	"KUIPER__RULE__QOS":         "0",
	"KUIPER__RULE__ISEVENTTIME": "false",
	"KUIPER__RULE__CONCURRENCY": "1",
}

// writeOnce writes the file made by content unless it exists.
func writeOnce(path string, content func() (string, error)) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s, err := content()
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o600)
}

// kuiperYAML is the server's configuration on first start: logs to the
// console, rules and state in data/ (SQLite), and a key of its own for the
// secrets eKuiper encrypts. The listeners are rmqflow-sql's settings
// (confHook), not this file's.
func kuiperYAML() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return fmt.Sprintf(`# rmqflow-sql's eKuiper configuration (written on first start; edit freely).
basic:
  logLevel: info
  consoleLog: true
  fileLog: false
  # The listeners (restIp/restPort, ip/port, source.httpServerIp/Port) and
  # authentication are rmqflow-sql's: RMQFLOW_SQL_REST, ..._RPC,
  # ..._HTTPPUSH and its token override what this file says. Prometheus and
  # pprof, when true, are served on the REST API (behind the token).
  prometheus: false
  pprof: false
  timezone: Local
  ignoreCase: false
  rulePatrolInterval: 10s
  # the rest sink may call private addresses (127.0.0.1, 10.x) only when true
  enablePrivateNet: false
  gracefulShutdownTimeout: 10s
  aesKey: %s
# Rule defaults. rmqflow-sql forces qos 0, isEventTime false and
# concurrency 1 whatever this file says (KUIPER__RULE__* in its environment).
# A rule reading a rocketmq stream whose sinks ack must set
# "disableBufferFullDiscard": true itself (eKuiper does not take it from
# here). sendError false: an SQL error drops its row (see docs/sql.md);
# restartStrategy: a rule stopped by an error (a failed connect) starts again
# at the next patrol (basic.rulePatrolInterval).
rule:
  qos: 0
  sendError: false
  restartStrategy:
    attempts: 10
sink:
  enableCache: false
store:
  type: sqlite
  extStateType: sqlite
`, base64.StdEncoding.EncodeToString(key)), nil
}
