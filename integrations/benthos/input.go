package rmqbenthos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Metadata keys set on every message the input emits: rmqflow's attribute
// names (rmqflow.Metadata.Attributes). User properties are set under their
// own names as well.
const (
	MetaTopic           = rmqflow.AttrTopic
	MetaLiteTopic       = rmqflow.AttrLiteTopic
	MetaMessageID       = rmqflow.AttrMessageID
	MetaTag             = rmqflow.AttrTag
	MetaKeys            = rmqflow.AttrKeys
	MetaMessageGroup    = rmqflow.AttrMessageGroup
	MetaDeliveryAttempt = rmqflow.AttrDeliveryAttempt
	MetaBornTime        = rmqflow.AttrBornTime
	MetaBornHost        = rmqflow.AttrBornHost
	MetaStoreTime       = rmqflow.AttrStoreTime
	MetaDeadLettered    = rmqflow.AttrDeadLettered
	MetaHandle          = rmqflow.AttrHandle
)

// defaultLiteMaxMessages is max_messages' default in lite mode: the most
// messages of one lite topic a receive can take, so that a message is
// delivered again only for its own nacks and for those of the one message
// before it (see the field's description).
const defaultLiteMaxMessages = 2

// Ack modes of the input.
const (
	ackModeOutput = "output"
	ackModeManual = "manual"
)

func inputSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Reads messages from RocketMQ 5 topics through the gRPC Pop model: lite topics (one per tenant, session or conversation) or a normal topic, with at-least-once delivery.").
		Description(`
The input never acks a message by itself. A message is acked (through a pooled, batched ack) once the pipeline's output has it; a message the pipeline fails (a nack) is deferred on the broker with ChangeInvisibleDuration and an exponential backoff by its own nacks, so that it comes back after a while — never replayed in this process, where the broker would not know it failed. Inside a batch each message gets its own result (Benthos batch errors): one failed message does not bring its batch-mates back.

Messages of one lite topic (or FIFO message group) are emitted one at a time and in order: the next waits until the pipeline has finished the previous one, and a nacked message holds its lite topic back until it returns (see rmqflow's Runner, which this input is built on). Messages of different lite topics flow in parallel, up to `+"`concurrency`"+`.

A message that keeps failing stops being deferred when a safety valve fires (`+"`valves`"+`, judged by the message's own nacks only, not by the deliveries it spent waiting behind a failed message of its lite topic), so that nothing loops for ever. What then happens to it is `+"`dead_letter`"+`'s choice, and it is never dropped unless that says so: by default it is moved to the group's dead-letter queue on the broker, `+"`%DLQ%<group>`"+`; with `+"`dead_letter.topic`"+` it is written to a topic of your own and acked once stored; only with `+"`dead_letter.drop: true`"+` is it acked and dropped. Either way it is logged (its handle, never its body) and counted in the `+"`"+MetricDeadLettered+"`"+` metric.

With `+"`ack_mode: manual`"+` the input acks nothing: every message carries its serialized receipt handle in `+"`"+MetaHandle+"`"+` metadata, and a `+"`rocketmq_ack`"+` processor acks, defers or releases it wherever the work finishes — later in the pipeline, or in another process that received the handle. The input goes on with the message's lite topic once the output has the message, so manual mode keeps no order per lite topic past the output (docs/benthos.md, Manual acks).

### Metadata

- `+"`"+MetaTopic+"`"+`, `+"`"+MetaLiteTopic+"`"+`, `+"`"+MetaMessageID+"`"+`, `+"`"+MetaTag+"`"+`, `+"`"+MetaKeys+"`"+` (space separated), `+"`"+MetaMessageGroup+"`"+`
- `+"`"+MetaDeliveryAttempt+"`"+` (1 on the first delivery), `+"`"+MetaBornTime+"`"+`, `+"`"+MetaBornHost+"`"+`, `+"`"+MetaStoreTime+"`"+` (RFC 3339)
- `+"`"+MetaDeadLettered+"`"+`: `+"`true`"+` when the message came from the group's dead-letter topic
- `+"`"+MetaHandle+"`"+`: the receipt handle as JSON (no credentials), with `+"`ack_mode: manual`"+` or `+"`handle_metadata: true`"+`. Writing it hands the message off: the input stops renewing its invisibility, so it must be acked before that ends: as little as `+"`renewal_ahead_time`"+` after it was written when it had waited behind earlier messages of its lite topic (docs/benthos.md, Manual acks).
- every user property of the message, under its own name, but those named as the metadata above (a producer cannot make a message pass for a dead-lettered one).
`).
		Fields(connectionFields()...).
		Fields(
			service.NewStringEnumField("mode", "lite", "simple").
				Description("`lite` reads LITE main topics through their wildcard groups; `simple` reads one normal (or FIFO) topic with a tag or SQL92 filter.").
				Default("lite"),
			service.NewObjectListField("lite",
				service.NewStringField("topic").Description("A LITE main topic."),
				service.NewStringField("group").Description("Its wildcard lite group (`lite.bind.topic=<topic>`, `lite.sub.wildcard=true`)."),
			).Description("The main topics read in `lite` mode, each with its group.").Default([]any{}),
			service.NewStringField("topic").Description("The topic read in `simple` mode.").Default(""),
			service.NewStringField("group").Description("The consumer group of `simple` mode.").Default(""),
			service.NewStringEnumField("filter_type", "tag", "sql").Description("The filter language of `simple` mode.").Default("tag"),
			service.NewStringField("filter_expression").Description("A tag expression (`*`, `a||b`) or an SQL92 expression over user properties.").Default("*"),
			service.NewIntField("fetch_concurrency").Description("Long-polling receivers per main topic.").Default(rmqflow.DefaultFetchConcurrency).Advanced(),
			service.NewDurationField("await_duration").Description("The long-polling window of each receive (5 s to 20 s).").Default(rmqflow.DefaultAwaitDuration.String()).Advanced(),
			service.NewDurationField("invisible_duration").Description("How long a received message stays invisible to the group; the input renews it while it holds the message.").Default(rmqflow.DefaultInvisibleDuration.String()),
			service.NewIntField("max_messages").Description("The most messages one receive asks for (1 to 32); 0: "+fmt.Sprint(defaultLiteMaxMessages)+" in `lite` mode, "+fmt.Sprint(rmqflow.DefaultMaxMessageNum)+" in `simple` mode. In `lite` mode a receive may take that many messages of one lite topic, and the broker delivers again every one of them behind a message the pipeline fails, spending one of the deliveries its group allows (retry limit + 1) although it did not fail: past that limit the broker dead-letters it. With "+fmt.Sprint(defaultLiteMaxMessages)+", a message waits only behind the one before it, whose nacks the valves stop at half the group's deliveries; raise it only with a group whose retry limit covers the nacks of the messages ahead.").Default(0).Advanced(),
			service.NewDurationField("renewal_ahead_time").Description("How long before a held message's invisibility ends it is renewed.").Default(rmqflow.DefaultRenewalAheadTime.String()).Advanced(),
			service.NewDurationField("max_outage").Description("How long receiving may keep failing before the input reports an error and reconnects.").Default(rmqflow.DefaultMaxOutage.String()).Advanced(),
			service.NewIntField("concurrency").Description("The most messages out in the pipeline at once (across lite topics; one per lite topic).").Default(64),
			service.NewIntField("batch_size").Description("The most messages one read hands to the pipeline; a read returns what is ready without waiting for more.").Default(rmqflow.DefaultMaxMessageNum),
			service.NewStringEnumField("ack_mode", ackModeOutput, ackModeManual).
				Description("`output`: the input acks a message once the output has it. `manual`: the input never acks; a `rocketmq_ack` processor (here or in another process) acks by the handle in `"+MetaHandle+"`.").
				Default(ackModeOutput),
			service.NewBoolField("handle_metadata").Description("Also write `"+MetaHandle+"` with `ack_mode: output` (it is always written with `manual`). It hands the message off: see above.").Default(false).Advanced(),
			service.NewDurationField("nack_backoff").Description("The deferral of a message's first nack; it doubles with each of the message's own nacks (not with deliveries it spent waiting behind a nacked message of its lite topic).").Default(rmqflow.DefaultErrorBackoff.String()),
			service.NewDurationField("nack_backoff_max").Description("The longest deferral of a nacked message.").Default(rmqflow.DefaultErrorBackoffMax.String()),
			service.NewObjectField("valves",
				service.NewIntField("max_delivery_attempt").Description("Once a failing message's own deliveries (1 + its nacks by this input) reach this, it is given up on instead of deferred; lowered to the deliveries its group allows (retry limit + 1) when smaller, and for a lite message to half of those (rounded up), since the message behind it is delivered again with it.").Default(rmqflow.DefaultMaxDeliveryAttempt),
				service.NewIntField("max_defers").Description("After this many nacks by this input a failing message is given up on.").Default(rmqflow.DefaultMaxDefers),
				service.NewDurationField("max_deferred_age").Description("A failing message older than this (since it was sent) is given up.").Default(rmqflow.DefaultMaxDeferredAge.String()),
				service.NewDurationField("max_defer_duration").Description("The longest single deferral.").Default(rmqflow.DefaultMaxDeferDuration.String()),
			).Description("Safety valves: when one fires, a message the pipeline keeps failing is given up on instead of being deferred again, and goes where `dead_letter` says (by default the group's dead-letter queue on the broker; never dropped unless `dead_letter.drop` is true).").Advanced(),
			service.NewObjectField("dead_letter",
				service.NewStringField("topic").Description("A topic of your own where a message given up on is parked: the input writes a copy (body, tag, keys, properties, plus `"+rmqflow.PropertyDeadLetterOrigin+"`, `"+rmqflow.PropertyDeadLetterLiteTopic+"`, `"+rmqflow.PropertyDeadLetterMessageID+"` and `"+rmqflow.PropertyDeadLetterCause+"` saying where it came from and why) and acks the message once the broker stored the copy; if the write fails the message is kept and tried again later. Connect checks the topic first: one that cannot store such a copy (a FIFO topic, or a LITE one without `lite_topic`) fails Connect, naming the types it accepts. A message whose write failed 3 times (a topic that refuses copies since: deleted, denied, an illegal `lite_topic`) goes to the group's dead-letter queue instead, logged. Empty: the group's dead-letter queue `%DLQ%<group>` on the broker (ForwardMessageToDeadLetterQueue), where it can be read back; on RocketMQ 5.5.0 a lite message in `%DLQ%<group>` is also delivered into its lite topic again (`"+MetaDeadLettered+"` true) and cannot be acked for good, so set a topic to park lite messages for good.").Default(""),
				service.NewStringField("lite_topic").Description("The lite topic of the copies, when `topic` is a LITE main topic; the original lite topic travels in `"+rmqflow.PropertyDeadLetterLiteTopic+"`.").Default(""),
				service.NewBoolField("drop").Description("Ack (drop) a message given up on instead of keeping it anywhere: it is lost. Only for messages that are worthless once they kept failing; excludes `topic`.").Default(false),
			).Description("Where a message goes once a safety valve (`valves`) gave up on it: by default the group's dead-letter queue on the broker; `topic` parks it in a topic of your own; `drop: true` acks it, losing it. Each is logged and counted in the `"+MetricDeadLettered+"` metric (label `to`: `broker-dlq`, `topic`, `topic-failed` for each failed write to `topic`, `left` when it could not be moved and comes back, `dropped`).").Advanced(),
			service.NewObjectField("fair_share",
				service.NewBoolField("enabled").Description("Defer a lite topic while it takes more than its share of recent throughput.").Default(false),
				service.NewDurationField("window").Description("How much recent throughput counts.").Default("10s"),
				service.NewFloatField("slack").Description("How far above the mean rate of the active lite topics one may go.").Default(1.5),
				service.NewIntField("min_count").Description("Messages a lite topic may take per window before it can be throttled at all.").Default(10),
				service.NewDurationField("defer").Description("How long an over-share message (and so its lite topic) is deferred.").Default("10s"),
			).Description("The fair-share throttle: a hot lite topic cannot take the pipeline from the others. Its deferrals happen before a message reaches the pipeline.").Advanced(),
			service.NewDurationField("shutdown_timeout").Description("How long closing waits for the messages out in the pipeline; those still out are then given back to the group.").Default("20s").Advanced(),
		).
		Example("Lite topics, acked when the output has them", "Reads every lite topic of the main topic `agents` and writes each message to stdout.", `
input:
  rocketmq:
    endpoints: 127.0.0.1:8081
    lite:
      - topic: agents
        group: agents-g
output:
  stdout: {}
`)
}

// delivery is a message out in the pipeline; result receives its outcome:
// nil once the output has it, the pipeline's error otherwise.
type delivery struct {
	m      *rmqflow.AckableMessage[[]byte]
	result chan error
}

type input struct {
	srcCfg     rmqflow.SourceConfig
	runCfg     rmqflow.RunnerConfig
	deadLetter *rmqflow.SinkConfig // dead_letter.topic's sink; nil: none
	fair       *rmqflow.FairShareConfig
	batchSize  int
	manual     bool
	handleMeta bool
	log        *service.Logger
	deliveries chan *delivery

	mu      sync.Mutex
	cancel  context.CancelFunc
	closing chan struct{} // closed by Close: stop handing messages out
	stopped chan struct{} // closed when the runner ends
	runErr  error
}

func newInput(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
	in := &input{log: mgr.Logger()}
	conn, err := parseConnection(conf, in.log)
	if err != nil {
		return nil, err
	}
	conn.Meter = newBenthosMeter(mgr.Metrics())
	c := rmqflow.SourceConfig{Connection: conn}
	mode, err := conf.FieldString("mode")
	if err != nil {
		return nil, err
	}
	lite, err := conf.FieldObjectList("lite")
	if err != nil {
		return nil, err
	}
	topic, _ := conf.FieldString("topic")
	group, _ := conf.FieldString("group")
	switch mode {
	case "lite":
		if len(lite) == 0 {
			return nil, errors.New("mode lite needs at least one entry in lite (topic and group)")
		}
		if topic != "" || group != "" {
			return nil, errors.New("topic and group are for mode simple; list lite main topics under lite")
		}
		c.Mode = rmqflow.ModeLite
		for _, l := range lite {
			var b rmqflow.LiteBinding
			if b.Topic, err = l.FieldString("topic"); err != nil {
				return nil, err
			}
			if b.Group, err = l.FieldString("group"); err != nil {
				return nil, err
			}
			c.Lite = append(c.Lite, b)
		}
	default:
		if len(lite) > 0 {
			return nil, errors.New("lite is for mode lite; mode simple reads topic with group")
		}
		c.Mode, c.Topic, c.Group = rmqflow.ModeSimple, topic, group
		ft, _ := conf.FieldString("filter_type")
		expr, _ := conf.FieldString("filter_expression")
		if ft == "sql" {
			c.Filter = client.SQLFilter(expr)
		} else {
			c.Filter = client.TagFilter(expr)
		}
	}
	for name, dst := range map[string]*int{"fetch_concurrency": &c.FetchConcurrency, "max_messages": &c.MaxMessageNum} {
		if *dst, err = conf.FieldInt(name); err != nil {
			return nil, err
		}
	}
	for name, dst := range map[string]*time.Duration{
		"await_duration": &c.AwaitDuration, "invisible_duration": &c.InvisibleDuration,
		"renewal_ahead_time": &c.RenewalAheadTime, "max_outage": &c.MaxOutage,
	} {
		if *dst, err = conf.FieldDuration(name); err != nil {
			return nil, err
		}
	}
	if c.Mode == rmqflow.ModeLite && c.MaxMessageNum == 0 {
		c.MaxMessageNum = defaultLiteMaxMessages
	}
	in.srcCfg = c

	// The give-up log lines name the input's fields: a Benthos user cannot
	// call Runner.SetDeadLetter.
	r := rmqflow.RunnerConfig{Hints: rmqflow.RunnerHints{DeadLetter: "the rocketmq input's dead_letter.topic",
		Drop: "the rocketmq input's dead_letter.drop: true"}}
	if r.Concurrency, err = conf.FieldInt("concurrency"); err != nil {
		return nil, err
	}
	if r.Concurrency < 1 {
		return nil, errors.New("concurrency must be at least 1")
	}
	if r.ErrorBackoff, err = conf.FieldDuration("nack_backoff"); err != nil {
		return nil, err
	}
	if r.ErrorBackoffMax, err = conf.FieldDuration("nack_backoff_max"); err != nil {
		return nil, err
	}
	if r.ShutdownTimeout, err = conf.FieldDuration("shutdown_timeout"); err != nil {
		return nil, err
	}
	v := conf.Namespace("valves")
	var maxAttempt int
	if maxAttempt, err = v.FieldInt("max_delivery_attempt"); err != nil {
		return nil, err
	}
	r.ErrorValves.MaxDeliveryAttempt = int32(min(max(maxAttempt, 0), 1<<30))
	if r.ErrorValves.MaxDefers, err = v.FieldInt("max_defers"); err != nil {
		return nil, err
	}
	if r.ErrorValves.MaxDeferredAge, err = v.FieldDuration("max_deferred_age"); err != nil {
		return nil, err
	}
	if r.ErrorValves.MaxDeferDuration, err = v.FieldDuration("max_defer_duration"); err != nil {
		return nil, err
	}
	dl := conf.Namespace("dead_letter")
	dlTopic, err := dl.FieldString("topic")
	if err != nil {
		return nil, err
	}
	dlLite, err := dl.FieldString("lite_topic")
	if err != nil {
		return nil, err
	}
	drop, err := dl.FieldBool("drop")
	if err != nil {
		return nil, err
	}
	switch {
	case drop && dlTopic != "":
		return nil, errors.New("dead_letter.drop and dead_letter.topic exclude each other: drop acks (loses) what topic would park")
	case dlLite != "" && dlTopic == "":
		return nil, errors.New("dead_letter.lite_topic needs dead_letter.topic (its LITE main topic)")
	case drop:
		r.ErrorValves.OnValve = rmqflow.ValveAck
	case dlTopic != "":
		in.deadLetter = &rmqflow.SinkConfig{Connection: conn, Topic: dlTopic, LiteTopic: dlLite}
	}
	in.runCfg = r

	fs := conf.Namespace("fair_share")
	if on, _ := fs.FieldBool("enabled"); on {
		f := &rmqflow.FairShareConfig{}
		if f.Window, err = fs.FieldDuration("window"); err != nil {
			return nil, err
		}
		if f.Slack, err = fs.FieldFloat("slack"); err != nil {
			return nil, err
		}
		if f.MinCount, err = fs.FieldInt("min_count"); err != nil {
			return nil, err
		}
		if f.Defer, err = fs.FieldDuration("defer"); err != nil {
			return nil, err
		}
		in.fair = f
	}
	if in.batchSize, err = conf.FieldInt("batch_size"); err != nil {
		return nil, err
	}
	if in.batchSize < 1 {
		return nil, errors.New("batch_size must be at least 1")
	}
	mode, _ = conf.FieldString("ack_mode")
	in.manual = mode == ackModeManual
	if in.handleMeta, err = conf.FieldBool("handle_metadata"); err != nil {
		return nil, err
	}
	// Check the whole configuration now, so that a bad value fails the
	// config, not every reconnection.
	_, src, err := in.build(nil, nil)
	if err != nil {
		return nil, err
	}
	if err := src.Close(context.Background()); err != nil { // never started: releases its ack pool
		return nil, err
	}
	return in, nil
}

// build makes a new source and runner from the configuration, whose
// handler hands messages out on ch until closing is closed.
func (in *input) build(ch chan *delivery, closing chan struct{}) (*rmqflow.Runner[[]byte], *rmqflow.Source[[]byte], error) {
	src, err := rmqflow.NewSource(in.srcCfg, rmqflow.BytesDecoder())
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*rmqflow.Runner[[]byte], *rmqflow.Source[[]byte], error) {
		_ = src.Close(context.Background())
		return nil, nil, err
	}
	run, err := rmqflow.NewRunner(src, func(ctx context.Context, m *rmqflow.AckableMessage[[]byte]) (rmqflow.Decision, error) {
		return in.handle(ctx, ch, closing, m)
	}, in.runCfg)
	if err != nil {
		return fail(err)
	}
	if in.fair != nil {
		policy, err := rmqflow.FairShare[[]byte](*in.fair)
		if err != nil {
			return fail(err)
		}
		th, err := rmqflow.NewThrottle(src.Acker(), policy, in.runCfg.ErrorValves)
		if err != nil {
			return fail(err)
		}
		run.SetThrottle(th)
	}
	return run, src, nil
}

// handle is the runner's handler: it hands m to ReadBatch and waits for the
// pipeline's verdict.
func (in *input) handle(ctx context.Context, ch chan<- *delivery, closing <-chan struct{}, m *rmqflow.AckableMessage[[]byte]) (rmqflow.Decision, error) {
	d := &delivery{m: m, result: make(chan error, 1)}
	select {
	case ch <- d:
	case <-closing:
		return rmqflow.Release(), nil // never handed out: back to the group at once
	case <-ctx.Done():
		return rmqflow.Release(), nil
	}
	select {
	case err := <-d.result:
		switch {
		case err != nil:
			return rmqflow.Decision{}, &nackError{err: err} // deferred with backoff, up to the valves
		case in.manual:
			return rmqflow.Settled(), nil // acked by a rocketmq_ack processor
		default:
			return rmqflow.Ack(), nil
		}
	case <-ctx.Done():
		// The shutdown timed out while the pipeline still had m: give it
		// back; an ack the pipeline sends later is lost, and m comes again.
		return rmqflow.Release(), nil
	}
}

// nackError is the pipeline's error for a message, as the runner sees it.
type nackError struct{ err error }

func (e *nackError) Error() string {
	return "rmqbenthos: the pipeline failed the message: " + e.err.Error()
}
func (e *nackError) Unwrap() error { return e.err }

func (in *input) Connect(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopped != nil {
		select {
		case <-in.stopped:
		default:
			return nil // running
		}
	}
	ch, closing := make(chan *delivery), make(chan struct{})
	run, src, err := in.build(ch, closing)
	if err != nil {
		return err
	}
	var dlq *rmqflow.Sink
	if in.deadLetter != nil {
		// Opened and checked before the source starts: a dead-letter topic
		// the broker refuses, or one that cannot store a parked copy (a
		// FIFO topic, or a LITE one without dead_letter.lite_topic), fails
		// Connect before any message is received.
		if dlq, err = rmqflow.NewSink(ctx, *in.deadLetter); err == nil {
			if err = rmqflow.CheckDeadLetterSink(ctx, dlq); err != nil {
				err = errors.Join(err, dlq.Close(context.WithoutCancel(ctx)))
			}
		}
		if err != nil {
			err = fmt.Errorf("rocketmq input: dead_letter.topic %s: %w", in.deadLetter.Topic, err)
			return errors.Join(err, src.Close(context.WithoutCancel(ctx)))
		}
		run.SetDeadLetter(rmqflow.DeadLetterToSink[[]byte](dlq))
	}
	closeDLQ := func() error {
		if dlq == nil {
			return nil
		}
		timeout := in.runCfg.ShutdownTimeout
		if timeout <= 0 {
			timeout = rmqflow.DefaultShutdownTimeout
		}
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return dlq.Close(cctx)
	}
	// Start here, not in Run: a refusal (unknown group or topic, denied
	// credentials) is then Connect's error, which Benthos retries with its
	// backoff; from Run it came back through ReadBatch as ErrNotConnected,
	// and Benthos reconnected at once, for ever.
	if err := src.Start(ctx); err != nil {
		return errors.Join(err, src.Close(context.WithoutCancel(ctx)), closeDLQ())
	}
	rctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	in.deliveries, in.closing, in.cancel, in.stopped, in.runErr = ch, closing, cancel, stopped, nil
	go func() {
		err := run.Run(rctx)
		// The runner has returned: every dead-letter write it made was
		// waited for, and the sink has nothing left to send.
		if cerr := closeDLQ(); cerr != nil {
			in.log.Warnf("rocketmq input: closing the dead_letter.topic sink: %v", cerr)
		}
		in.mu.Lock()
		in.runErr = err
		in.mu.Unlock()
		close(stopped)
	}()
	return nil
}

func (in *input) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	in.mu.Lock()
	deliveries, stopped := in.deliveries, in.stopped
	in.mu.Unlock()
	if stopped == nil {
		return nil, nil, service.ErrNotConnected
	}
	var ds []*delivery
	select {
	case d := <-deliveries:
		ds = append(ds, d)
	case <-stopped:
		in.mu.Lock()
		err := in.runErr
		in.mu.Unlock()
		if err == nil || errors.Is(err, context.Canceled) {
			return nil, nil, service.ErrNotConnected
		}
		in.log.Errorf("rocketmq input stopped: %v", err)
		return nil, nil, service.ErrNotConnected
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
more:
	for len(ds) < in.batchSize {
		select {
		case d := <-deliveries:
			ds = append(ds, d)
		default:
			break more
		}
	}
	batch := make(service.MessageBatch, len(ds))
	for i, d := range ds {
		batch[i] = in.message(d.m)
	}
	idx := batch.Index()
	return batch, func(_ context.Context, err error) error {
		for i, e := range perMessage(batch, idx, err) {
			ds[i].result <- e
		}
		return nil
	}, nil
}

// perMessage spreads the pipeline's verdict on a batch over its messages: a
// batch error names the failed ones (the others went through); any other
// error fails them all.
func perMessage(batch service.MessageBatch, idx *service.Indexer, err error) []error {
	out := make([]error, len(batch))
	if err == nil {
		return out
	}
	var berr *service.BatchError
	if !errors.As(err, &berr) || berr.IndexedErrors() == 0 {
		for i := range out {
			out[i] = err
		}
		return out
	}
	failed := 0
	berr.WalkMessagesIndexedBy(idx, func(i int, _ *service.Message, e error) bool {
		if e != nil && i >= 0 && i < len(out) && out[i] == nil {
			out[i] = e
			failed++
		}
		return true
	})
	if failed == 0 { // the error names none of ours: fail them all
		for i := range out {
			out[i] = err
		}
	}
	return out
}

// message builds the Benthos message of m with its metadata.
func (in *input) message(m *rmqflow.AckableMessage[[]byte]) *service.Message {
	msg := service.NewMessage(m.Value)
	for k, v := range m.Meta.Properties {
		// A producer's property named like the delivery's metadata
		// (rocketmq_dead_lettered, rocketmq_handle, ...) must not pass for it.
		if !rmqflow.IsAttribute(k) {
			msg.MetaSetMut(k, v)
		}
	}
	meta := m.Meta
	for k, v := range meta.Attributes() {
		msg.MetaSetMut(k, v)
	}
	if in.manual || in.handleMeta {
		if b, err := m.Handle.MarshalJSON(); err == nil {
			msg.MetaSetMut(MetaHandle, string(b))
		} else {
			in.log.Errorf("rocketmq input: cannot serialize the receipt handle of %s: %v", meta.MessageID, err)
		}
	}
	return msg
}

func (in *input) Close(ctx context.Context) error {
	in.mu.Lock()
	cancel, stopped, closing := in.cancel, in.stopped, in.closing
	in.cancel = nil
	in.mu.Unlock()
	if cancel == nil {
		return nil
	}
	// Run's ctx first: what a handler gives back once it sees closing is
	// then given back during the shutdown, where no safety valve fires (a
	// valve firing in between would give up on — by default dead-letter — a message
	// never worked).
	cancel()
	close(closing)
	select {
	case <-stopped:
	case <-ctx.Done():
		return fmt.Errorf("rocketmq input: close: %w", ctx.Err())
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.runErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
