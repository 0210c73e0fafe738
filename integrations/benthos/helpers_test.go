package rmqbenthos_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	_ "github.com/rmqflow/rmqflow/integrations/benthos"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The fixtures of scripts/rocketmq/fixtures.txt these tests use, on rmqfake
// and on the real broker alike.
const (
	reqTopic = "rmqflow-benthos-req"
	reqGroup = "rmqflow-benthos-req-g"
	repTopic = "rmqflow-benthos-rep"
	repGroup = "rmqflow-benthos-rep-g"
)

// fake starts rmqfake with the project's fixtures.
func fake(t *testing.T) *rmqfake.Server {
	t.Helper()
	return rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.FastLiteDispatch())
}

// realBroker is the real broker of `make test`, which must be there.
func realBroker(t *testing.T) string {
	t.Helper()
	ep := os.Getenv(rmqtest.EnvEndpoint)
	if ep == "" {
		t.Fatalf("%s is not set: run through `make test` (scripts/test.sh), which starts RocketMQ", rmqtest.EnvEndpoint)
	}
	return ep
}

// send sends recs to topic; the records of each lite topic are stored in
// the order given (rmqflow.Sink keeps a lite topic's order).
func send(t *testing.T, ctx context.Context, endpoint, topic string, recs ...rmqflow.Record) {
	t.Helper()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: rmqflow.Connection{Endpoints: endpoint}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	ids, errs := sink.Send(ctx, recs...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("send %d (%s): %v", i, ids[i], err)
		}
	}
}

// envLookup resolves ${NAME} in configs from env only, so that the machine's
// environment cannot change a test.
func envLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// runStream runs a whole config until stop is called (or the test ends).
func runStream(t *testing.T, yaml string, env map[string]string) (stop func()) {
	t.Helper()
	b := service.NewStreamBuilder()
	b.SetEnvVarLookupFunc(envLookup(env))
	if err := b.SetYAML(yaml); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLoggerYAML("level: WARN"); err != nil {
		t.Fatal(err)
	}
	return start(t, b)
}

// runInput runs the rocketmq input of inputYAML into consume.
func runInput(t *testing.T, inputYAML string, env map[string]string, consume service.MessageBatchHandlerFunc) (stop func()) {
	t.Helper()
	return runPipeline(t, inputYAML, nil, env, consume)
}

// runPipeline runs the input of inputYAML through the processors of procs
// (YAML each) into consume.
func runPipeline(t *testing.T, inputYAML string, procs []string, env map[string]string, consume service.MessageBatchHandlerFunc) (stop func()) {
	t.Helper()
	b := service.NewStreamBuilder()
	b.SetEnvVarLookupFunc(envLookup(env))
	if err := b.AddInputYAML(inputYAML); err != nil {
		t.Fatal(err)
	}
	for _, proc := range procs {
		if err := b.AddProcessorYAML(proc); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddBatchConsumerFunc(consume); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLoggerYAML("level: WARN"); err != nil {
		t.Fatal(err)
	}
	return start(t, b)
}

func start(t *testing.T, b *service.StreamBuilder) (stop func()) {
	t.Helper()
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Stop(ctx); err != nil {
				t.Errorf("stop the stream: %v", err)
			}
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("stream: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// collected is what collect read: bodies per lite topic, in arrival order.
type collected map[string][]string

// collect reads topic through group until it has n messages whose lite
// topic starts with prefix (others, left over by earlier runs, are acked and
// skipped), acking each.
func collect(t *testing.T, ctx context.Context, endpoint, topic, group, prefix string, n int) collected {
	t.Helper()
	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: rmqflow.Connection{Endpoints: endpoint},
		Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}}, AwaitDuration: 5 * time.Second}, rmqflow.StringDecoder())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	out, got := collected{}, 0
	for got < n {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("collect from %s after %d of %d: %v", topic, got, n, err)
		}
		if strings.HasPrefix(m.Meta.LiteTopic, prefix) {
			out[m.Meta.LiteTopic] = append(out[m.Meta.LiteTopic], m.Value)
			got++
		}
		if err := src.Acker().Ack(ctx, m.Handle); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	return out
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition of another process or server; no event to wait on
	}
}

func readExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
