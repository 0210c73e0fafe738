package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/brokeradmin"
	"github.com/rmqflow/rmqflow/client"
)

const consumeUsage = `Usage: rmqflow consume -topic TOPIC -group GROUP [flags]

Receives messages with an rmqflow Source and prints them: the body per line,
or with -json one JSON line per message (topic, lite_topic, message_id, tag,
keys, properties, delivery_attempt, body, and the receipt handle as JSON so
that another process can ack it). It stops after -max messages, after -idle
without a message, or on SIGINT/SIGTERM, and gives back what it fetched but did
not print. After -idle it asks the broker for the topic's route: if the broker
no longer answers, the exit code is 3, not 0. When receiving keeps failing
because the broker does not answer, it stops after -max-outage with exit 3;
an unknown topic or group stops it at once with exit 4.

In lite mode, messages sent before consume connected (a backlog) take 5 to
20 s to show: the broker hands a lite backlog to a newly subscribed wildcard
consumer only in a full dispatch 5 to 15 s later (RocketMQ 5.5.0; rmqfake does
the same unless started with rmqflow broker -fast-lite-dispatch), and the
messages then wait for the next long poll. Consume prints nothing meanwhile;
it is not stuck (a short -idle may end it first). With -lite-dispatch-broker
set to the broker's own remoting address (its listenPort, not the proxy's),
consume asks the broker to dispatch the group's backlog at once when it joins
(rmqflow lite-dispatch, SourceConfig.LiteDispatchKick): the backlog then shows
within a second.

-mode lite (the default) reads a LITE main topic through a wildcard lite group;
-mode simple reads a normal topic with a -tag or -sql filter.

-ack chooses what happens after a message is printed: after-print (the
default) acks it, never leaves it to come back when its invisibility ends, and
defer makes it invisible for -defer and then delivered again.

Flags:
`

var consumeExamples = []example{
	{"-topic chat -group chat-workers", "print every lite message, acking each"},
	{"-mode simple -topic orders -group billing -tag 'paid||refunded' -max 10", "ten tagged messages of a normal topic"},
	{"-topic chat -group chat-workers -ack never -json | jq .body", "peek without acking, as JSON lines"},
	{"-topic chat -group chat-workers -ack defer -defer 30s", "print and push each message back by 30 s"},
}

type consumeFlags struct {
	conn       connFlags
	mode       string
	topic      string
	group      string
	tag        string
	sql        string
	ack        string
	deferFor   time.Duration
	max        int
	idle       time.Duration
	invisible  time.Duration
	concurrent int
	maxOutage  time.Duration
	json       bool
	kickBroker string
}

func runConsume(args []string, stdout, stderr io.Writer) int {
	var f consumeFlags
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.conn.register(fs, "broker gRPC `host:port` (required)")
	fs.StringVar(&f.mode, "mode", "lite", "`lite` (LITE main topic, wildcard group) or simple (normal topic)")
	fs.StringVar(&f.topic, "topic", "", "`topic` to read (required)")
	fs.StringVar(&f.group, "group", "", "consumer `group` (required)")
	fs.StringVar(&f.tag, "tag", "", "TAG filter `expression` (simple mode), e.g. 'a||b'")
	fs.StringVar(&f.sql, "sql", "", "SQL92 filter `expression` (simple mode)")
	fs.StringVar(&f.ack, "ack", "after-print", "after-print, never or defer")
	fs.DurationVar(&f.deferFor, "defer", 30*time.Second, "invisibility given by -ack defer")
	fs.IntVar(&f.max, "max", 0, "stop after `N` messages (0: no limit)")
	fs.DurationVar(&f.idle, "idle", 0, "stop after this long without a message (0: never)")
	fs.DurationVar(&f.invisible, "invisible", rmqflow.DefaultInvisibleDuration, "invisible duration of received messages (10s..12h)")
	fs.IntVar(&f.concurrent, "fetch-concurrency", 1, "long-polling goroutines")
	fs.DurationVar(&f.maxOutage, "max-outage", time.Minute, "stop with exit 3 once receiving has failed for this long because the broker does not answer")
	fs.BoolVar(&f.json, "json", false, "JSON lines instead of bodies")
	fs.StringVar(&f.kickBroker, "lite-dispatch-broker", "", "lite mode: the broker's remoting `host:port` (listenPort, not the proxy's), asked to dispatch the group's backlog when consume joins")
	if done, code := parseFlags(fs, args, stdout, consumeUsage, consumeExamples, clientFooter); done {
		return code
	}
	if f.conn.endpoint == "" || f.topic == "" || f.group == "" {
		fmt.Fprintln(stderr, "rmqflow consume: -endpoint (or RMQFLOW_ENDPOINT), -topic and -group are required")
		return exitUsage
	}
	if f.ack != "after-print" && f.ack != "never" && f.ack != "defer" {
		fmt.Fprintf(stderr, "rmqflow consume: -ack %q: want after-print, never or defer\n", f.ack)
		return exitUsage
	}
	if f.maxOutage <= 0 || f.max < 0 || f.idle < 0 {
		fmt.Fprintln(stderr, "rmqflow consume: -max-outage must be positive, -max and -idle not negative")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return consume(ctx, f, stdout, stderr)
}

func consume(ctx context.Context, f consumeFlags, stdout, stderr io.Writer) int {
	conn, err := f.conn.connection()
	if err != nil {
		return fail(stderr, "consume", err)
	}
	maxOutage := f.maxOutage
	if maxOutage == 0 {
		maxOutage = time.Minute
	}
	cfg := rmqflow.SourceConfig{Connection: conn, FetchConcurrency: f.concurrent, InvisibleDuration: f.invisible,
		AwaitDuration: 10 * time.Second, MaxOutage: maxOutage}
	switch f.mode {
	case "lite":
		cfg.Lite = []rmqflow.LiteBinding{{Topic: f.topic, Group: f.group}}
		if f.kickBroker != "" {
			cfg.LiteDispatchKick = brokeradmin.LiteDispatchKick(f.kickBroker)
		}
	case "simple":
		if f.kickBroker != "" {
			fmt.Fprintln(stderr, "rmqflow consume: -lite-dispatch-broker is for -mode lite")
			return exitUsage
		}
		cfg.Mode, cfg.Topic, cfg.Group = rmqflow.ModeSimple, f.topic, f.group
		if f.tag != "" {
			cfg.Filter = client.TagFilter(f.tag)
		}
		if f.sql != "" {
			cfg.Filter = client.SQLFilter(f.sql)
		}
	default:
		fmt.Fprintf(stderr, "rmqflow consume: -mode %q: want lite or simple\n", f.mode)
		return exitUsage
	}
	src, err := rmqflow.NewSource(cfg, rmqflow.BytesDecoder())
	if err != nil {
		return fail(stderr, "consume", err)
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(context.WithoutCancel(ctx))
		return fail(stderr, "consume", err)
	}
	defer src.Close(context.WithoutCancel(ctx))
	acker := src.Acker()
	prog := newProgress(stderr, f.json || !isTerminal(stdout))
	count, failures := 0, 0
	for f.max == 0 || count < f.max {
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if f.idle > 0 {
			nctx, cancel = context.WithTimeout(ctx, f.idle)
		}
		m, err := src.Next(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, rmqflow.ErrSourceClosed) {
				break // interrupted
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Idle long enough, or the broker went away meanwhile.
				if perr := answers(ctx, conn, f.topic); perr != nil && ctx.Err() == nil {
					prog.done()
					return fail(stderr, "consume", fmt.Errorf("nothing for -idle %v, and then: %w", f.idle, perr))
				}
				break
			}
			prog.done()
			return fail(stderr, "consume", err)
		}
		count++
		printMessage(stdout, f.json, m)
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		switch f.ack {
		case "after-print":
			err = acker.Ack(actx, m.Handle)
		case "defer":
			_, err = acker.ChangeInvisibleDuration(actx, m.Handle, f.deferFor)
		}
		acancel()
		if err != nil {
			failures++
			fmt.Fprintf(stderr, "rmqflow consume: %s %s: %v\n", f.ack, m.Handle.String(), err)
		}
		prog.update("received %d", count)
	}
	prog.done()
	if failures > 0 {
		return exitFailure
	}
	return exitOK
}

// answers asks the broker for topic's route: nil when it answers.
func answers(ctx context.Context, conn rmqflow.Connection, topic string) error {
	c, err := client.New(client.Config{Endpoints: conn.Endpoints, Namespace: conn.Namespace, Credentials: conn.Credentials,
		TLS: conn.TLS, RequestTimeout: conn.RequestTimeout, Logger: conn.Logger})
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.QueryRoute(ctx, topic)
	return err
}

func printMessage(w io.Writer, asJSON bool, m *rmqflow.AckableMessage[[]byte]) {
	if !asJSON {
		fmt.Fprintln(w, string(m.Value))
		return
	}
	jsonLine(w, map[string]any{
		"topic": m.Meta.Topic, "lite_topic": m.Meta.LiteTopic, "message_id": m.Meta.MessageID, "tag": m.Meta.Tag,
		"keys": m.Meta.Keys, "properties": m.Meta.Properties, "delivery_attempt": m.Meta.DeliveryAttempt,
		"born": m.Meta.BornTime, "dead_lettered": m.Meta.DeadLettered(), "body": string(m.Value), "handle": m.Handle,
	})
}
