package rmqio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// WriteConfig configures Write.
type WriteConfig struct {
	Connection
	// Topic is the destination: the LITE main topic when records name a
	// lite topic. Required.
	Topic string
	// Sink tuning (rmqflow.SinkConfig; zero takes its defaults).
	MaxAttempts int
	Concurrency int
	BatchSize   int
	Linger      time.Duration
	// The ack pool that acks Record.AckHandles (AckConfig's MaxBatch,
	// MaxInFlight and Linger; its connection is this one).
	AckMaxBatch    int
	AckMaxInFlight int
	AckLinger      time.Duration
}

func (c WriteConfig) validate() error {
	if err := c.Connection.validate(); err != nil {
		return err
	}
	if c.Topic == "" {
		return errors.New("rmqio: WriteConfig.Topic is required")
	}
	if err := c.acks().validate(); err != nil {
		return err
	}
	return c.sinkConfig(rmqflow.Connection{Endpoints: c.Endpoints}).Validate()
}

func (c WriteConfig) sinkConfig(conn rmqflow.Connection) rmqflow.SinkConfig {
	return rmqflow.SinkConfig{Connection: conn, Topic: c.Topic, MaxAttempts: c.MaxAttempts,
		Concurrency: c.Concurrency, BatchSize: c.BatchSize, Linger: c.Linger}
}

func (c WriteConfig) acks() AckConfig {
	return AckConfig{Connection: c.Connection, MaxBatch: c.AckMaxBatch, MaxInFlight: c.AckMaxInFlight, Linger: c.AckLinger}
}

// Record is one message to write (rmqflow.Record's fields), with the
// receipt handles (AckableMessage.Handle) of the messages it was made from,
// which Write acks once the record is stored: a record made from a window of
// messages acks them only after it was written.
type Record struct {
	LiteTopic    string
	Tag          string
	Keys         []string
	Properties   map[string]string
	MessageGroup string
	Body         []byte
	AckHandles   [][]byte
}

// Write sends every Record of col to cfg.Topic through the worker's sink
// and, once a record is stored and the bundle that stored it is committed,
// acks its AckHandles. It returns, as AckFailure elements in the global
// window: the handles whose ack failed, and the handles of every record
// refused for good (a permanent error such as a reserved property name; its
// messages are not acked and come back).
//
// A bundle of Write finishes only once every record of the bundle has its
// result. A record that still fails after MaxAttempts with a transient
// error fails the bundle, which the runner retries: records are written at
// least once, and the messages they were made from are acked only after.
func Write(s beam.Scope, cfg WriteConfig, col beam.PCollection) beam.PCollection {
	s = s.Scope("rmqio.Write")
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	handles, refused := beam.ParDo2(s, &writeFn{Cfg: cfg}, beam.WindowInto(s, window.NewGlobalWindows(), col))
	acked := beam.ParDo(s, &handleAckFn{Cfg: cfg.acks()}, beam.Reshuffle(s, handles))
	return beam.Flatten(s, acked, refused)
}

// sinks holds one started Sink per configuration per worker process: DoFn
// instances come and go with bundle plans (a failed plan is dropped without
// Teardown), the sink stays.
var sinks = struct {
	sync.Mutex
	m map[string]*rmqflow.Sink
}{m: map[string]*rmqflow.Sink{}}

func acquireSink(ctx context.Context, cfg WriteConfig) (*rmqflow.Sink, error) {
	b, _ := json.Marshal(cfg) // plain data: cannot fail
	sinks.Lock()
	defer sinks.Unlock()
	if s := sinks.m[string(b)]; s != nil {
		return s, nil
	}
	conn, err := cfg.Connection.rmqflow()
	if err != nil {
		return nil, err
	}
	s, err := rmqflow.NewSink(ctx, cfg.sinkConfig(conn))
	if err != nil {
		return nil, refused(cfg.Connection, cfg.Connection.Endpoints, fmt.Errorf("rmqio: the sink of %s: %w", cfg.Topic, err))
	}
	sinks.m[string(b)] = s
	return s, nil
}

type pendingWrite struct {
	at      beam.EventTime
	f       *rmqflow.SendFuture
	handles [][]byte
}

type writeFn struct {
	Cfg WriteConfig

	sink    *rmqflow.Sink
	pending []pendingWrite
}

func (fn *writeFn) Setup(ctx context.Context) error {
	s, err := acquireSink(ctx, fn.Cfg)
	if err != nil {
		return err
	}
	fn.sink = s
	return nil
}

func (fn *writeFn) StartBundle(_ context.Context, _ func(beam.EventTime, []byte), _ func(beam.EventTime, AckFailure)) {
	fn.pending = fn.pending[:0]
}

func (fn *writeFn) ProcessElement(ctx context.Context, at beam.EventTime, r Record, _ func(beam.EventTime, []byte), _ func(beam.EventTime, AckFailure)) {
	f := fn.sink.Write(context.WithoutCancel(ctx), rmqflow.Record{LiteTopic: r.LiteTopic, Tag: r.Tag, Keys: r.Keys,
		Properties: r.Properties, MessageGroup: r.MessageGroup, Body: r.Body})
	fn.pending = append(fn.pending, pendingWrite{at: at, f: f, handles: r.AckHandles})
}

// FinishBundle waits until every record of the bundle has its result, then
// emits the handles of the stored records (to be acked once this bundle is
// committed) and reports the records refused for good.
func (fn *writeFn) FinishBundle(ctx context.Context, emitHandle func(beam.EventTime, []byte), emitRefused func(beam.EventTime, AckFailure)) error {
	defer func() { fn.pending = fn.pending[:0] }()
	type result struct {
		id  string
		err error
	}
	results := make([]result, len(fn.pending))
	for i, p := range fn.pending {
		id, err := p.f.Wait(ctx)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && client.IsRetriable(err) {
			// Transient after every attempt: the runner retries the bundle.
			return fmt.Errorf("rmqio: writing to %s: %w", fn.Cfg.Topic, err)
		}
		results[i] = result{id, err}
	}
	for i, p := range fn.pending {
		if err := results[i].err; err != nil {
			recordsFailed.Inc(ctx, 1)
			for _, h := range p.handles {
				emitRefused(p.at, refusedFailure(h, err))
			}
			continue
		}
		recordsWritten.Inc(ctx, 1)
		for _, h := range p.handles {
			emitHandle(p.at, h)
		}
	}
	return nil
}

// refusedFailure names the message of handle h, whose record was refused.
func refusedFailure(h []byte, err error) AckFailure {
	f := AckFailure{Error: "rmqio: its record was not written: " + err.Error()}
	var rh rmqflow.ReceiptHandle
	if rh.UnmarshalBinary(h) == nil {
		f.MessageID, f.Topic, f.LiteTopic = rh.MessageID, rh.Topic, rh.LiteTopic
	}
	return f
}

func init() {
	beam.RegisterType(reflect.TypeOf((*Record)(nil)).Elem())
	register.DoFn5x0[context.Context, beam.EventTime, Record, func(beam.EventTime, []byte), func(beam.EventTime, AckFailure)](&writeFn{})
	register.Emitter2[beam.EventTime, []byte]()
}
