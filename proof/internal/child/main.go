// Command child is the process the proof suites start, kill and restart
// (proof/*_test.go, build tag "proof"). It is not part of rmqflow's API.
//
//	child produce -endpoint E -topic T -prefix P -lites L -n N
//	    sends N lite messages to T: message i goes to lite topic P-(i mod L)
//	    with sequence number i div L, in order within each lite topic. Exits 0
//	    when every send succeeded, 1 at the first failed send.
//
//	child consume -endpoint E -topic T -group G -prefix P -log FILE
//	    consumes T with a Runner (one message of a lite topic at a time) and
//	    acks each message after its work. The work of a message of a lite topic
//	    named P-... is to append one line to FILE, in one write(2):
//	        <unix nanoseconds> <lite topic> <seq> <delivery attempt>
//	    so that a SIGKILL loses no line of a handled message; the ack follows
//	    the write. Messages of other lite topics (left by earlier runs) are
//	    acked unrecorded. It prints "handled N" to stdout as N grows, and
//	    shuts down cleanly on SIGTERM or SIGINT (the Runner's shutdown), then
//	    prints "stopped handled=N". Every 10 s it prints a status line to
//	    stderr: handled, ReceiveMessage calls, messages fetched and emitted,
//	    ack results.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: child produce|consume [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "consume":
		err = consume(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func produce(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "gRPC endpoint")
	topic := fs.String("topic", "", "LITE main topic")
	prefix := fs.String("prefix", "", "lite topic prefix")
	lites := fs.Int("lites", 100, "number of lite topics")
	n := fs.Int("n", 1000, "number of messages")
	workers := fs.Int("workers", 32, "concurrent senders (each owns a share of the lite topics)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *topic == "" || *prefix == "" || *lites < 1 || *n < 0 {
		return errors.New("produce needs -endpoint, -topic, -prefix, -lites >= 1")
	}
	c, err := client.New(client.Config{Endpoints: *endpoint, Logger: logger()})
	if err != nil {
		return err
	}
	ctx := context.Background()
	defer c.Close(ctx)
	if _, err := c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{*topic}}); err != nil {
		return err
	}
	w := min(*workers, *lites)
	var sent atomic.Int64
	errs := make(chan error, w)
	var wg sync.WaitGroup
	t0 := time.Now()
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Worker k sends the messages of lite topics k, k+w, ... in
			// index order: one lite topic's messages never overlap.
			for i := 0; i < *n; i++ {
				if (i%*lites)%w != k {
					continue
				}
				lite := fmt.Sprintf("%s-%d", *prefix, i%*lites)
				body := fmt.Sprintf("%s %d", lite, i / *lites)
				res, err := c.Send(ctx, &client.Message{Topic: *topic, LiteTopic: lite, Body: []byte(body)})
				if err == nil {
					err = res[0].Err
				}
				if err != nil {
					errs <- fmt.Errorf("send %s: %w", body, err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("produced %d in %v\n", sent.Load(), time.Since(t0).Round(time.Millisecond))
	return nil
}

func consume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "gRPC endpoint")
	topic := fs.String("topic", "", "LITE main topic")
	group := fs.String("group", "", "wildcard lite group")
	prefix := fs.String("prefix", "", "lite topic prefix of this run's messages")
	logPath := fs.String("log", "", "file to append handled messages to")
	concurrency := fs.Int("concurrency", 8, "Runner concurrency")
	invisible := fs.Duration("invisible", 10*time.Second, "invisible duration")
	work := fs.Duration("work", 0, "simulated work per message (uniform in 0..work)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *topic == "" || *group == "" || *prefix == "" || *logPath == "" {
		return errors.New("consume needs -endpoint, -topic, -group, -prefix, -log")
	}
	f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cnt := &counts{}
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{
		Connection:        rmqflow.Connection{Endpoints: *endpoint, Logger: logger(), Meter: countingMeter{c: cnt}},
		Lite:              []rmqflow.LiteBinding{{Topic: *topic, Group: *group}},
		InvisibleDuration: *invisible,
		AwaitDuration:     5 * time.Second,
	}, rmqflow.StringDecoder())
	if err != nil {
		return err
	}
	var handled atomic.Int64
	mine := *prefix + "-"
	h := func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
		if !strings.HasPrefix(m.Meta.LiteTopic, mine) {
			return rmqflow.Ack(), nil // a leftover of another run
		}
		lite, seq, ok := strings.Cut(m.Value, " ")
		if !ok || lite != m.Meta.LiteTopic {
			return rmqflow.Decision{}, fmt.Errorf("body %q does not match lite topic %s", m.Value, m.Meta.LiteTopic)
		}
		if _, err := strconv.Atoi(seq); err != nil {
			return rmqflow.Decision{}, fmt.Errorf("body %q: %w", m.Value, err)
		}
		if *work > 0 {
			time.Sleep(rand.N(*work))
		}
		line := fmt.Sprintf("%d %s %s %d\n", time.Now().UnixNano(), lite, seq, m.Meta.DeliveryAttempt)
		if _, err := f.WriteString(line); err != nil {
			return rmqflow.Decision{}, err
		}
		handled.Add(1)
		return rmqflow.Ack(), nil
	}
	r, err := rmqflow.NewRunner(src, h, rmqflow.RunnerConfig{Concurrency: *concurrency})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		last := int64(-1)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n := handled.Load(); n != last {
				last = n
				fmt.Fprintf(out, "handled %d\n", n)
				out.Flush()
			}
		}
	}()
	// A status line every 10 s on stderr: a run that stalls shows whether
	// its receives came back empty, failed, or brought messages of others.
	go cnt.status(ctx, os.Stderr, 10*time.Second, &handled)
	fmt.Fprintln(out, "running")
	out.Flush()
	err = r.Run(ctx)
	stop()
	<-progressDone
	fmt.Fprintf(out, "stopped handled=%d\n", handled.Load())
	out.Flush()
	return err
}
