package rmqflow_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestRunnerGiveUpHints: the runner's give-up log lines name how to park a
// message elsewhere, or that dropping was chosen, in the words of
// RunnerConfig.Hints (an integration's own config keys), and in the Go API's
// when they are not set.
func TestRunnerGiveUpHints(t *testing.T) {
	for _, c := range []struct {
		name  string
		hints rmqflow.RunnerHints
		drop  bool
		want  string
	}{
		{"default dead-letter", rmqflow.RunnerHints{}, false, "moved to its group's dead-letter queue %DLQ%<group> (set Runner.SetDeadLetter to park it elsewhere)"},
		{"hinted dead-letter", rmqflow.RunnerHints{DeadLetter: "my.dead_letter"}, false, "(set my.dead_letter to park it elsewhere)"},
		{"default drop", rmqflow.RunnerHints{}, true, "acking (dropping) it as ErrorValves.OnValve = ValveAck says"},
		{"hinted drop", rmqflow.RunnerHints{Drop: "my.drop: true"}, true, "acking (dropping) it as my.drop: true says"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
			must(t, fake.CreateTopic("hint", rmqfake.TopicLite))
			must(t, fake.CreateGroup("hint-g", rmqfake.LiteBind("hint"), rmqfake.Wildcard()))
			logs := &syncBuffer{}
			conn := rmqflow.Connection{Endpoints: fake.Addr(), Logger: slog.New(slog.NewTextHandler(logs, nil))}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "hint", LiteTopic: "l"})
			must(t, err)
			defer sink.Close(context.WithoutCancel(ctx))
			_, err = sink.Write(ctx, rmqflow.Record{Body: []byte("poison")}).Wait(ctx)
			must(t, err)
			src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn,
				Lite: []rmqflow.LiteBinding{{Topic: "hint", Group: "hint-g"}}}, rmqflow.StringDecoder())
			must(t, err)
			valves := rmqflow.ThrottleConfig{MaxDeliveryAttempt: 1}
			if c.drop {
				valves.OnValve = rmqflow.ValveAck
			}
			rctx, stop := context.WithCancel(ctx)
			r, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[string]) (rmqflow.Decision, error) {
				return rmqflow.Decision{}, errors.New("poison")
			}, rmqflow.RunnerConfig{ErrorValves: valves, Hints: c.hints})
			must(t, err)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			for !strings.Contains(logs.String(), "giving up") && !strings.Contains(logs.String(), "gave up") && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			must(t, <-done)
			if out := logs.String(); !strings.Contains(out, c.want) {
				t.Errorf("log:\n%s\nwant a line with %q", out, c.want)
			}
		})
	}
}
