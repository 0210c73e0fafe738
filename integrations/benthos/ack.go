package rmqbenthos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
)

// Actions of the rocketmq_ack processor.
const (
	actionAck     = "ack"
	actionDefer   = "defer"
	actionRelease = "release"
)

func ackSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Acks, defers or releases a RocketMQ message by the receipt handle it carries, wherever the work on it finishes.").
		Description(`
For two-stage pipelines: the `+"`rocketmq`"+` input with `+"`ack_mode: manual`"+` writes each message's receipt handle to `+"`"+MetaHandle+"`"+` and acks nothing; this processor acks (or defers, or releases) by that handle once the work is done — after an HTTP call to a model service returned, or in another process that got the handle along with the work. The handle holds no credentials: this processor signs with its own.

Acks are pooled and batched: the acks of a batch, and of every `+"`rocketmq_ack`"+` processor of the process with the same connection (and TLS off: with TLS each processor has a pool of its own), share AckMessage calls. A message that arrives flagged with an error (an earlier processor failed on it, such as the model call) is not acked: it passes on with its error and comes back when its invisibility ends (`+"`ack_errored: true`"+` acks it all the same). A message whose handle is missing or malformed, or whose ack fails, is flagged with the error (see Benthos's error handling) and passed on; the others pass on unchanged. A handle acks only until the invisibility written in it ends; after that the message is delivered again, and its ack fails with an expired-handle error.

`+"`defer`"+` makes the message invisible for `+"`defer_duration`"+` (it then comes back) and writes the new receipt handle the deferral gave it to `+"`"+MetaHandle+"`"+`, for a later ack; `+"`release`"+` makes it visible again at once. Neither ever acks. The input (ack_mode manual) has gone on with the message's lite topic already: a deferred or released lite message comes back after later ones, which the broker then delivers again with it (docs/benthos.md, Manual acks).
`).
		Fields(connectionFields()...).
		Fields(
			service.NewInterpolatedStringField("handle").Description("The serialized receipt handle (JSON, as the input writes it).").Default(`${! meta("`+MetaHandle+`") }`),
			service.NewStringEnumField("action", actionAck, actionDefer, actionRelease).Description("What to do with the message.").Default(actionAck),
			service.NewDurationField("defer_duration").Description("The invisibility `defer` gives.").Default("10s"),
			service.NewBoolField("ack_errored").Description("Ack a message even when it arrives flagged with an error (by default it is left, and comes back).").Default(false).Advanced(),
			service.NewStringListField("allowed_endpoints").Description("Access points the handles may name besides `endpoints` (for handles from several clusters); acks to any other address are refused before any RPC.").Default([]any{}).Advanced(),
		).
		Example("Ack after a model call", "The input hands messages out without acking; they are acked once the HTTP call returned.", `
input:
  rocketmq:
    endpoints: 127.0.0.1:8081
    lite:
      - topic: agents
        group: agents-g
    ack_mode: manual
pipeline:
  processors:
    - http:
        url: http://127.0.0.1:9000/infer
        verb: POST
    - rocketmq_ack:
        endpoints: 127.0.0.1:8081
output:
  drop: {}
`)
}

type ackProcessor struct {
	pool       *rmqflow.AckPool
	ackErrored bool
	handle     *service.InterpolatedString
	action     string
	deferBy    time.Duration
	log        *service.Logger
}

func newAckProcessor(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchProcessor, error) {
	p := &ackProcessor{log: mgr.Logger()}
	conn, err := parseConnection(conf, p.log)
	if err != nil {
		return nil, err
	}
	if p.handle, err = conf.FieldInterpolatedString("handle"); err != nil {
		return nil, err
	}
	if p.action, err = conf.FieldString("action"); err != nil {
		return nil, err
	}
	if p.deferBy, err = conf.FieldDuration("defer_duration"); err != nil {
		return nil, err
	}
	if p.action == actionDefer && p.deferBy <= 0 {
		return nil, errors.New("defer_duration must be positive with action defer (use action release for 0)")
	}
	if p.ackErrored, err = conf.FieldBool("ack_errored"); err != nil {
		return nil, err
	}
	allowed, err := conf.FieldStringList("allowed_endpoints")
	if err != nil {
		return nil, err
	}
	cfg := rmqflow.AckPoolConfig{Connection: conn}
	if len(allowed) > 0 {
		cfg.AllowedEndpoints = append([]string{conn.Endpoints}, allowed...)
	}
	if p.pool, err = rmqflow.AcquireAckPool(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *ackProcessor) ProcessBatch(ctx context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	type pending struct {
		i int
		f *rmqflow.AckFuture
	}
	var acks []pending
	for i, msg := range batch {
		h, err := p.handleOf(msg)
		if err != nil {
			msg.SetError(err)
			continue
		}
		switch p.action {
		case actionAck:
			if msg.GetError() != nil && !p.ackErrored {
				continue // its work failed: it comes back
			}
			acks = append(acks, pending{i, p.pool.AckAsync(ctx, h)})
		case actionDefer:
			nh, err := p.pool.ChangeInvisibleDuration(ctx, h, p.deferBy)
			if err != nil {
				msg.SetError(fmt.Errorf("rocketmq_ack: defer %s: %w", h.MessageID, err))
				continue
			}
			// The deferral gave the delivery a new handle; an ack later in
			// the pipeline must use it (the old one no longer acks).
			if b, err := nh.MarshalJSON(); err == nil {
				msg.MetaSetMut(MetaHandle, string(b))
			}
		default:
			if _, err := p.pool.ChangeInvisibleDuration(ctx, h, 0); err != nil {
				msg.SetError(fmt.Errorf("rocketmq_ack: release %s: %w", h.MessageID, err))
			}
		}
	}
	for _, a := range acks {
		select {
		case <-a.f.Done():
			if err := a.f.Err(); err != nil {
				batch[a.i].SetError(fmt.Errorf("rocketmq_ack: ack: %w", err))
			}
		case <-ctx.Done():
			batch[a.i].SetError(fmt.Errorf("rocketmq_ack: ack: outcome unknown: %w", ctx.Err()))
		}
	}
	return []service.MessageBatch{batch}, nil
}

// handleOf reads and decodes msg's receipt handle.
func (p *ackProcessor) handleOf(msg *service.Message) (rmqflow.ReceiptHandle, error) {
	var h rmqflow.ReceiptHandle
	s, err := p.handle.TryString(msg)
	if err != nil {
		return h, fmt.Errorf("rocketmq_ack: handle: %w", err)
	}
	if s == "" {
		return h, errors.New("rocketmq_ack: the message carries no receipt handle (is the input's ack_mode manual?)")
	}
	if err := h.UnmarshalJSON([]byte(s)); err != nil {
		return h, fmt.Errorf("rocketmq_ack: %w", err)
	}
	return h, nil
}

func (p *ackProcessor) Close(ctx context.Context) error {
	return p.pool.Release(ctx)
}
