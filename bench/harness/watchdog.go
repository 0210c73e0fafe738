package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// After hours of heavy load the 5.5.0 proxy on this machine degrades: long
// polls are refused with ILLEGAL_POLLING_TIME and Telemetry handshakes time
// out, and every later run fails the same way (a fresh proxy ends it). The
// watchdog restarts the proxy after a run failed with one of these signs, so
// that one bad stretch does not cost the rest of a two-hour run. The failed
// run stays failed and counts in its cell's ok/planned; the report lists
// each restart.

// degradedSigns are substrings of a peer's error that point at the proxy,
// not at the peer.
var degradedSigns = []string{
	"ILLEGAL_POLLING_TIME",
	"handshake",
	"Telemetry",
	"telemetry",
	"connection refused",
	"Unavailable",
}

// degraded reports whether a run's error looks like a degraded proxy.
func degraded(err string) bool {
	for _, s := range degradedSigns {
		if strings.Contains(err, s) {
			return true
		}
	}
	return false
}

// restart is one proxy restart by the watchdog.
type restart struct {
	After string // the run whose failure triggered it
	Took  time.Duration
	Err   string
}

// watch restarts the proxy when r failed with a sign of degradation. On the
// emulator, or when the run did not fail so, it does nothing.
func (b *bench) watch(ctx context.Context, r *run) {
	if b.tgt.fake != nil || b.cfg.noWatchdog || r.Result.Error == "" || !degraded(r.Result.Error) {
		return
	}
	desc := fmt.Sprintf("%s %s %s c=%d", r.Scenario, r.Peer.Name(), r.Mode, r.Concurrency)
	fmt.Fprintf(b.log, "harness: watchdog: %s failed with a sign of a degraded proxy; restarting the proxy ...\n", desc)
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, filepath.Join(b.cfg.repo, "scripts", "rocketmq.sh"), "restart-proxy").CombinedOutput()
	rs := restart{After: desc, Took: time.Since(t0)}
	if err != nil {
		rs.Err = fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(out)))
		fmt.Fprintf(b.log, "harness: watchdog: the restart failed: %s\n", rs.Err)
	} else {
		fmt.Fprintf(b.log, "harness: watchdog: proxy restarted in %s\n", rs.Took.Round(time.Second))
	}
	b.restarts = append(b.restarts, rs)
}
