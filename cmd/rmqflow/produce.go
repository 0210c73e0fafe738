package main

import (
	"bufio"
	"bytes"
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
)

const produceUsage = `Usage: rmqflow produce -topic TOPIC [flags]

Sends messages to a topic, or to lite topics of a LITE main topic. The bodies
come from -message flags, else from -file (one message per line), else from
stdin (one per line); -count N with -size B sends N synthetic messages instead.
With -lite-per-line "LITE<TAB>BODY" lines choose the lite topic per message.

A body may have up to 4 MiB (4194304 bytes, the broker's limit). A longer line
is not sent: produce names its line number, counts it as failed and goes on
with the next line (exit 1 at the end). An empty body (a blank line, an empty
-message) is skipped and counted as skipped: the broker refuses empty bodies.
A trailing CR is dropped from each line.

Produce stops early, with the exit code of the cause, when the topic is
unknown (4) or the credentials are refused (5), and when every send has been
failing for -max-outage because the broker does not answer (3).

Prints a live count on a terminal; with -json one JSON line per message
({"id","lite_topic","error"}) and a summary line ({"summary","sent","failed",
"skipped","seconds"}).

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
	maxOutage   time.Duration
	json        bool
}

// maxBody is the broker's limit on a message body: 4 MiB is accepted, one
// byte more is refused with MESSAGE_BODY_TOO_LARGE.
const maxBody = 4 << 20

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
	fs.IntVar(&f.count, "count", 0, "send `N` synthetic messages (N > 0, with -size)")
	fs.IntVar(&f.size, "size", 1024, "synthetic message size in `bytes` (1 to 4194304)")
	fs.IntVar(&f.concurrency, "concurrency", 8, "senders: normal messages go in batches of up to 32 per sender; one lite topic's messages go one at a time, in order")
	fs.DurationVar(&f.maxOutage, "max-outage", time.Minute, "stop with exit 3 once every send has failed for this long because the broker does not answer")
	fs.BoolVar(&f.json, "json", false, "JSON lines on stdout instead of a progress line")
	if done, code := parseFlags(fs, args, stdout, produceUsage, produceExamples, clientFooter); done {
		return code
	}
	if f.conn.endpoint == "" || f.topic == "" {
		fmt.Fprintln(stderr, "rmqflow produce: -endpoint (or RMQFLOW_ENDPOINT) and -topic are required")
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case set["count"] && f.count <= 0:
		fmt.Fprintf(stderr, "rmqflow produce: -count %d: want a positive number of messages\n", f.count)
		return exitUsage
	case f.size <= 0 || f.size > maxBody:
		fmt.Fprintf(stderr, "rmqflow produce: -size %d: want 1 to %d bytes (the broker's 4 MiB body limit)\n", f.size, maxBody)
		return exitUsage
	case set["size"] && !set["count"]:
		fmt.Fprintln(stderr, "rmqflow produce: -size goes with -count")
		return exitUsage
	case f.concurrency <= 0:
		fmt.Fprintf(stderr, "rmqflow produce: -concurrency %d: want at least 1\n", f.concurrency)
		return exitUsage
	case f.maxOutage <= 0:
		fmt.Fprintf(stderr, "rmqflow produce: -max-outage %v: want a positive duration\n", f.maxOutage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return produce(ctx, f, os.Stdin, stdout, stderr)
}

type record struct {
	lite string
	body []byte
	// where names the input the record came from ("line 7", "-message 2"),
	// for messages about it.
	where string
	// tooLong is set for an input over the body limit: it is not sent.
	tooLong bool
}

// records yields the messages to send.
func (f produceFlags) records(stdin io.Reader, yield func(record) bool) error {
	split := func(line []byte, where string) record {
		r := record{lite: f.lite, body: line, where: where}
		if f.litePerLine {
			if lite, body, ok := bytes.Cut(line, []byte("\t")); ok {
				r.lite, r.body = string(lite), body
			}
		}
		r.tooLong = len(r.body) > maxBody
		return r
	}
	switch {
	case f.count > 0:
		body := bytes.Repeat([]byte("x"), f.size)
		for i := 0; i < f.count; i++ {
			if !yield(record{lite: f.lite, body: body, where: fmt.Sprintf("message %d", i+1)}) {
				return nil
			}
		}
		return nil
	case len(f.messages) > 0:
		for i, m := range f.messages {
			if !yield(split([]byte(m), fmt.Sprintf("-message %d", i+1))) {
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
	// A line may hold a lite topic, a tab and a body of maxBody bytes;
	// beyond that it is too long whatever it holds, and the rest of it is
	// skipped without being kept.
	const maxLine = maxBody + 1024
	br := bufio.NewReaderSize(in, 64<<10)
	for n := 1; ; n++ {
		var line []byte
		over := false
		for {
			chunk, err := br.ReadSlice('\n')
			if !over && len(line)+len(chunk) <= maxLine+1 {
				line = append(line, chunk...)
			} else {
				over, line = true, nil
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF && len(chunk) == 0 && len(line) == 0 && !over {
				return nil
			}
			if err != nil && err != io.EOF {
				return err
			}
			break
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		r := split(line, fmt.Sprintf("line %d", n))
		if over {
			r = record{lite: f.lite, where: r.where, tooLong: true}
		}
		if !yield(r) {
			return nil
		}
		if _, err := br.Peek(1); err == io.EOF {
			return nil
		}
	}
}

func produce(ctx context.Context, f produceFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	conn, err := f.conn.connection()
	if err != nil {
		return fail(stderr, "produce", err)
	}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: f.topic, Concurrency: f.concurrency})
	if err != nil {
		return fail(stderr, "produce", err)
	}
	// stopCtx ends reading early: on a refusal that every message would get
	// (unknown topic, credentials) and after -max-outage of failures.
	stopCtx, stopReading := context.WithCancelCause(ctx)
	defer stopReading(nil)
	prog := newProgress(stderr, !f.json)
	start := time.Now()
	type pending struct {
		rec record
		f   *rmqflow.SendFuture
	}
	results := make(chan pending, 1024)
	var sent, failed, skipped int
	var firstErr error
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		var outageSince time.Time // first of the failures since the last success
		for p := range results {
			var id string
			var err error
			switch {
			case p.f == nil && p.rec.tooLong:
				err = fmt.Errorf("%s: body over the 4 MiB limit (%d bytes); not sent", p.rec.where, maxBody)
				fmt.Fprintf(stderr, "rmqflow produce: %v\n", err)
			case p.f == nil:
				skipped++
				continue
			default:
				id, err = p.f.Wait(context.WithoutCancel(ctx))
			}
			if err != nil {
				failed++
				if firstErr == nil && !errors.Is(err, context.Canceled) {
					firstErr = err
				}
				if p.f != nil && context.Cause(stopCtx) == nil {
					switch code, _ := exitCode(err); code {
					case exitNotFound, exitAuth:
						stopReading(err)
					case exitUnreachable:
						if outageSince.IsZero() {
							outageSince = time.Now()
						}
						if d := time.Since(outageSince); d >= f.maxOutage {
							stopReading(&outageError{what: "sends", outage: d, err: err})
						}
					}
				}
			} else {
				sent++
				outageSince = time.Time{}
			}
			if f.json {
				line := map[string]any{"id": id, "lite_topic": p.rec.lite}
				if err != nil {
					line["error"] = err.Error()
				}
				jsonLine(stdout, line)
			}
			prog.update("sent %d, failed %d, %.0f msg/s", sent, failed, float64(sent+failed)/time.Since(start).Seconds())
		}
	}()
	readErr := f.records(stdin, func(r record) bool {
		if stopCtx.Err() != nil {
			return false
		}
		if r.tooLong || len(r.body) == 0 {
			results <- pending{rec: r}
			return true
		}
		rec := rmqflow.Record{LiteTopic: r.lite, Tag: f.tag, Keys: f.keys, Properties: f.props, Body: r.body}
		results <- pending{rec: record{lite: r.lite, where: r.where}, f: sink.Write(stopCtx, rec)}
		return true
	})
	close(results)
	<-collected
	closeErr := sink.Close(context.WithoutCancel(ctx))
	prog.done()
	elapsed := time.Since(start)
	if f.json {
		jsonLine(stdout, map[string]any{"summary": true, "sent": sent, "failed": failed, "skipped": skipped, "seconds": elapsed.Seconds()})
	} else {
		fmt.Fprintf(stdout, "sent %d message(s) to %s in %v", sent, f.topic, elapsed.Round(time.Millisecond))
		if failed > 0 {
			fmt.Fprintf(stdout, ", %d failed", failed)
		}
		if skipped > 0 {
			fmt.Fprintf(stdout, ", %d empty skipped", skipped)
		}
		fmt.Fprintln(stdout)
	}
	stopErr := context.Cause(stopCtx)
	switch {
	case readErr != nil:
		return fail(stderr, "produce", readErr)
	case stopErr != nil && ctx.Err() == nil:
		return fail(stderr, "produce", stopErr)
	case firstErr != nil:
		return fail(stderr, "produce", firstErr)
	case closeErr != nil && !errors.Is(closeErr, context.Canceled):
		return fail(stderr, "produce", closeErr)
	case ctx.Err() != nil:
		return exitFailure
	}
	return exitOK
}
