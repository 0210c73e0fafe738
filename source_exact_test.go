package rmqflow_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestSourceExactLiteTopics pins LiteBinding.LiteTopics: a source bound to a
// lite group that is not a wildcard group receives the lite topics it lists,
// in order within each, and nothing of the others — on rmqfake and on the
// real broker (fixtures rmqflow-lite-x and its exact group).
func TestSourceExactLiteTopics(t *testing.T) {
	for _, target := range []string{"rmqfake", "real"} {
		t.Run(target, func(t *testing.T) {
			rmqtest.CheckGoroutines(t)
			ctx := rmqtest.Context(t, 2*time.Minute)
			var c rmqflow.Connection
			if target == "real" {
				c = conn(t)
			} else {
				s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.FastLiteDispatch())
				c = rmqflow.Connection{Endpoints: s.Addr()}
			}
			run := rmqtest.Unique("x")
			in, out := run+"-in", run+"-out"
			sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: c, Topic: rmqtest.ExactLiteTopic})
			must(t, err)
			defer sink.Close(context.Background())
			write := func(lite string, i int) {
				t.Helper()
				if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: lite, Body: []byte(fmt.Sprintf("%s/%d", lite, i))}).Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: c, AwaitDuration: 5 * time.Second,
				Lite: []rmqflow.LiteBinding{{Topic: rmqtest.ExactLiteTopic, Group: rmqtest.ExactLiteGroup, LiteTopics: []string{in}}}},
				rmqflow.StringDecoder())
			must(t, err)
			must(t, src.Start(ctx))
			defer src.Close(context.Background())
			for i := 0; i < 5; i++ {
				write(out, i)
				write(in, i)
			}
			// A marker after everything else: once it is here, a message of
			// the lite topic not subscribed would have had its chance.
			write(in, 5)
			var got []string
			for len(got) < 6 {
				m, err := src.Next(ctx)
				if err != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				must(t, src.Acker().Ack(ctx, m.Handle))
				if !strings.HasPrefix(m.Meta.LiteTopic, run) {
					continue // an earlier run's leftover in the shared group
				}
				if m.Meta.LiteTopic != in {
					t.Fatalf("received %s of lite topic %s, which the source did not subscribe", m.Value, m.Meta.LiteTopic)
				}
				got = append(got, m.Value)
			}
			if want := fmt.Sprint([]string{in + "/0", in + "/1", in + "/2", in + "/3", in + "/4", in + "/5"}); fmt.Sprint(got) != want {
				t.Errorf("got %v, want %s", got, want)
			}
		})
	}
}
