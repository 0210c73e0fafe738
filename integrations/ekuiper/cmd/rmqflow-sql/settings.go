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

	rmqkuiper "github.com/rmqflow/rmqflow/integrations/ekuiper"
)

// settings is rmqflow-sql's configuration, from its environment.
type settings struct {
	home string
	// rest is the REST API's address (RMQFLOW_SQL_REST); httppush the
	// listener of eKuiper's httppush source, websocket and sse
	// (RMQFLOW_SQL_HTTPPUSH); rpc the CLI's RPC server, in builds that have
	// it (RMQFLOW_SQL_RPC).
	rest, httppush, rpc hostPort
	// token is the REST API's credential; tokenFile where it was written,
	// empty when RMQFLOW_SQL_TOKEN gave it.
	token, tokenFile string
	host             rmqkuiper.HostAccess
}

// hostPort is a listener's address.
type hostPort struct {
	host string
	port int
}

func (a hostPort) String() string { return net.JoinHostPort(a.host, strconv.Itoa(a.port)) }

// minTokenLen is the shortest RMQFLOW_SQL_TOKEN accepted.
const minTokenLen = 32

// tokenFileName is the token's file in the home, written at each start.
const tokenFileName = "rest.token"

// replaced are eKuiper settings that rmqflow-sql sets itself, with the
// setting to use instead; one in the environment is refused (kuiper.yaml's
// values are overridden).
var replaced = map[string]string{
	"KUIPER__BASIC__RESTIP":          "RMQFLOW_SQL_REST",
	"KUIPER__BASIC__RESTPORT":        "RMQFLOW_SQL_REST",
	"KUIPER__BASIC__IP":              "RMQFLOW_SQL_RPC",
	"KUIPER__BASIC__PORT":            "RMQFLOW_SQL_RPC",
	"KUIPER__SOURCE__HTTPSERVERIP":   "RMQFLOW_SQL_HTTPPUSH",
	"KUIPER__SOURCE__HTTPSERVERPORT": "RMQFLOW_SQL_HTTPPUSH",
	"KUIPER__BASIC__AUTHENTICATION":  "RMQFLOW_SQL_TOKEN (rmqflow-sql's REST API always needs its token)",
}

// readSettings reads the RMQFLOW_SQL_* settings (home is already made).
func readSettings(home string) (*settings, error) {
	s := &settings{home: home}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if use, ok := replaced[strings.ToUpper(k)]; ok {
			return nil, fmt.Errorf("%s: rmqflow-sql sets it; use %s", k, use)
		}
		if strings.HasPrefix(strings.ToUpper(k), "KUIPER__BASIC__RESTTLS") {
			return nil, fmt.Errorf("%s: rmqflow-sql's REST API does not serve TLS (put a TLS proxy in front)", k)
		}
	}
	remote := false
	if v := os.Getenv("RMQFLOW_SQL_ALLOW_REMOTE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("RMQFLOW_SQL_ALLOW_REMOTE=%q: want true or false", v)
		}
		remote = b
	}
	var err error
	if s.rest, err = listenAddr("RMQFLOW_SQL_REST", "127.0.0.1:9081", remote,
		"the REST API still needs the token, which travels in clear over HTTP: put TLS in front"); err != nil {
		return nil, err
	}
	if s.httppush, err = listenAddr("RMQFLOW_SQL_HTTPPUSH", "127.0.0.1:10081", remote,
		"the httppush listener has no credential: whoever reaches it can post rows to httppush streams and read websocket and sse sinks"); err != nil {
		return nil, err
	}
	if s.rest.String() == s.httppush.String() {
		return nil, fmt.Errorf("RMQFLOW_SQL_REST and RMQFLOW_SQL_HTTPPUSH are both %s", s.rest)
	}
	rpc, set := os.LookupEnv("RMQFLOW_SQL_RPC")
	switch {
	case !hasRPC && set:
		return nil, fmt.Errorf("RMQFLOW_SQL_RPC=%q: this build has no RPC server (built with -tags core); unset it", rpc)
	case hasRPC && !set:
		return nil, errors.New("this build (without -tags core) serves eKuiper's CLI over RPC, which has no credential: " +
			"set RMQFLOW_SQL_RPC=127.0.0.1:20498 to accept that on this machine, or build with -tags core")
	case hasRPC:
		if s.rpc, err = listenAddr("RMQFLOW_SQL_RPC", "", false, "the RPC server has no credential"); err != nil {
			return nil, err
		}
	}
	if err := s.readToken(); err != nil {
		return nil, err
	}
	s.host = rmqkuiper.HostAccess{
		Sinks: list(os.Getenv("RMQFLOW_SQL_LOCAL_SINKS")), Sources: list(os.Getenv("RMQFLOW_SQL_LOCAL_SOURCES")),
		FileDir:      os.Getenv("RMQFLOW_SQL_FILE_DIR"),
		SinksSetting: "RMQFLOW_SQL_LOCAL_SINKS", SourcesSetting: "RMQFLOW_SQL_LOCAL_SOURCES", FileDirSetting: "RMQFLOW_SQL_FILE_DIR",
	}
	return s, nil
}

func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// listenAddr reads a listener's host:port from env (def when unset). The
// host is required (":9081" would listen on every interface), and one that
// is not a loopback address needs RMQFLOW_SQL_ALLOW_REMOTE=true (remote);
// why says what that exposes.
func listenAddr(env, def string, remote bool, why string) (hostPort, error) {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	h, p, err := net.SplitHostPort(v)
	if err != nil {
		return hostPort{}, fmt.Errorf("%s=%q: want host:port: %w", env, v, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return hostPort{}, fmt.Errorf("%s=%q: the port is not a number from 1 to 65535", env, v)
	}
	if h == "" {
		return hostPort{}, fmt.Errorf("%s=%q: give the host too (127.0.0.1:%s)", env, v, p)
	}
	if !loopback(h) {
		if env == "RMQFLOW_SQL_RPC" {
			return hostPort{}, fmt.Errorf("%s=%q: only a loopback address (127.0.0.1) is accepted: %s", env, v, why)
		}
		if !remote {
			return hostPort{}, fmt.Errorf("%s=%q listens beyond this machine: set RMQFLOW_SQL_ALLOW_REMOTE=true to allow it (%s)", env, v, why)
		}
	}
	return hostPort{h, port}, nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readToken takes the REST API's token from RMQFLOW_SQL_TOKEN, or makes a
// new one for writeToken. Neither the value nor its length is printed.
func (s *settings) readToken() error {
	if t, set := os.LookupEnv("RMQFLOW_SQL_TOKEN"); set {
		if len(t) < minTokenLen || strings.ContainsAny(t, " \t\r\n") {
			return fmt.Errorf("RMQFLOW_SQL_TOKEN: want at least %d characters without blanks", minTokenLen)
		}
		s.token = t
		return nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	s.token = base64.RawURLEncoding.EncodeToString(b)
	s.tokenFile = filepath.Join(s.home, tokenFileName)
	return nil
}

// writeToken writes a token made by readToken to <home>/rest.token (0600),
// replacing the file of the last start, or removes that file when
// RMQFLOW_SQL_TOKEN gave the token. It runs once the REST address is
// bound, so that a server that cannot start leaves a running one's file.
func (s *settings) writeToken() error {
	file := filepath.Join(s.home, tokenFileName)
	if s.tokenFile == "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp, err := os.CreateTemp(s.home, tokenFileName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(s.token + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
