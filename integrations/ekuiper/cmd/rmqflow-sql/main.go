// Command rmqflow-sql is LF Edge eKuiper's server with the rmqflow
// RocketMQ source "rocketmq" and sinks "rocketmq" and "rocketmq_ack"
// compiled in: streaming SQL over RocketMQ 5 lite topics, with acks that
// follow the rule's deliveries (docs/sql.md).
//
//	go run -C integrations/ekuiper -tags core ./cmd/rmqflow-sql
//
// It keeps its configuration, rules and logs in $RMQFLOW_SQL_HOME (default
// ~/.rmqflow-sql), creating it on first start, and serves eKuiper's REST API
// on 127.0.0.1:9081 ($RMQFLOW_SQL_REST sets another address). SIGINT or
// SIGTERM stops it.
package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lf-edge/ekuiper/v2/cmd"

	rmqkuiper "github.com/rmqflow/rmqflow/integrations/ekuiper"
)

const usage = `rmqflow-sql: eKuiper's streaming SQL server with RocketMQ 5 (rmqflow) compiled in.

Usage: rmqflow-sql

Environment:
  RMQFLOW_SQL_HOME   configuration, rules and logs (default ~/.rmqflow-sql;
                     created with etc/kuiper.yaml and etc/sources/rocketmq.yaml
                     on first start)
  RMQFLOW_SQL_REST   the REST API's host:port (default 127.0.0.1:9081; it
                     sets KUIPER__BASIC__RESTIP and ...RESTPORT; the host
                     is required)
  KUIPER__...        any eKuiper setting, as eKuiper reads it, but for
                     KUIPER__RULE__QOS (0), ...ISEVENTTIME (false) and
                     ...CONCURRENCY (1), which rmqflow-sql sets

Create a stream and a rule with curl (see docs/sql.md):
  curl -X POST 127.0.0.1:9081/streams -d '{"sql":"CREATE STREAM agents () WITH (TYPE=\"rocketmq\", DATASOURCE=\"agents\", FORMAT=\"JSON\", CONF_KEY=\"default\")"}'

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
	if err := prepare(); err != nil {
		fmt.Fprintf(os.Stderr, "rmqflow-sql: %v\n", err)
		os.Exit(1)
	}
	rmqkuiper.Register()
	cmd.Main()
}

// prepare makes the home directory eKuiper runs in and points eKuiper at
// it, listening on 127.0.0.1 only unless told otherwise.
func prepare() error {
	home := os.Getenv("RMQFLOW_SQL_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("no home directory for ~/.rmqflow-sql; set RMQFLOW_SQL_HOME: %w", err)
		}
		home = filepath.Join(h, ".rmqflow-sql")
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return err
	}
	// plugins/<type>: a build without -tags core lists them at start and
	// stops when one is missing.
	for _, d := range []string{"etc/sources", "data", "log", "plugins/sources", "plugins/sinks", "plugins/functions", "plugins/portable"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			return err
		}
	}
	if err := writeOnce(filepath.Join(home, "etc", "kuiper.yaml"), kuiperYAML); err != nil {
		return err
	}
	// etc/client.yaml: where eKuiper's kuiper CLI, run with
	// KuiperBaseKey=<home>, finds the server's RPC port (it stops without it).
	if err := writeOnce(filepath.Join(home, "etc", "client.yaml"), func() (string, error) {
		return "basic:\n  host: 127.0.0.1\n  port: 20498\n", nil
	}); err != nil {
		return err
	}
	if err := writeOnce(filepath.Join(home, "etc", "sources", "rocketmq.yaml"), func() (string, error) {
		return rmqkuiper.DefaultSourceYAML, nil
	}); err != nil {
		return err
	}
	// eKuiper logs a stream's configuration section when a rule starts: a
	// plain secret-key there is refused before anything is logged.
	for _, name := range []string{"rocketmq.yaml", "rocketmq.json"} {
		if err := rmqkuiper.CheckSourceFile(filepath.Join(home, "etc", "sources", name)); err != nil {
			return err
		}
	}
	host, port := "127.0.0.1", "9081"
	if rest := os.Getenv("RMQFLOW_SQL_REST"); rest != "" {
		h, p, err := net.SplitHostPort(rest)
		if err != nil {
			return fmt.Errorf("RMQFLOW_SQL_REST=%q: %w", rest, err)
		}
		if _, err := strconv.Atoi(p); err != nil {
			return fmt.Errorf("RMQFLOW_SQL_REST=%q: the port is not a number", rest)
		}
		if h == "" {
			// ":9081" would bind every interface.
			return fmt.Errorf("RMQFLOW_SQL_REST=%q: give the host too (127.0.0.1:%s, or 0.0.0.0:%s to listen on every interface)", rest, p, p)
		}
		host, port = h, p
	}
	// The rule defaults the ack-mode sink check cannot see (it reads each
	// rule's own options): a checkpoint (qos) restores rows of an earlier
	// run, event time reorders rows, concurrency too. They are forced over
	// kuiper.yaml, and an environment that asks otherwise is refused.
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if want, ok := forcedRule[strings.ToUpper(k)]; ok && !strings.EqualFold(strings.TrimSpace(v), want) {
			return fmt.Errorf("%s=%s: rmqflow-sql keeps the rule default %s (a rule reading a rocketmq stream in ack-mode sink must not use it; see docs/sql.md)", k, v, want)
		}
	}
	for k, v := range forcedRule {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	// eKuiper panics in a goroutine (exit 2) when its REST port is taken:
	// find out first, and say so.
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return fmt.Errorf("the REST address %s is not free (set RMQFLOW_SQL_REST): %w", net.JoinHostPort(host, port), err)
	}
	l.Close()
	// RMQFLOW_SQL_REST decides the REST address; the rocketmq source asks it
	// for its rules' definitions.
	forced := map[string]bool{"KuiperBaseKey": true, "KUIPER__BASIC__RESTIP": true, "KUIPER__BASIC__RESTPORT": true}
	for k, v := range map[string]string{
		"KuiperBaseKey":             home,
		"KUIPER__BASIC__RESTIP":     host,
		"KUIPER__BASIC__RESTPORT":   port,
		"KUIPER__BASIC__IP":         "127.0.0.1",
		"KUIPER__BASIC__PPROF":      "false",
		"KUIPER__BASIC__CONSOLELOG": "true",
	} {
		if _, set := os.LookupEnv(k); !set || forced[k] {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
	}
	return nil
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

// kuiperYAML is the server's configuration on first start: everything on
// 127.0.0.1, logs to the console, rules and state in data/ (SQLite), and a
// key of its own for the secrets eKuiper encrypts.
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
  ip: 127.0.0.1
  port: 20498
  restIp: 127.0.0.1
  restPort: 9081
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
source:
  httpServerIp: 127.0.0.1
  httpServerPort: 10081
store:
  type: sqlite
  extStateType: sqlite
`, base64.StdEncoding.EncodeToString(key)), nil
}
