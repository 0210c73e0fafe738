// Command litework is an rmqio pipeline: it reads every lite topic of a
// LITE main topic (one per conversation), keys the messages by lite topic,
// keeps a turn count per conversation in Beam state, works each message
// (here: prints it with its turn), and acks it once the work is done. Ack
// failures are printed; the messages they name come back.
//
// With rmqfake (from the repository root):
//
//	go run ./cmd/rmqflow broker -fast-lite-dispatch -fixtures integrations/beam/examples/fixtures.txt &
//	go run ./cmd/rmqflow produce -endpoint 127.0.0.1:8081 -topic agents -lite chat-1 -message hello -message again
//	cd integrations/beam && go run ./examples/litework -rmq-endpoints 127.0.0.1:8081 -stop-after-idle 5s
//
// It runs on Prism, Beam's Go runner, by default; docs/beam.md shows the
// flags for Flink and Dataflow.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	rmqio "github.com/rmqflow/rmqflow/integrations/beam"
)

var (
	endpoints     = flag.String("rmq-endpoints", envOr("RMQFLOW_ENDPOINT", "127.0.0.1:8081"), "the RocketMQ proxy's gRPC `host:port` (default $RMQFLOW_ENDPOINT or 127.0.0.1:8081)")
	mainTopic     = flag.String("main-topic", "agents", "the LITE main `topic` to read")
	group         = flag.String("group", "agents-g", "the wildcard lite `group` bound to -main-topic")
	throttle      = flag.Bool("throttle", false, "hold hot conversations back (rmqio.Throttle: fair share per worker)")
	invisible     = flag.Duration("invisible-duration", 60*time.Second, "how `long` a read message stays invisible: the budget from Read to Ack")
	stopAfterIdle = flag.Duration("stop-after-idle", 0, "end the job once nothing came for this `long`; 0 reads for ever")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// turnFn counts the turns of each conversation (lite topic) in Beam state
// and works the message: here, it prints it.
type turnFn struct {
	Turns state.Value[int64]
}

func (fn *turnFn) ProcessElement(sp state.Provider, lite string, m rmqio.AckableMessage, emit func(rmqio.AckableMessage)) error {
	n, _, err := fn.Turns.Read(sp)
	if err != nil {
		return err
	}
	n++
	if err := fn.Turns.Write(sp, n); err != nil {
		return err
	}
	fmt.Printf("%s turn %d: %s\n", lite, n, m.Payload)
	emit(m)
	return nil
}

func byLiteTopic(m rmqio.AckableMessage) (string, rmqio.AckableMessage) { return m.LiteTopic, m }

func printFailure(f rmqio.AckFailure) { fmt.Printf("ack failed: %s: %s\n", f.MessageID, f.Error) }

func init() {
	register.DoFn4x1[state.Provider, string, rmqio.AckableMessage, func(rmqio.AckableMessage), error](&turnFn{})
	register.Function1x2(byLiteTopic)
	register.Function1x0(printFailure)
	register.Emitter1[rmqio.AckableMessage]()
}

func main() {
	flag.Parse()
	beam.Init()
	conn := rmqio.Connection{Endpoints: *endpoints}
	p, s := beam.NewPipelineWithRoot()
	msgs := rmqio.Read(s, rmqio.ReadConfig{Connection: conn, MainTopic: *mainTopic, Group: *group,
		AwaitDuration: 5 * time.Second, InvisibleDuration: *invisible, StopAfterIdle: *stopAfterIdle})
	if *throttle {
		msgs = rmqio.Throttle(s, rmqio.ThrottleConfig{AckConfig: rmqio.AckConfig{Connection: conn}}, msgs)
	}
	worked := beam.ParDo(s, &turnFn{Turns: state.MakeValueState[int64]("turns")}, beam.ParDo(s, byLiteTopic, msgs))
	beam.ParDo0(s, printFailure, rmqio.Ack(s, rmqio.AckConfig{Connection: conn}, worked))
	if err := beamx.Run(context.Background(), p); err != nil {
		log.Fatalf("litework: %v", err)
	}
}
