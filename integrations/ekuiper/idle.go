package rmqkuiper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lf-edge/ekuiper/contract/v2/api"
)

// A rule whose rows all get dropped delivers nothing, so nothing acks them,
// and the broker's FIFO per lite topic holds back the rest of their lite
// topics. When the source has ingested nothing for idle-ack, it asks the
// rule's own metrics (GET /rules/{id}/status and /topo) whether every row it
// ingested has left the rule: each node processed all it received, each
// node received all its upstream sent, and the source sent all the source
// ingested. Then the rows still pending were dropped (or failed, and were
// already left to come back), and are acked. A rule with a window or a join
// holds rows in its state, which the metrics do not show: it is never
// settled this way.

// topoDef is GET /rules/{id}/topo.
type topoDef struct {
	Sources []string            `json:"sources"`
	Edges   map[string][]string `json:"edges"`
}

// nodes lists every node of the topology.
func (t topoDef) nodes() []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, s := range t.Sources {
		add(s)
	}
	for u, vs := range t.Edges {
		add(u)
		for _, v := range vs {
			add(v)
		}
	}
	return out
}

// Node kinds in a rule's topology (GET /rules/{id}/topo), from the op
// names eKuiper's planner gives: "op_<n>_<kind>" for the SQL's operators,
// "op_<action>_<i>_<j>_<kind>" for the nodes before a sink. The source is
// "source_<stream>", a sink "sink_<action>_<i>".
var (
	sqlOp  = regexp.MustCompile(`^op_\d+_([a-zA-Z_]+)$`)
	sinkOp = regexp.MustCompile(`^op_(.+)_\d+_\d+_([a-zA-Z]+)$`)
	sinkNd = regexp.MustCompile(`^sink_(.+)_(\d+)$`)
)

// passOps are the SQL operators that pass rows on, or drop them, as they
// come; windowOps hold rows until a result (a window the SQL check
// approved). Any other op (a join, dedup_trigger, ratelimit, watermark,
// batch, cache...) is refused in ack-mode sink.
var (
	passOps = map[string]bool{"decoder": true, "payload_decoder": true, "decompress": true, "preprocessor": true,
		"emitter": true, "analytic": true, "filter": true, "agg_func": true, "aggregate": true, "having": true,
		"order": true, "project": true, "projectset": true, "windowFunc": true, "windowFilter": true}
	windowOps    = map[string]bool{"window": true, "inc_agg_window": true}
	sinkPassOps  = map[string]bool{"transform": true, "encode": true, "compress": true, "encrypt": true}
	errUnknownOp = errors.New("not a node kind the ack-mode check knows")
)

// nodeKind classifies a topology node: "source", "sink", "pass", "window",
// or an error for a node that could hold rows unseen.
func nodeKind(n string, sources []string) (string, error) {
	if slices.Contains(sources, n) {
		return "source", nil
	}
	if sinkNd.MatchString(n) {
		return "sink", nil
	}
	if m := sqlOp.FindStringSubmatch(n); m != nil {
		switch {
		case passOps[m[1]]:
			return "pass", nil
		case windowOps[m[1]]:
			return "window", nil
		}
		return "", fmt.Errorf("%s: %w", n, errUnknownOp)
	}
	if m := sinkOp.FindStringSubmatch(n); m != nil && sinkPassOps[m[2]] {
		return "pass", nil
	}
	return "", fmt.Errorf("%s: %w", n, errUnknownOp)
}

// checkTopo compares a running rule's topology with the definition the
// check approved: one source, only node kinds that pass rows on as they come
// (windows only when the approved SQL has one), and a sink for each of the
// approved actions and no other.
func checkTopo(def ruleDef, t topoDef) error {
	fail := func(format string, args ...any) error {
		return &RuleError{Rule: def.ID, Reason: fmt.Sprintf(format, args...)}
	}
	if len(t.Sources) != 1 {
		return fail("the running rule has %d sources, not one", len(t.Sources))
	}
	want := map[string]bool{}
	for i, a := range def.Actions {
		for kind := range a {
			want[fmt.Sprintf("sink_%s_%d", kind, i)] = true
		}
	}
	windows := len(windowCalls(sqlTokens(def.SQL))) > 0
	sinks := 0
	for _, n := range t.nodes() {
		k, err := nodeKind(n, t.Sources)
		if err != nil {
			return fail("the running rule has a node that could hold rows the ack-mode sink cannot see (%v): no batchSize/lingerInterval on acking actions, no interval on the stream, no joins or event time", err)
		}
		switch k {
		case "window":
			if !windows {
				return fail("the running rule has a window (%s) that the checked definition does not: was the rule updated while starting?", n)
			}
		case "sink":
			if !want[n] {
				return fail("the running rule has a sink %s that the checked definition does not: was the rule updated while starting?", n)
			}
			sinks++
		}
	}
	if sinks != len(want) {
		return fail("the running rule has %d sinks, the checked definition %d: was the rule updated while starting?", sinks, len(want))
	}
	return nil
}

// holdsRows reports whether a node holds rows in its state (a window), or
// is of a kind not known to pass them on: the idle check cannot see them.
func holdsRows(n string, sources []string) bool {
	k, err := nodeKind(n, sources)
	return err != nil || k == "window"
}

// metric sums a node's metric over its instances in a status document.
func metric(st map[string]any, node, name string) (float64, bool) {
	var sum float64
	found := false
	prefix, suffix := node+"_", "_"+name
	for k, v := range st {
		if !strings.HasPrefix(k, prefix) || !strings.HasSuffix(k, suffix) {
			continue
		}
		inst := strings.TrimSuffix(strings.TrimPrefix(k, prefix), suffix)
		if _, err := strconv.Atoi(inst); err != nil {
			continue
		}
		f, ok := v.(float64)
		if !ok {
			return 0, false
		}
		sum += f
		found = true
	}
	return sum, found
}

// drained reports whether the status shows every one of ingested rows gone
// through the topology, and why not.
func drained(t topoDef, st map[string]any, ingested int64) (bool, string) {
	ups := map[string][]string{}
	for u, vs := range t.Edges {
		for _, v := range vs {
			ups[v] = append(ups[v], u)
		}
	}
	isSource := map[string]bool{}
	for _, s := range t.Sources {
		isSource[s] = true
	}
	if len(t.Sources) != 1 {
		return false, "not one source"
	}
	get := func(node, name string) (float64, error) {
		v, ok := metric(st, node, name)
		if !ok {
			return 0, fmt.Errorf("no %s of %s", name, node)
		}
		return v, nil
	}
	for _, n := range t.nodes() {
		if holdsRows(n, t.Sources) {
			return false, n + " holds rows"
		}
		if b, err := get(n, "buffer_length"); err != nil || b != 0 {
			return false, fmt.Sprintf("%s: buffer %v %v", n, b, err)
		}
		if isSource[n] {
			out, err := get(n, "records_out_total")
			if err != nil || out != float64(ingested) {
				return false, fmt.Sprintf("%s sent %v of %d", n, out, ingested)
			}
			continue
		}
		in, err1 := get(n, "records_in_total")
		done, err2 := get(n, "messages_processed_total")
		if err1 != nil || err2 != nil || in != done {
			return false, fmt.Sprintf("%s: in %v processed %v", n, in, done)
		}
		if len(ups[n]) != 1 {
			return false, n + " has several inputs"
		}
		sent, err := get(ups[n][0], "records_out_total")
		if err != nil || sent != in {
			return false, fmt.Sprintf("%s received %v of %v", n, in, sent)
		}
	}
	return true, ""
}

// getJSON gets u into v.
func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := restDo(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("GET %s: %s", u, resp.Status)}
	}
	return json.Unmarshal(b, v)
}

// statusError is a REST answer other than 200.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// settleIdleLoop runs while the source does: every interval in which nothing
// was ingested and rows are pending, it checks the rule's metrics and acks
// the rows that left the rule.
func (s *source) settleIdleLoop(ctx context.Context, sctx api.StreamContext, led *ledger, interval time.Duration) {
	base := ruleAPI() + "/rules/" + url.PathEscape(sctx.GetRuleId())
	var topo *topoDef
	last, since := int64(-1), time.Now()
	t := time.NewTicker(max(interval/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := led.ingested()
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) < interval || led.pending() == 0 {
			continue
		}
		if topo == nil {
			var td topoDef
			if err := getJSON(ctx, base+"/topo", &td); err != nil {
				sctx.GetLogger().Debugf("rocketmq source: idle check: %v", err)
				continue
			}
			if len(td.Sources) != 1 || func() bool {
				for _, n := range td.nodes() {
					if holdsRows(n, td.Sources) {
						return true
					}
				}
				return false
			}() {
				return // a window, a join or several sources: never idle-settled
			}
			topo = &td
		}
		// Two drained snapshots with the same counters, a moment apart: a
		// node hands a row from its worker to its sender after counting it
		// processed (eKuiper's ordered workers), so one snapshot could miss a
		// row in that hand-over; the second would see it moved on.
		// The source node counts rows, the ledger gives out seqs from its
		// base: the rows ingested are n less the base.
		count := n - led.base()
		first, ok := s.drainedSnapshot(ctx, sctx, base, *topo, count)
		if !ok {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(interval/10, 50*time.Millisecond)):
		}
		second, ok := s.drainedSnapshot(ctx, sctx, base, *topo, count)
		if !ok || !equalCounters(first, second) {
			continue
		}
		if led.ingested() != n {
			continue // ingested meanwhile: the snapshot may not cover it
		}
		acked, err := led.settleIdle(ctx, n)
		if err != nil {
			sctx.GetLogger().Warnf("rocketmq source: %v", err)
		}
		if acked > 0 {
			sctx.GetLogger().Infof("rocketmq source: acked %d messages whose rows the rule dropped (idle for %v)", acked, interval)
		}
	}
}

// drainedSnapshot reads the rule's status and reports whether it shows n
// rows drained.
func (s *source) drainedSnapshot(ctx context.Context, sctx api.StreamContext, base string, topo topoDef, n int64) (map[string]any, bool) {
	var st map[string]any
	if err := getJSON(ctx, base+"/status", &st); err != nil {
		sctx.GetLogger().Debugf("rocketmq source: idle check: %v", err)
		return nil, false
	}
	if ok, why := drained(topo, st, n); !ok {
		sctx.GetLogger().Debugf("rocketmq source: idle check: %s", why)
		return nil, false
	}
	return st, true
}

// equalCounters reports whether two status documents have the same record
// and processing counters.
func equalCounters(a, b map[string]any) bool {
	for k, v := range a {
		if strings.HasSuffix(k, "_total") && !strings.Contains(k, "exceptions") && b[k] != v {
			return false
		}
	}
	return true
}
