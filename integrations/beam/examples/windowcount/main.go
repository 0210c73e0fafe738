// Command windowcount is an rmqio pipeline: it reads every lite topic of a
// LITE main topic, counts the messages of each lite topic per fixed window
// of event time (the store time), writes one record per lite topic and
// window to the lite topic of the same name in -out-topic, and acks the
// counted messages only once that record is stored (rmqio.Write acks
// Record.AckHandles after the write). A message is acked only after the
// count it went into was written; a job that dies before redelivers it.
//
// With rmqfake (from the repository root):
//
//	go run ./cmd/rmqflow broker -fast-lite-dispatch -fixtures integrations/beam/examples/fixtures.txt &
//	go run ./cmd/rmqflow produce -endpoint 127.0.0.1:8081 -topic agents -lite chat-1 -message hello -message again
//	cd integrations/beam && go run ./examples/windowcount -rmq-endpoints 127.0.0.1:8081 -stop-after-idle 5s
//	go run ./cmd/rmqflow consume -endpoint 127.0.0.1:8081 -topic counts -group counts-g -idle 10s
//
// A message whose store time is behind the watermark (wall time minus
// -watermark-lag) when it is read is late: it is counted in a late pane of
// its window as long as -allowed-lateness covers it. Keep -allowed-lateness
// above the oldest backlog you expect, or such messages are dropped by the
// window and, never acked, come back until the group dead-letters them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	rmqio "github.com/rmqflow/rmqflow/integrations/beam"
)

var (
	endpoints       = flag.String("rmq-endpoints", envOr("RMQFLOW_ENDPOINT", "127.0.0.1:8081"), "the RocketMQ proxy's gRPC `host:port` (default $RMQFLOW_ENDPOINT or 127.0.0.1:8081)")
	mainTopic       = flag.String("main-topic", "agents", "the LITE main `topic` to read")
	group           = flag.String("group", "agents-g", "the wildcard lite `group` bound to -main-topic")
	outTopic        = flag.String("out-topic", "counts", "the LITE main `topic` the counts go to")
	windowSize      = flag.Duration("window", 10*time.Second, "the fixed window's `length`")
	watermarkLag    = flag.Duration("watermark-lag", rmqio.DefaultWatermarkLag, "the watermark is wall time minus this `lag`")
	allowedLateness = flag.Duration("allowed-lateness", time.Hour, "how `long` after its end a window still counts late messages")
	stopAfterIdle   = flag.Duration("stop-after-idle", 0, "end the job once nothing came for this `long`; 0 reads for ever")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Count is the record windowcount writes.
type Count struct {
	LiteTopic   string    `json:"liteTopic"`
	WindowStart time.Time `json:"windowStart"`
	WindowEnd   time.Time `json:"windowEnd"`
	Messages    int       `json:"messages"`
}

func handleByLiteTopic(m rmqio.AckableMessage) (string, []byte) { return m.LiteTopic, m.Handle }

// countFn makes the record of one lite topic's window, carrying the handles
// of the messages it counts.
func countFn(w beam.Window, lite string, handles func(*[]byte) bool, emit func(rmqio.Record)) error {
	iw, ok := w.(window.IntervalWindow)
	if !ok {
		return fmt.Errorf("windowcount: not a fixed window: %v", w)
	}
	var all [][]byte
	var h []byte
	for handles(&h) {
		all = append(all, h)
	}
	body, err := json.Marshal(Count{LiteTopic: lite, WindowStart: iw.Start.ToTime().UTC(), WindowEnd: iw.End.ToTime().UTC(), Messages: len(all)})
	if err != nil {
		return err
	}
	fmt.Printf("%s\n", body)
	emit(rmqio.Record{LiteTopic: lite, Body: body, AckHandles: all})
	return nil
}

func printFailure(f rmqio.AckFailure) { fmt.Printf("ack failed: %s: %s\n", f.MessageID, f.Error) }

func init() {
	register.Function1x2(handleByLiteTopic)
	register.Function4x1(countFn)
	register.Function1x0(printFailure)
	register.Iter1[[]byte]()
	register.Emitter1[rmqio.Record]()
}

func main() {
	flag.Parse()
	beam.Init()
	conn := rmqio.Connection{Endpoints: *endpoints}
	p, s := beam.NewPipelineWithRoot()
	msgs := rmqio.Read(s, rmqio.ReadConfig{Connection: conn, MainTopic: *mainTopic, Group: *group,
		AwaitDuration: 5 * time.Second, WatermarkLag: *watermarkLag, StopAfterIdle: *stopAfterIdle})
	windowed := beam.WindowInto(s, window.NewFixedWindows(*windowSize), msgs, beam.AllowedLateness(*allowedLateness))
	counts := beam.ParDo(s, countFn, beam.GroupByKey(s, beam.ParDo(s, handleByLiteTopic, windowed)))
	beam.ParDo0(s, printFailure, rmqio.Write(s, rmqio.WriteConfig{Connection: conn, Topic: *outTopic}, counts))
	if err := beamx.Run(context.Background(), p); err != nil {
		log.Fatalf("windowcount: %v", err)
	}
}
