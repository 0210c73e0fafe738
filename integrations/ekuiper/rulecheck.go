package rmqkuiper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
)

// RuleError is a rule that the rocketmq source refuses to run in ack-mode
// sink, because eKuiper could drop or reorder its rows and a later delivery
// would then ack a message whose row never reached a sink.
type RuleError struct {
	Rule   string
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("rocketmq: rule %s: %s (ack-mode sink; see docs/sql.md)", e.Rule, e.Reason)
}

// ruleDef is the part of a rule's definition (GET /rules/{id}) the check
// reads.
type ruleDef struct {
	ID      string           `json:"id"`
	SQL     string           `json:"sql"`
	Actions []map[string]any `json:"actions"`
	Options struct {
		IsEventTime              bool `json:"isEventTime"`
		Concurrency              int  `json:"concurrency"`
		SendMetaToSink           bool `json:"sendMetaToSink"`
		DisableBufferFullDiscard bool `json:"disableBufferFullDiscard"`
	} `json:"options"`
}

var (
	overlapping = regexp.MustCompile(`(?i)\b(hoppingwindow|slidingwindow)\s*\(|\bcountwindow\s*\(\s*\d+\s*,`)
	seqColumn   = regexp.MustCompile(`(?i)\b` + MetaSeq + `\b`)
)

// checkRule reads the rule's definition and returns how many acking sinks it
// has, or a *RuleError naming what would let it lose rows.
func checkRule(r ruleDef) (int, error) {
	fail := func(format string, args ...any) (int, error) {
		return 0, &RuleError{Rule: r.ID, Reason: fmt.Sprintf(format, args...)}
	}
	o := r.Options
	if !o.DisableBufferFullDiscard {
		return fail(`set the rule option "disableBufferFullDiscard": true (by default eKuiper drops the oldest row of a full buffer, and a later delivery would ack it)`)
	}
	if o.Concurrency > 1 {
		return fail(`the rule option "concurrency" must be 1 (rows must stay in ingest order)`)
	}
	if o.IsEventTime {
		return fail(`event-time windows ("isEventTime": true) reorder rows; use processing time`)
	}
	if m := overlapping.FindString(r.SQL); m != "" {
		return fail("%s...: overlapping windows reuse rows after their first result; use TUMBLINGWINDOW, SESSIONWINDOW or COUNTWINDOW(n)", strings.TrimSpace(m))
	}
	if !o.SendMetaToSink && !seqColumn.MatchString(r.SQL) {
		return fail("the rows must carry %s: select meta(%s) AS %s (max(meta(%s)) AS %s in a window), or set the rule option \"sendMetaToSink\": true",
			MetaSeq, MetaSeq, MetaSeq, MetaSeq, MetaSeq)
	}
	n := 0
	for _, a := range r.Actions {
		for kind, v := range a {
			props, _ := v.(map[string]any)
			switch kind {
			case "rocketmq":
				if ack, set := props["ack"]; set && (ack == false || ack == "false") {
					continue
				}
				n++
			case "rocketmq_ack":
				n++
			}
		}
	}
	if n == 0 {
		return fail(`no action acks: add a "rocketmq" or "rocketmq_ack" action, or give the stream ack-mode ingest`)
	}
	return n, nil
}

// ruleAPI is the base URL of the REST API the source asks for its rule's
// definition: $RMQFLOW_SQL_RULE_API, or eKuiper's REST address from the
// environment rmqflow-sql sets (KUIPER__BASIC__RESTIP, ...RESTPORT), or
// http://127.0.0.1:9081.
func ruleAPI() string {
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

// fetchRule gets GET /rules/{id}, retrying while the REST API is not up yet
// (eKuiper starts the rules it recovers before its REST server) until ctx
// ends.
func fetchRule(ctx context.Context, id string) (ruleDef, error) {
	u := ruleAPI() + "/rules/" + url.PathEscape(id)
	var last error
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		r, err := getRule(ctx, u)
		if err == nil {
			return r, nil
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return ruleDef{}, err
		}
		last = err
		select {
		case <-ctx.Done():
			return ruleDef{}, fmt.Errorf("rocketmq: reading rule %s from %s: %w", id, u, last)
		case <-time.After(wait):
		}
	}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func getRule(ctx context.Context, u string) (ruleDef, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ruleDef{}, &permanentError{err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ruleDef{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ruleDef{}, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return ruleDef{}, &permanentError{fmt.Errorf("rocketmq: GET %s: %s (REST authentication is on: the ack-mode sink check cannot read the rule)", u, resp.Status)}
	default:
		return ruleDef{}, fmt.Errorf("rocketmq: GET %s: %s", u, resp.Status)
	}
	var r ruleDef
	if err := json.Unmarshal(b, &r); err != nil {
		return ruleDef{}, &permanentError{fmt.Errorf("rocketmq: GET %s: %w", u, err)}
	}
	return r, nil
}
