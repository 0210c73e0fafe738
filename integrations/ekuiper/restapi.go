package rmqkuiper

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Config is what the rocketmq source needs from the eKuiper binary it runs
// in; RegisterWith takes it.
type Config struct {
	// RuleAPI is the base URL of eKuiper's REST API, where the source reads
	// its rule's definition, topology and metrics and its stream's
	// definition, and restarts a rule whose definition changed. Empty: the environment's
	// $RMQFLOW_SQL_RULE_API, else http://<KUIPER__BASIC__RESTIP>:<...RESTPORT>
	// (0.0.0.0 read as 127.0.0.1), else http://127.0.0.1:9081.
	RuleAPI string
	// Client sends those requests. Nil: http.DefaultClient. A binary whose
	// REST API needs a credential (eKuiper's basic.authentication, or a
	// proxy) gives a client whose Transport adds it; rmqflow-sql gives one
	// that dials eKuiper's own REST server on its private unix socket.
	Client *http.Client
	// SourceFile is the rocketmq source's configuration file, which the
	// source reads to check a stream's CONF_KEY (checkConfKey). Empty:
	// $KuiperBaseKey/etc/sources/rocketmq.yaml.
	SourceFile string
}

var (
	restMu  sync.RWMutex
	restCfg Config
)

// RegisterWith is Register with the source's configuration.
func RegisterWith(c Config) {
	restMu.Lock()
	restCfg = c
	restMu.Unlock()
	Register()
}

// ruleAPI is the base URL of the REST API the source asks (Config.RuleAPI).
func ruleAPI() string {
	restMu.RLock()
	u := restCfg.RuleAPI
	restMu.RUnlock()
	if u != "" {
		return strings.TrimRight(u, "/")
	}
	if u := os.Getenv("RMQFLOW_SQL_RULE_API"); u != "" {
		return strings.TrimRight(u, "/")
	}
	host, port := os.Getenv("KUIPER__BASIC__RESTIP"), os.Getenv("KUIPER__BASIC__RESTPORT")
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "9081"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// restDo sends req with the configured client.
func restDo(req *http.Request) (*http.Response, error) {
	restMu.RLock()
	c := restCfg.Client
	restMu.RUnlock()
	if c == nil {
		c = http.DefaultClient
	}
	return c.Do(req)
}
