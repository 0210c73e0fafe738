package rmqkuiper

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// props reads the configuration eKuiper hands a source or sink (its YAML
// section and the stream's options, or a rule action's object), remembering
// which keys it read so that the others can be reported.
type props struct {
	m    map[string]any
	used map[string]bool
	err  error
}

func newProps(m map[string]any) *props { return &props{m: m, used: map[string]bool{}} }

func (p *props) fail(key, format string, args ...any) {
	if p.err == nil {
		p.err = &ConfError{Key: key, Reason: fmt.Sprintf(format, args...)}
	}
}

// ConfError is a bad or missing configuration key.
type ConfError struct {
	Key    string
	Reason string
}

func (e *ConfError) Error() string { return fmt.Sprintf("rocketmq: %s: %s", e.Key, e.Reason) }

func (p *props) get(key string) (any, bool) {
	p.used[key] = true
	v, ok := p.m[key]
	if !ok || v == nil {
		return nil, false
	}
	if s, isStr := v.(string); isStr && s == "" {
		return nil, false
	}
	return v, true
}

func (p *props) str(key string) string {
	v, ok := p.get(key)
	if !ok {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case fmt.Stringer:
		return x.String()
	}
	p.fail(key, "want a string, got %T", v)
	return ""
}

func (p *props) required(key string) string {
	s := p.str(key)
	if s == "" {
		p.fail(key, "required")
	}
	return s
}

func (p *props) boolean(key string) bool {
	v, ok := p.get(key)
	if !ok {
		return false
	}
	switch x := v.(type) {
	case bool:
		return x
	case string:
		b, err := strconv.ParseBool(x)
		if err != nil {
			p.fail(key, "want true or false, got %q", x)
		}
		return b
	}
	p.fail(key, "want true or false, got %T", v)
	return false
}

func (p *props) integer(key string) int {
	v, ok := p.get(key)
	if !ok {
		return 0
	}
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > math.MaxInt32 {
			p.fail(key, "want a whole number, got %v", x)
		}
		return int(x)
	case string:
		n, err := strconv.Atoi(x)
		if err != nil {
			p.fail(key, "want a whole number, got %q", x)
		}
		return n
	}
	p.fail(key, "want a whole number, got %T", v)
	return 0
}

func (p *props) float(key string) float64 {
	v, ok := p.get(key)
	if !ok {
		return 0
	}
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			p.fail(key, "want a number, got %q", x)
		}
		return f
	}
	p.fail(key, "want a number, got %T", v)
	return 0
}

// duration reads "1m30s"-style strings, or a number of milliseconds (eKuiper's
// own convention for durations).
func (p *props) duration(key string) time.Duration {
	v, ok := p.get(key)
	if !ok {
		return 0
	}
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(x)
		if err != nil {
			p.fail(key, "want a duration such as \"30s\" or milliseconds, got %q", x)
		}
		return d
	case int:
		return time.Duration(x) * time.Millisecond
	case int64:
		return time.Duration(x) * time.Millisecond
	case float64:
		return time.Duration(x * float64(time.Millisecond))
	}
	p.fail(key, "want a duration such as \"30s\" or milliseconds, got %T", v)
	return 0
}

func (p *props) strings(key string) []string {
	v, ok := p.get(key)
	if !ok {
		return nil
	}
	switch x := v.(type) {
	case string:
		var out []string
		for _, s := range strings.Split(x, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				p.fail(key, "want a list of strings, got a %T in it", e)
				return nil
			}
			out = append(out, s)
		}
		return out
	case []string:
		return x
	}
	p.fail(key, "want a list of strings, got %T", v)
	return nil
}

// unknown lists the keys that were given and never read, but for the keys
// eKuiper itself adds or reads (common).
func (p *props) unknown(common map[string]bool) []string {
	var out []string
	for k := range p.m {
		if !p.used[k] && !common[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// connection reads the connection keys shared by the source and the sinks:
// the reference SQL connector's names (endpoints, namespace, access-key,
// tls-enabled, request-timeout) plus ca-file, access-key-env and
// secret-key-env; the reference's secret-key is refused (plainSecret).
func (p *props) connection() rmqflow.Connection {
	c := rmqflow.Connection{
		Endpoints:      p.required("endpoints"),
		Namespace:      p.str("namespace"),
		RequestTimeout: p.duration("request-timeout"),
	}
	ak, sk := p.str("access-key"), ""
	// eKuiper logs a source's configuration section and an action's
	// properties at info level ("get conf for rocketmq with conf key ...",
	// "provision source/sink ... with props ..."): the secret key is only
	// taken from the environment variable secret-key-env names, and a plain
	// secret-key is refused (without its value in the error).
	if err := plainSecret(p.m); err != nil {
		p.used["secret-key"] = true
		if p.err == nil {
			p.err = err
		}
	}
	for _, e := range [][2]string{{"access-key-env", "access-key"}, {"secret-key-env", "secret-key"}} {
		name := p.str(e[0])
		if name == "" {
			continue
		}
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			p.fail(e[0], "the environment variable %s is not set", name)
			continue
		}
		if e[1] == "access-key" {
			if ak != "" {
				p.fail(e[0], "access-key and access-key-env exclude each other")
			}
			ak = v
		} else {
			sk = v
		}
	}
	if (ak == "") != (sk == "") {
		p.fail("secret-key-env", "access-key and the secret key (secret-key-env) go together")
	}
	c.Credentials = client.Credentials{AccessKey: ak, AccessSecret: sk}
	if p.boolean("tls-enabled") {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if ca := p.str("ca-file"); ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				p.fail("ca-file", "%v", err)
			} else {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					p.fail("ca-file", "%s holds no PEM certificate", ca)
				}
				tc.RootCAs = pool
			}
		}
		c.TLS = tc
	} else if p.str("ca-file") != "" {
		p.fail("ca-file", "needs tls-enabled")
	}
	return c
}

// plainSecret refuses a configuration holding the secret key itself
// ("secret-key", in any case): eKuiper logs configurations at info level,
// and stores rules and conf keys as given. The error does not hold the
// value.
func plainSecret(m map[string]any) error {
	for k, v := range m {
		if !strings.EqualFold(k, "secret-key") || v == nil || v == "" {
			continue
		}
		return &ConfError{Key: k, Reason: "a plain secret key is refused, as eKuiper logs configurations at info level " +
			"and stores them as given: put it in an environment variable of the server and name that variable in secret-key-env"}
	}
	return nil
}
