package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes every command uses; scripts may rely on them.
const (
	exitOK          = 0 // done
	exitFailure     = 1 // failed for another reason
	exitUsage       = 2 // bad flags or arguments
	exitUnreachable = 3 // the endpoint did not answer
	exitNotFound    = 4 // unknown topic or group
	exitAuth        = 5 // credentials refused
)

// clientFooter ends the help of produce and consume.
const clientFooter = connEnvHelp + `
Exit codes: 0 done, 1 failure, 2 usage error, 3 endpoint unreachable (or the
broker kept failing for -max-outage), 4 unknown topic or group, 5 credentials
refused.
`

// connFlags are the connection flags shared by produce, consume and demo;
// each falls back to an environment variable.
type connFlags struct {
	endpoint  string
	namespace string
	accessKey string
	secretKey string
	tls       bool
	ca        string
	insecure  bool
	timeout   time.Duration
	verbose   bool
	log       io.Writer // where -v writes the library's log lines
}

const connEnvHelp = `Environment: RMQFLOW_ENDPOINT, RMQFLOW_NAMESPACE, RMQFLOW_ACCESS_KEY,
RMQFLOW_SECRET_KEY stand in for the flags of the same names.
`

func (c *connFlags) register(fs *flag.FlagSet, endpointHelp string) {
	fs.StringVar(&c.endpoint, "endpoint", os.Getenv("RMQFLOW_ENDPOINT"), endpointHelp)
	fs.StringVar(&c.namespace, "namespace", os.Getenv("RMQFLOW_NAMESPACE"), "resource `namespace`")
	fs.StringVar(&c.accessKey, "access-key", os.Getenv("RMQFLOW_ACCESS_KEY"), "access `key` to sign requests with")
	c.secretKey = os.Getenv("RMQFLOW_SECRET_KEY")
	fs.Var(secretFlag{&c.secretKey}, "secret-key", "`secret` of -access-key (never printed; default $RMQFLOW_SECRET_KEY)")
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS, verifying the broker's certificate against the system's roots (or -ca)")
	fs.StringVar(&c.ca, "ca", "", "trust the PEM certificates in `file` (implies -tls); rmqflow broker -ca-out writes the emulator's")
	fs.BoolVar(&c.insecure, "tls-insecure-skip-verify", false, "connect with TLS WITHOUT verifying the broker's certificate (implies -tls; anyone on the path can read and change the traffic)")
	fs.DurationVar(&c.timeout, "timeout", client.DefaultRequestTimeout, "deadline of each RPC")
	fs.BoolVar(&c.verbose, "v", false, "print the library's log lines (retries, reconnects) on stderr")
	c.log = fs.Output()
}

// secretFlag is a flag whose value is never printed: its String is empty,
// so help shows no default even when $RMQFLOW_SECRET_KEY set one.
type secretFlag struct{ p *string }

func (f secretFlag) String() string     { return "" }
func (f secretFlag) Set(v string) error { *f.p = v; return nil }

// connection builds the Connection; an unreadable -ca file is an error.
func (c *connFlags) connection() (rmqflow.Connection, error) {
	conn := rmqflow.Connection{Endpoints: c.endpoint, Namespace: c.namespace, RequestTimeout: c.timeout,
		Credentials: client.Credentials{AccessKey: c.accessKey, AccessSecret: c.secretKey},
		Logger:      slog.New(slog.DiscardHandler)}
	if c.verbose && c.log != nil {
		conn.Logger = slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if c.tls || c.ca != "" || c.insecure {
		conn.TLS = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.insecure}
	}
	if c.ca != "" {
		b, err := os.ReadFile(c.ca)
		if err != nil {
			return conn, &usageError{fmt.Sprintf("-ca: %v", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return conn, &usageError{fmt.Sprintf("-ca %s: no PEM certificate in it", c.ca)}
		}
		conn.TLS.RootCAs = pool
	}
	return conn, nil
}

// usageError is a bad flag value found after parsing: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// outageError is a run stopped because the broker kept failing for
// -max-outage: exit 3.
type outageError struct {
	what   string
	outage time.Duration
	err    error
}

func (e *outageError) Error() string {
	return fmt.Sprintf("%s failing for %v (-max-outage): %v", e.what, e.outage.Round(time.Millisecond), e.err)
}

func (e *outageError) Unwrap() error { return e.err }

// exitCode maps an error to an exit code and a message a user understands.
func exitCode(err error) (int, string) {
	var se *client.StatusError
	var oe *rmqflow.OptionError
	var ce *client.ConfigError
	var ue *usageError
	var re *rmqflow.ReceiveError
	var out *outageError
	switch {
	case err == nil:
		return exitOK, ""
	case errors.As(err, &oe), errors.As(err, &ce), errors.As(err, &ue):
		return exitUsage, err.Error()
	case errors.As(err, &out), errors.As(err, &re) && !re.Permanent:
		return exitUnreachable, err.Error() + " (is the endpoint right and the broker up?)"
	case strings.Contains(err.Error(), "x509: "), strings.Contains(err.Error(), "tls: "):
		return exitUnreachable, err.Error() + " (TLS: trust the broker's certificate with -ca FILE; rmqflow broker -ca-out FILE writes the emulator's)"
	case errors.As(err, &se):
		switch se.Code {
		case client.CodeTopicNotFound, client.CodeConsumerGroupNotFound, client.CodeNotFound:
			return exitNotFound, err.Error()
		case client.CodeMessagePropertyConflict:
			return exitNotFound, err.Error() + " (on RocketMQ 5.5.0 this is also what an unknown topic or a wrong message type gets)"
		case client.CodeUnauthorized, client.CodeForbidden:
			return exitAuth, err.Error() + " (check -access-key / -secret-key)"
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return exitUnreachable, err.Error() + " (is the endpoint right and the broker up?)"
	case codes.InvalidArgument:
		if strings.Contains(err.Error(), "not found") {
			return exitNotFound, err.Error()
		}
		if strings.Contains(err.Error(), "is expected to bind topic") {
			// RocketMQ's answer to a lite group used with a topic it is not
			// bound to, such as an unknown one.
			return exitNotFound, err.Error() + " (unknown topic, or a group bound to another one)"
		}
	case codes.Unauthenticated, codes.PermissionDenied:
		return exitAuth, err.Error()
	}
	return exitFailure, err.Error()
}

// fail prints err and returns its exit code.
func fail(stderr io.Writer, cmd string, err error) int {
	code, msg := exitCode(err)
	fmt.Fprintf(stderr, "rmqflow %s: %s\n", cmd, msg)
	return code
}

// isTerminal reports whether w is a terminal (for live progress lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress writes a live status line to a terminal, or nothing.
type progress struct {
	mu   sync.Mutex
	w    io.Writer
	on   bool
	last int
}

func newProgress(w io.Writer, on bool) *progress { return &progress{w: w, on: on && isTerminal(w)} }

func (p *progress) update(format string, args ...any) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	pad := ""
	if n := p.last - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.last = len(line)
}

func (p *progress) done() {
	if p.on && p.last > 0 {
		fmt.Fprintln(p.w)
	}
}

// jsonLine writes v as one JSON line.
func jsonLine(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(w, string(b))
}

// parseFlags parses args, handling -help: it returns (done, code).
// footer (environment and exit codes) ends the help.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, usage string, examples []example, footer string) (bool, int) {
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		if len(examples) > 0 {
			fmt.Fprintln(stdout, "\nExamples:")
			for _, e := range examples {
				fmt.Fprintf(stdout, "  rmqflow %s %s\n      %s\n", fs.Name(), e.args, e.what)
			}
		}
		fmt.Fprintln(stdout)
		fmt.Fprint(stdout, footer)
		return true, exitOK
	}
	if err != nil {
		return true, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "rmqflow %s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return true, exitUsage
	}
	return false, 0
}

type example struct{ args, what string }

// kvList is a repeatable key=value flag.
type kvList map[string]string

func (l kvList) String() string {
	parts := make([]string, 0, len(l))
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (l kvList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	l[k] = val
	return nil
}

// strList is a repeatable string flag.
type strList []string

func (l *strList) String() string     { return strings.Join(*l, ",") }
func (l *strList) Set(v string) error { *l = append(*l, v); return nil }
