package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rmqflow/rmqflow"
)

const produceUsage = `Usage: rmqflow produce -topic TOPIC [flags]

Sends messages to a topic, or to lite topics of a LITE main topic. The bodies
come from -message flags, else from -file (one message per line), else from
stdin (one per line); -count N with -size B sends N synthetic messages instead.
With -lite-per-line "LITE<TAB>BODY" lines choose the lite topic per message.

Prints a live count on a terminal; with -json one JSON line per message
({"id","lite_topic","error"}) and a summary line.

Flags:
`

var produceExamples = []example{
	{"-topic chat -lite session-1 -message hello -message again", "two messages to one lite topic"},
	{"-topic orders -tag paid -key o-17 -property region=eu < orders.txt", "one message per stdin line, with tag, key and property"},
	{"-topic chat -lite-per-line -file turns.tsv", "lines of \"session<TAB>text\", each to its own lite topic"},
	{"-topic chat -lite load -count 10000 -size 1024 -json", "10,000 synthetic 1-KiB messages, JSON output"},
}

type produceFlags struct {
	conn        connFlags
	topic       string
	lite        string
	litePerLine bool
	tag         string
	keys        strList
	props       kvList
	messages    strList
	file        string
	count       int
	size        int
	concurrency int
	json        bool
}

func runProduce(args []string, stdout, stderr io.Writer) int {
	f := produceFlags{props: kvList{}}
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.conn.register(fs, "broker gRPC `host:port` (required)")
	fs.StringVar(&f.topic, "topic", "", "destination `topic` (the LITE main topic for lite messages; required)")
	fs.StringVar(&f.lite, "lite", "", "lite `topic` for every message")
	fs.BoolVar(&f.litePerLine, "lite-per-line", false, "read \"LITE<TAB>BODY\" lines: each message's lite topic comes from its line")
	fs.StringVar(&f.tag, "tag", "", "message `tag`")
	fs.Var(&f.keys, "key", "message `key` (repeatable)")
	fs.Var(f.props, "property", "user property `k=v` (repeatable)")
	fs.Var(&f.messages, "message", "a message `body` (repeatable)")
	fs.StringVar(&f.file, "file", "", "read bodies from `path`, one per line")
	fs.IntVar(&f.count, "count", 0, "send `N` synthetic messages (with -size)")
	fs.IntVar(&f.size, "size", 1024, "synthetic message size in `bytes`")
	fs.IntVar(&f.concurrency, "concurrency", 8, "sends in flight")
	fs.BoolVar(&f.json, "json", false, "JSON lines on stdout instead of a progress line")
	if done, code := parseFlags(fs, args, stdout, produceUsage, produceExamples); done {
		return code
	}
	if f.conn.endpoint == "" || f.topic == "" {
		fmt.Fprintln(stderr, "rmqflow produce: -endpoint (or RMQFLOW_ENDPOINT) and -topic are required")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return produce(ctx, f, os.Stdin, stdout, stderr)
}

type record struct {
	lite string
	body []byte
}

// records yields the messages to send.
func (f produceFlags) records(stdin io.Reader, yield func(record) bool) error {
	split := func(line string) record {
		if f.litePerLine {
			if lite, body, ok := strings.Cut(line, "\t"); ok {
				return record{lite: lite, body: []byte(body)}
			}
		}
		return record{lite: f.lite, body: []byte(line)}
	}
	switch {
	case f.count > 0:
		body := []byte(strings.Repeat("x", max(f.size, 1)))
		for i := 0; i < f.count; i++ {
			if !yield(record{lite: f.lite, body: body}) {
				return nil
			}
		}
		return nil
	case len(f.messages) > 0:
		for _, m := range f.messages {
			if !yield(split(m)) {
				return nil
			}
		}
		return nil
	}
	in := stdin
	if f.file != "" {
		file, err := os.Open(f.file)
		if err != nil {
			return err
		}
		defer file.Close()
		in = file
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if !yield(split(sc.Text())) {
			return nil
		}
	}
	return sc.Err()
}

func produce(ctx context.Context, f produceFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: f.conn.connection(), Topic: f.topic, Concurrency: f.concurrency})
	if err != nil {
		return fail(stderr, "produce", err)
	}
	prog := newProgress(stderr, !f.json)
	start := time.Now()
	type pending struct {
		lite string
		f    *rmqflow.SendFuture
	}
	results := make(chan pending, 1024)
	var sent, failed int
	var firstErr error
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for p := range results {
			id, err := p.f.Wait(context.WithoutCancel(ctx))
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			} else {
				sent++
			}
			if f.json {
				line := map[string]any{"id": id, "lite_topic": p.lite}
				if err != nil {
					line["error"] = err.Error()
				}
				jsonLine(stdout, line)
			}
			prog.update("sent %d, failed %d, %.0f msg/s", sent, failed, float64(sent+failed)/time.Since(start).Seconds())
		}
	}()
	readErr := f.records(stdin, func(r record) bool {
		if ctx.Err() != nil {
			return false
		}
		rec := rmqflow.Record{LiteTopic: r.lite, Tag: f.tag, Keys: f.keys, Properties: f.props, Body: r.body}
		results <- pending{lite: r.lite, f: sink.Write(ctx, rec)}
		return true
	})
	close(results)
	<-collected
	closeErr := sink.Close(context.WithoutCancel(ctx))
	prog.done()
	elapsed := time.Since(start)
	if f.json {
		jsonLine(stdout, map[string]any{"summary": true, "sent": sent, "failed": failed, "seconds": elapsed.Seconds()})
	} else {
		fmt.Fprintf(stdout, "sent %d message(s) to %s in %v", sent, f.topic, elapsed.Round(time.Millisecond))
		if failed > 0 {
			fmt.Fprintf(stdout, ", %d failed", failed)
		}
		fmt.Fprintln(stdout)
	}
	switch {
	case readErr != nil:
		return fail(stderr, "produce", readErr)
	case firstErr != nil:
		return fail(stderr, "produce", firstErr)
	case closeErr != nil && !errors.Is(closeErr, context.Canceled):
		return fail(stderr, "produce", closeErr)
	case ctx.Err() != nil:
		return exitFailure
	}
	return exitOK
}
