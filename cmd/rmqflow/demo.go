package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rmqflow/rmqflow/internal/demo"
	"github.com/rmqflow/rmqflow/rmqfake"
)

const demoUsage = `Usage: rmqflow demo [flags]

Shows what fair throttling per lite topic does. One LITE main topic carries
many sessions (lite topics); one hot session floods it while the others send a
few messages each. The pipeline is: Source → keyed hand-off by lite topic to
worker shards → FairShare throttle → a slow "model call" → ack. It runs three
times: without the hot session (the baseline), then with it, throttle off and
throttle on; it prints a table per lite topic (received, acked, deferred,
p50/p99 latency from birth to ack), the cold sessions' p99 of the three runs
side by side, and writes an SVG chart of the cold sessions' latency in each
run (to -chart, by default rmqflow-demo.svg in the temporary directory; the
path is printed). -hot 0 leaves the hot session out: two runs, throttle off
and on, with no flood.

Without an endpoint it runs on the embedded emulator (rmqfake): no Java, no
setup; it creates -topic and -group there, in -namespace if one is given.
With -endpoint (or RMQFLOW_ENDPOINT) it runs against that broker, on -topic (a
LITE main topic) and -group (a wildcard lite group bound to it), which must
exist; scripts/rocketmq/fixtures.txt creates rmqflow-demo and rmqflow-demo-g.
-endpoint= (empty) runs on the emulator even with RMQFLOW_ENDPOINT set.

Flags:
`

var demoExamples = []example{
	{"-endpoint=", "run on the embedded emulator and write the chart to the temporary directory"},
	{"-sessions 50 -hot 1000 -chart /tmp/demo.svg", "a bigger flood"},
	{"-endpoint 127.0.0.1:18081", "against a real broker (make rocketmq-up creates the demo's topic and group)"},
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	var (
		conn                    connFlags
		topic, group, chartPath string
		sessions, hot, workers  int
		modelCall               time.Duration
		asJSON                  bool
	)
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn.register(fs, "a real broker's gRPC `host:port`; empty runs the embedded emulator")
	fs.StringVar(&topic, "topic", "rmqflow-demo", "LITE main `topic`")
	fs.StringVar(&group, "group", "rmqflow-demo-g", "wildcard lite `group` bound to -topic")
	fs.IntVar(&sessions, "sessions", 24, "cold sessions (lite topics)")
	fs.IntVar(&hot, "hot", 400, "messages of the hot session (0: no hot session)")
	fs.IntVar(&workers, "workers", 4, "worker shards")
	fs.DurationVar(&modelCall, "model-call", 15*time.Millisecond, "duration of one slow \"model call\"")
	fs.StringVar(&chartPath, "chart", filepath.Join(os.TempDir(), "rmqflow-demo.svg"), "write the SVG chart to `path` (empty: no chart)")
	fs.BoolVar(&asJSON, "json", false, "progress and results as JSON lines")
	if done, code := parseFlags(fs, args, stdout, demoUsage, demoExamples, demoFooter); done {
		return code
	}
	c, err := conn.connection()
	if err != nil {
		return fail(stderr, "demo", err)
	}
	if hot < 0 {
		fmt.Fprintf(stderr, "rmqflow demo: -hot %d: want 0 (no hot session) or more\n", hot)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	where := conn.endpoint
	if where == "" {
		fake, err := rmqfake.New(rmqfake.Addr("127.0.0.1:0"))
		if err != nil {
			return fail(stderr, "demo", err)
		}
		defer fake.Stop()
		if err := fake.CreateTopic(topic, rmqfake.TopicLite, rmqfake.InNamespace(conn.namespace)); err != nil {
			return fail(stderr, "demo", err)
		}
		if err := fake.CreateGroup(group, rmqfake.LiteBind(topic), rmqfake.Wildcard(), rmqfake.InNamespace(conn.namespace)); err != nil {
			return fail(stderr, "demo", err)
		}
		c.Endpoints = fake.Addr()
		where = "the embedded emulator at " + fake.Addr()
	}
	if !asJSON {
		flood := fmt.Sprintf("one hot session × %d", hot)
		if hot == 0 {
			flood = "no hot session"
		}
		fmt.Fprintf(stdout, "rmqflow demo on %s: %d cold sessions × 8 messages, %s\n", where, sessions, flood)
	}
	prog := newProgress(stderr, !asJSON)
	results, err := demo.Run(ctx, demo.Config{Conn: c, Topic: topic, Group: group, Sessions: sessions, Hot: hot,
		Workers: workers, ModelCall: modelCall, Progress: func(s demo.Status) {
			if asJSON {
				jsonLine(stdout, map[string]any{"run": s.Run, "received": s.Received, "acked": s.Acked, "deferred": s.Deferred,
					"total": s.Total, "seconds": s.Elapsed.Seconds()})
				return
			}
			prog.update("%-13s acked %d/%d, received %d, deferred %d, %v", s.Run, s.Acked, s.Total, s.Received, s.Deferred, s.Elapsed.Round(100*time.Millisecond))
		}})
	prog.done()
	if err != nil {
		return fail(stderr, "demo", err)
	}
	if asJSON {
		for _, r := range results {
			cold := r.Cold()
			jsonLine(stdout, map[string]any{"run": r.Title(), "baseline": r.Baseline, "throttled": r.Throttled, "seconds": r.Elapsed.Seconds(),
				"cold_p50_ms": ms(demo.Quantile(cold, .5)), "cold_p99_ms": ms(demo.Quantile(cold, .99)),
				"hot_p50_ms": ms(r.Hot().P(.5)), "hot_deferred": r.Hot().Deferred})
		}
	} else {
		demo.WriteTable(stdout, results)
	}
	if chartPath != "" {
		out, err := os.Create(chartPath)
		if err != nil {
			return fail(stderr, "demo", err)
		}
		if err := demo.WriteLatencyChart(out, results); err != nil {
			out.Close()
			return fail(stderr, "demo", err)
		}
		if err := out.Close(); err != nil {
			return fail(stderr, "demo", err)
		}
		if abs, err := filepath.Abs(chartPath); err == nil {
			chartPath = abs
		}
		if asJSON {
			jsonLine(stdout, map[string]any{"chart": chartPath})
		} else {
			fmt.Fprintf(stdout, "\nchart: %s\n", chartPath)
		}
	}
	return exitOK
}

// demoFooter ends the demo's help. The embedded emulator accepts any
// credentials; a real broker may refuse them (exit 5).
const demoFooter = connEnvHelp + `
Exit codes: 0 done, 1 failure (such as an unwritable -chart), 2 usage error,
3 endpoint unreachable, 4 unknown topic or group, 5 credentials refused (the
last three only with an endpoint).
`

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
