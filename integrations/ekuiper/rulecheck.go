package rmqkuiper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/lf-edge/ekuiper/contract/v2/api"

	"github.com/rmqflow/rmqflow"
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
	Graph   json.RawMessage  `json:"graph"`
	Actions []map[string]any `json:"actions"`
	Options struct {
		IsEventTime              bool `json:"isEventTime"`
		Concurrency              int  `json:"concurrency"`
		SendMetaToSink           bool `json:"sendMetaToSink"`
		DisableBufferFullDiscard bool `json:"disableBufferFullDiscard"`
		Qos                      int  `json:"qos"`
	} `json:"options"`
}

// sqlTokens splits a rule's SQL the way eKuiper's scanner reads it, enough
// for the checks below: identifiers in lower case (backquotes taken off),
// each string literal as a single "'" token, comments ("-- ..." to the end of
// the line, "/* ... */") left out, any other character its own token.
func sqlTokens(sql string) []string {
	var out []string
	r := []rune(sql)
	skipSpace := func(i int) int {
		for i < len(r) && unicode.IsSpace(r[i]) {
			i++
		}
		return i
	}
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case unicode.IsLetter(c) || c == '_':
			j := i
			for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_') {
				j++
			}
			out = append(out, strings.ToLower(string(r[i:j])))
			i = j
		case c == '`':
			j := i + 1
			for j < len(r) && r[j] != '`' {
				j++
			}
			out = append(out, strings.ToLower(string(r[i+1:min(j, len(r))])))
			i = j + 1
		case c == '"' || c == '\'':
			// As eKuiper's scanner (xsql.Scanner.ScanString): a backslash
			// makes the next character literal, and after \' in a single-
			// quoted string the character after the quote is literal too.
			single := c == '\''
			j, escape := i+1, false
		str:
			for j < len(r) {
				switch ch := r[j]; {
				case ch == '"' && !escape:
					if !single {
						break str
					}
					j++
				case ch == '\'' && !escape && single:
					break str
				case ch == '\\' && !escape:
					escape = true
					j++
					if j < len(r) && r[j] == '\'' && single {
						j++ // taken with the backslash; escape stays set
					}
				default:
					escape = false
					j++
				}
			}
			out = append(out, "'")
			i = j + 1
		case c == '-' || c == '/':
			// eKuiper allows blanks between the two characters of "--" and "/*".
			j := skipSpace(i + 1)
			switch {
			case c == '-' && j < len(r) && r[j] == '-':
				for j < len(r) && r[j] != '\n' {
					j++
				}
				i = j
			case c == '/' && j < len(r) && r[j] == '*':
				j++
				for j < len(r) && (r[j] != '*' || j+1 >= len(r) || r[j+1] != '/') {
					j++
				}
				i = j + 2
			default:
				out = append(out, string(c))
				i++
			}
		default:
			out = append(out, string(c))
			i++
		}
	}
	return out
}

// windowCalls finds the window functions a rule's SQL calls, each with its
// number of arguments.
func windowCalls(toks []string) map[string]int {
	calls := map[string]int{}
	for i := 0; i+1 < len(toks); i++ {
		if !strings.HasSuffix(toks[i], "window") || toks[i+1] != "(" {
			continue
		}
		args, depth := 1, 0
		for j := i + 2; j < len(toks); j++ {
			switch toks[j] {
			case "(":
				depth++
			case ")":
				depth--
			case ",":
				if depth == 0 {
					args++
				}
			}
			if depth < 0 {
				break
			}
		}
		if i+2 < len(toks) && toks[i+2] == ")" {
			args = 0
		}
		calls[toks[i]] = max(calls[toks[i]], args)
	}
	return calls
}

// statePartitioned reports whether a STATEWINDOW call is followed by
// OVER (... PARTITION BY ...): a window per partition, each emitting on its
// own.
func statePartitioned(toks []string) bool {
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] != "statewindow" || toks[i+1] != "(" {
			continue
		}
		j, depth := i+2, 0
		for ; j < len(toks) && depth >= 0; j++ {
			switch toks[j] {
			case "(":
				depth++
			case ")":
				depth--
			}
		}
		// toks[j] follows the call's closing parenthesis.
		if j+1 >= len(toks) || toks[j] != "over" || toks[j+1] != "(" {
			continue
		}
		for k, depth := j+2, 0; k < len(toks) && depth >= 0; k++ {
			switch toks[k] {
			case "(":
				depth++
			case ")":
				depth--
			case "partition":
				if depth == 0 {
					return true
				}
			}
		}
	}
	return false
}

// selectsSeq reports whether the SQL names a column rocketmq_seq ("AS
// rocketmq_seq").
func selectsSeq(toks []string) bool {
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == "as" && toks[i+1] == MetaSeq {
			return true
		}
	}
	return false
}

// ackingAction reports whether an action acks: rocketmq_ack, or rocketmq
// unless its "ack" is false (read as the sink reads it).
func ackingAction(kind string, props map[string]any) bool {
	switch kind {
	case "rocketmq_ack":
		return true
	case "rocketmq":
		p := newProps(props)
		if _, set := p.m["ack"]; set {
			return p.boolean("ack") || p.err != nil
		}
		return true
	}
	return false
}

// heldBack says why the broker holds back a stream's next messages while
// earlier ones are in flight (until they are acked): lite mode (one lite
// topic's messages one after another) or a FIFO consumer group (a queue's);
// "" for a normal group in simple mode, which gets what the topic has.
func heldBack(c sourceConf, fifoGroup bool) string {
	switch {
	case c.src.Mode == rmqflow.ModeLite:
		return "the stream is in lite mode: the broker delivers a lite topic's next message only once the one in flight is acked"
	case fifoGroup:
		return fmt.Sprintf("the stream's consumer group %s is a FIFO group: the broker delivers a queue's next messages only once those in flight are acked", c.src.Group)
	}
	return ""
}

// checkRule reads the rule's definition and returns how many acking sinks it
// has, or a *RuleError naming what would let it lose rows. held is
// heldBack's answer for the rule's stream.
func checkRule(r ruleDef, held string) (int, error) {
	fail := func(format string, args ...any) (int, error) {
		return 0, &RuleError{Rule: r.ID, Reason: fmt.Sprintf(format, args...)}
	}
	if g := bytes.TrimSpace(r.Graph); len(g) > 0 && !bytes.Equal(g, []byte("null")) {
		// A graph's nodes are named by its author: the topology check
		// could not tell a window node from a filter.
		return fail("a rule defined by a graph is not checked: define it with SQL")
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
	if o.Qos > 0 {
		return fail(`the rule option "qos" must be 0: a checkpoint restores rows of an earlier run, whose seqs this run's ledger does not know`)
	}
	toks := sqlTokens(r.SQL)
	for name, args := range windowCalls(toks) {
		switch {
		case name == "countwindow" && args <= 1 && held != "":
			return fail("COUNTWINDOW(n) can wait for ever here: %s, and the window acks its rows only when it emits, after n rows; "+
				"while fewer than n messages are in flight it cannot fill, and its messages wait for pending-max-age (1 h), come back and end in the dead-letter queue. "+
				"Use TUMBLINGWINDOW or SESSIONWINDOW (COUNTWINDOW(n) is allowed in simple mode through a group that is not FIFO)", held)
		case name == "statewindow" && held != "":
			return fail("STATEWINDOW can wait for ever here: %s, and the window acks its rows only when a row meets its emit condition; "+
				"that row can be one the broker holds back behind the window's own rows (a session's end behind its begin), and then its messages wait for pending-max-age (1 h), come back and end in the dead-letter queue. "+
				"Use TUMBLINGWINDOW or SESSIONWINDOW (STATEWINDOW is allowed in simple mode through a group that is not FIFO)", held)
		case name == "statewindow" && statePartitioned(toks):
			return fail("STATEWINDOW ... OVER (PARTITION BY ...) emits each partition on its own: a partition's result would ack the rows other partitions hold in their open windows; use STATEWINDOW without PARTITION BY")
		case name == "tumblingwindow" || name == "sessionwindow" || name == "statewindow":
		case name == "countwindow" && args <= 1:
		case name == "countwindow":
			return fail("COUNTWINDOW with an interval overlaps: its windows reuse rows after their first result; use COUNTWINDOW(n)")
		case name == "hoppingwindow" || name == "slidingwindow":
			return fail("%s: overlapping windows reuse rows after their first result; use TUMBLINGWINDOW, SESSIONWINDOW or COUNTWINDOW(n)", strings.ToUpper(name))
		default:
			return fail("%s: not a window kind the check knows; use TUMBLINGWINDOW, SESSIONWINDOW or COUNTWINDOW(n)", strings.ToUpper(name))
		}
	}
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == "dedup_trigger" && toks[i+1] == "(" {
			return fail("DEDUP_TRIGGER holds rows in its state where the ack-mode checks cannot see them")
		}
	}
	if !o.SendMetaToSink && !selectsSeq(toks) {
		return fail("the rows must carry %s: select meta(%s) AS %s (max(meta(%s)) AS %s in a window), or set the rule option \"sendMetaToSink\": true",
			MetaSeq, MetaSeq, MetaSeq, MetaSeq, MetaSeq)
	}
	n := 0
	for i, a := range r.Actions {
		for kind, v := range a {
			props, _ := v.(map[string]any)
			if !ackingAction(kind, props) {
				continue
			}
			p := newProps(props)
			ackingActionKeys(p)
			if p.err != nil {
				return fail("action %d (%s): %v", i, kind, p.err)
			}
			if after, ok := props["after"].(map[string]any); ok && kind == "rocketmq_ack" {
				for k, v := range after {
					inner, _ := v.(map[string]any)
					if err := wrappedSinkSafe(k, inner); err != nil {
						return fail("action %d (%s): %v", i, kind, err)
					}
				}
			}
			n++
		}
	}
	if n == 0 {
		return fail(`no action acks: add a "rocketmq" or "rocketmq_ack" action, or give the stream ack-mode ingest`)
	}
	return n, nil
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
	resp, err := restDo(req)
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
		return ruleDef{}, &permanentError{fmt.Errorf("rocketmq: GET %s: %s (the REST API wants a credential the source does not send: give it a client that does, rmqkuiper.RegisterWith)", u, resp.Status)}
	default:
		return ruleDef{}, fmt.Errorf("rocketmq: GET %s: %s", u, resp.Status)
	}
	var r ruleDef
	if err := json.Unmarshal(b, &r); err != nil {
		return ruleDef{}, &permanentError{fmt.Errorf("rocketmq: GET %s: %w", u, err)}
	}
	return r, nil
}

// confirmRule checks that the rule running is the one checkRule approved:
// eKuiper (v2.4.0) starts an updated rule before it stores the new
// definition, so GET /rules/{id} may still give the old one. The running
// topology must match def (checkTopo), and the stored definition read again
// after it must equal def; else the rule fails, and its restart reads the
// stored definition again.
func confirmRule(ctx context.Context, def ruleDef) error {
	u := ruleAPI() + "/rules/" + url.PathEscape(def.ID) + "/topo"
	var t topoDef
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := getJSON(ctx, u, &t)
		if err == nil && len(t.Sources) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rocketmq: reading the topology of rule %s: %v", def.ID, err)
		case <-time.After(wait):
		}
	}
	if err := checkTopo(def, t); err != nil {
		return err
	}
	again, err := fetchRule(ctx, def.ID)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(again, def) {
		return &RuleError{Rule: def.ID, Reason: "the rule's stored definition changed while it started (an update): starting again"}
	}
	return nil
}

// defWatchTimes are the delays after which a running rule's stored
// definition is read again (the last one repeats).
var defWatchTimes = []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second}

// watchRule reads the rule's stored definition again while the run lasts:
// an update whose definition eKuiper stored only after this run's check
// (confirmRule read the old one twice) shows as a definition that differs
// from the checked one. Then the run's ledger acks nothing more (its
// messages come back) and the rule is restarted, so that the check runs on
// what is stored now. The first read that finds the checked definition
// confirms the run: its ledger acks nothing before (ledger.confirm), so that
// an update the topology check cannot see (a window kind, an option) acks
// nothing either. A read that fails before it is tried again after the
// first delay.
func watchRule(ctx context.Context, sctx api.StreamContext, def ruleDef, led *ledger, times []time.Duration) {
	confirmed := false
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-time.After(times[min(i, len(times)-1)]):
		}
		var now ruleDef
		if err := getJSON(ctx, ruleAPI()+"/rules/"+url.PathEscape(def.ID), &now); err != nil {
			sctx.GetLogger().Debugf("rocketmq source: re-reading rule %s: %v", def.ID, err)
			if confirmed {
				i++
			}
			continue
		}
		i++
		if reflect.DeepEqual(now, def) {
			if !confirmed {
				confirmed = true
				// Logged before the acks: the tests order the two.
				sctx.GetLogger().Infof("rocketmq source: rule %s confirmed (its stored definition is the one checked): the run acks from now on", def.ID)
				n, err := led.confirm(ctx)
				if err != nil {
					sctx.GetLogger().Warnf("rocketmq source: confirming rule %s: %v", def.ID, err)
				}
				sctx.GetLogger().Debugf("rocketmq source: rule %s: acked the %d messages held until it was confirmed", def.ID, n)
			}
			continue
		}
		err := &RuleError{Rule: def.ID, Reason: "the rule's stored definition is no longer the one checked (updated while starting): this run acks nothing more, and the rule is restarted"}
		led.poison(err)
		sctx.GetLogger().Errorf("%v", err)
		// Not waited for: the restart stops this run, which waits for this
		// goroutine.
		go func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, ruleAPI()+"/rules/"+url.PathEscape(def.ID)+"/restart", nil)
			if resp, err := restDo(req); err != nil {
				sctx.GetLogger().Errorf("rocketmq source: restarting rule %s: %v", def.ID, err)
			} else {
				resp.Body.Close()
			}
		}()
		return
	}
}
