package rmqflow_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestCheckDeadLetterSink: a dead-letter sink whose topic cannot store the
// copies DeadLetterToSink writes is refused before anything is parked: a
// LITE topic without SinkConfig.LiteTopic (a copy has no lite topic), a
// FIFO topic (a copy has no message group); a NORMAL topic, and a LITE one
// with a LiteTopic, pass. The topic's types are the route's, which both
// targets report.
func TestCheckDeadLetterSink(t *testing.T) {
	for _, tg := range []struct {
		name               string
		endpoint           func(t *testing.T) string
		lite, fifo, normal string
	}{
		{"rmqfake", func(t *testing.T) string {
			fake := rmqfake.NewForTest(t)
			must(t, fake.CreateTopic("cd-lite", rmqfake.TopicLite))
			must(t, fake.CreateTopic("cd-fifo", rmqfake.TopicFIFO))
			must(t, fake.CreateTopic("cd-normal", rmqfake.TopicNormal))
			return fake.Addr()
		}, "cd-lite", "cd-fifo", "cd-normal"},
		{"rocketmq", func(t *testing.T) string { return rmqtest.Endpoint(t) }, "rmqflow-lite-b", "rmqflow-fifo-p", "rmqflow-normal-p"},
	} {
		t.Run(tg.name, func(t *testing.T) {
			conn := rmqflow.Connection{Endpoints: tg.endpoint(t)}
			ctx := rmqtest.Context(t, 30*time.Second)
			for _, c := range []struct {
				topic, liteTopic string
				types            rmqflow.MessageType
				refused          string // what the error says; "" for none
			}{
				{tg.normal, "", rmqflow.MessageNormal, ""},
				{tg.lite, "", rmqflow.MessageLite, "accepts LITE messages only: a parked copy has no lite topic"},
				{tg.lite, "parked", rmqflow.MessageLite, ""},
				{tg.fifo, "", rmqflow.MessageFIFO, "accepts FIFO messages only"},
				{tg.normal, "parked", rmqflow.MessageNormal, "accepts NORMAL messages only: a parked copy has a lite topic"},
			} {
				s, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: c.topic, LiteTopic: c.liteTopic})
				must(t, err)
				types, terr := s.TopicTypes(ctx)
				err = rmqflow.CheckDeadLetterSink(ctx, s)
				_ = s.Close(context.WithoutCancel(ctx))
				if terr != nil || !slices.Equal(types, []rmqflow.MessageType{c.types}) {
					t.Errorf("%s: types %v (%v), want [%s]", c.topic, types, terr, c.types)
				}
				switch {
				case c.refused == "" && err != nil:
					t.Errorf("%s (lite topic %q): refused: %v", c.topic, c.liteTopic, err)
				case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), c.topic)):
					t.Errorf("%s (lite topic %q): %v; want an error naming it that says %q", c.topic, c.liteTopic, err, c.refused)
				}
			}
		})
	}
}
