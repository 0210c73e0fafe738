package client

import (
	"context"
	"errors"
	"io"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/durationpb"
)

// MaxBatchSize is the most messages one ReceiveMessage returns (the proxy's
// grpcClientConsumerLongPollingBatchSize).
const MaxBatchSize = 32

// DefaultLongPollingTimeout is the long-polling window used when a
// ReceiveRequest leaves it zero (the proxy clamps it to 5..20 s).
const DefaultLongPollingTimeout = 20 * time.Second

// ReceiveRequest is one ReceiveMessage long poll.
type ReceiveRequest struct {
	// Group is the consumer group. Required.
	Group string
	// Topic is the normal topic, or the LITE main topic the group is bound to.
	// Required.
	Topic string
	// Filter selects messages on a normal topic; zero means all.
	Filter Filter
	// BatchSize is the most messages to return. Zero means MaxBatchSize. It is
	// sent as given otherwise, so the broker's own limit applies.
	BatchSize int
	// InvisibleDuration is how long received messages stay invisible to the
	// group. Required (the broker accepts 10 s .. 12 h).
	InvisibleDuration time.Duration
	// LongPollingTimeout is how long the broker may hold the poll open when no
	// message is ready. Zero means DefaultLongPollingTimeout.
	LongPollingTimeout time.Duration
	// AutoRenew asks the proxy to renew invisibility itself (push consumers).
	AutoRenew bool
	// AttemptID lets a retried poll be recognised; empty means a fresh one.
	AttemptID string
	// Queue overrides the queue the poll is addressed to. Nil means: the first
	// readable queue of the route for a lite session's main topic, otherwise
	// round-robin over the readable queues.
	Queue *v2.MessageQueue
	// Lite addresses the poll like the Java LiteSimpleConsumer: to the first
	// readable queue of the main topic's route.
	Lite bool
}

// Receive long-polls once. An empty poll (MESSAGE_NOT_FOUND) returns no
// messages and a nil error. The call is bounded by ctx and, when ctx has no
// earlier deadline, by LongPollingTimeout + RequestTimeout. A receive loop
// that retries failed polls should use a Poller, which repeats the attempt
// id of a poll whose answer was lost.
func (c *Client) Receive(ctx context.Context, req ReceiveRequest) ([]*ReceivedMessage, error) {
	msgs, _, err := c.receive(ctx, req)
	return msgs, err
}

// receiveOutcome tells a Poller what became of a poll.
type receiveOutcome struct {
	sent     bool             // the poll went out
	answered bool             // a status or a message came back
	queue    *v2.MessageQueue // the queue it was addressed to
	attempt  string           // its attempt id
}

func (c *Client) receive(ctx context.Context, req ReceiveRequest) ([]*ReceivedMessage, receiveOutcome, error) {
	const op = "ReceiveMessage"
	var out receiveOutcome
	if c.isClosed() {
		return nil, out, ErrClosed
	}
	if req.Group == "" {
		return nil, out, &ConfigError{Option: "Group", Reason: "empty"}
	}
	if req.Topic == "" {
		return nil, out, &ConfigError{Option: "Topic", Reason: "empty"}
	}
	if req.InvisibleDuration <= 0 {
		return nil, out, &ConfigError{Option: "InvisibleDuration", Reason: "must be positive"}
	}
	if req.BatchSize < 0 {
		return nil, out, &ConfigError{Option: "BatchSize", Reason: "must not be negative"}
	}
	batch := req.BatchSize
	if batch == 0 {
		batch = MaxBatchSize
	}
	lp := req.LongPollingTimeout
	if lp == 0 {
		lp = DefaultLongPollingTimeout
	}
	q := req.Queue
	if q == nil {
		r, err := c.route(ctx, req.Topic)
		if err != nil {
			return nil, out, err
		}
		if req.Lite {
			q = r.first(readable)
		} else {
			q = r.pick(readable)
		}
		if q == nil {
			return nil, out, &StatusError{Op: op, Code: CodeTopicNotFound, Message: "no readable queue in the route of " + req.Topic}
		}
	}
	attempt := req.AttemptID
	if attempt == "" {
		attempt = requestID()
	}
	out = receiveOutcome{sent: true, queue: q, attempt: attempt}
	pb := &v2.ReceiveMessageRequest{
		Group:              c.resource(req.Group),
		MessageQueue:       q,
		FilterExpression:   req.Filter.proto(),
		BatchSize:          int32(batch),
		InvisibleDuration:  durationpb.New(req.InvisibleDuration),
		AutoRenew:          req.AutoRenew,
		LongPollingTimeout: durationpb.New(lp),
		AttemptId:          &attempt,
	}
	cctx, cancel := c.callCtx(ctx, lp+c.cfg.RequestTimeout)
	defer cancel()
	stream, err := c.stub.ReceiveMessage(cctx, pb)
	if err != nil {
		return nil, out, c.wrap(op, err)
	}
	var (
		msgs   []*ReceivedMessage
		status *v2.Status
	)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Messages already read stay invisible until they expire; hand them
			// over with the error so that nothing is silently dropped.
			out.answered = status != nil || len(msgs) > 0
			return msgs, out, c.wrap(op, err)
		}
		switch x := resp.GetContent().(type) {
		case *v2.ReceiveMessageResponse_Status:
			status = x.Status
		case *v2.ReceiveMessageResponse_Message:
			msgs = append(msgs, fromProto(x.Message))
		case *v2.ReceiveMessageResponse_DeliveryTimestamp:
		}
	}
	out.answered = status != nil || len(msgs) > 0
	if status == nil {
		return msgs, out, &StatusError{Op: op, Code: CodeInternalError, Message: "stream ended without a status"}
	}
	switch status.GetCode() {
	case v2.Code_OK:
		return msgs, out, nil
	case v2.Code_MESSAGE_NOT_FOUND:
		return msgs, out, nil
	case v2.Code_PROXY_TIMEOUT:
		// The proxy gave up waiting for the broker, which may have popped
		// messages all the same: the answer is lost.
		out.answered = len(msgs) > 0
	}
	return msgs, out, &StatusError{Op: op, Code: Code(status.GetCode()), Message: status.GetMessage()}
}

// Poller issues the ReceiveMessage polls of one receive loop; it is not safe
// for concurrent use (give each loop its own). A poll whose answer was lost —
// a transport failure or deadline before any status or message came back, a
// stream that ended without a status, or PROXY_TIMEOUT — may have popped
// messages on the broker all the same, which on a lite topic or a FIFO
// queue would then hold that queue for a whole InvisibleDuration. The next
// poll therefore repeats its attempt id (ReceiveMessageRequest.attempt_id)
// and its queue, which the broker takes as the same pop and answers with
// those messages again, as the official FIFO consumers do after a deadline.
// Any answer — messages, MESSAGE_NOT_FOUND, any other status, or messages
// followed by a failure (repeating the attempt would hand the messages
// already taken out again under new handles) — ends the attempt: the next
// poll has a new attempt id. Repeating an attempt the broker never saw is
// harmless: it is a new pop.
type Poller struct {
	c       *Client
	attempt string           // to repeat; empty: the next poll is a new attempt
	queue   *v2.MessageQueue // the queue of that attempt
}

// NewPoller returns a Poller over c.
func (c *Client) NewPoller() *Poller { return &Poller{c: c} }

// Receive is Client.Receive with the attempt handling described on Poller:
// after a poll whose answer was lost, req's AttemptID and Queue are replaced
// by the lost poll's.
func (p *Poller) Receive(ctx context.Context, req ReceiveRequest) ([]*ReceivedMessage, error) {
	if p.attempt != "" {
		req.AttemptID, req.Queue = p.attempt, p.queue
	}
	msgs, out, err := p.c.receive(ctx, req)
	if !out.sent {
		return msgs, err // nothing went out: a pending attempt stays pending
	}
	p.attempt, p.queue = "", nil
	if err != nil && !out.answered {
		p.attempt, p.queue = out.attempt, out.queue
	}
	return msgs, err
}

// AckEntry is one message to acknowledge.
type AckEntry struct {
	MessageID     string
	ReceiptHandle string
	// LiteTopic is set for messages of a lite topic.
	LiteTopic string
}

// AckResult is the broker's verdict on one AckEntry. Err is nil when the ack
// succeeded, otherwise a *StatusError (for instance ErrInvalidReceiptHandle).
type AckResult struct {
	MessageID     string
	ReceiptHandle string
	Err           error
}

// Ack acknowledges entries of one topic in one AckMessage RPC. The returned
// results are in the order of entries. The error is non-nil only when the RPC
// as a whole failed (transport failure or a request-level status); then no
// results are returned. Per-entry failures are in the results.
func (c *Client) Ack(ctx context.Context, group, topic string, entries []AckEntry) ([]AckResult, error) {
	const op = "AckMessage"
	if group == "" {
		return nil, &ConfigError{Option: "group", Reason: "empty"}
	}
	if topic == "" {
		return nil, &ConfigError{Option: "topic", Reason: "empty"}
	}
	if len(entries) == 0 {
		return nil, nil
	}
	pb := &v2.AckMessageRequest{Group: c.resource(group), Topic: c.resource(topic), Entries: make([]*v2.AckMessageEntry, len(entries))}
	for i, e := range entries {
		pe := &v2.AckMessageEntry{MessageId: e.MessageID, ReceiptHandle: e.ReceiptHandle}
		if e.LiteTopic != "" {
			lt := e.LiteTopic
			pe.LiteTopic = &lt
		}
		pb.Entries[i] = pe
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := c.stub.AckMessage(cctx, pb)
	if err != nil {
		return nil, c.wrap(op, err)
	}
	top := resp.GetStatus().GetCode()
	if top != v2.Code_OK && top != v2.Code_MULTIPLE_RESULTS && len(resp.GetEntries()) == 0 {
		return nil, checkStatus(op, resp.GetStatus())
	}
	return matchAckResults(op, entries, resp), nil
}

// matchAckResults pairs response entries with request entries by receipt
// handle (handles are unique per delivery), falling back to position.
func matchAckResults(op string, entries []AckEntry, resp *v2.AckMessageResponse) []AckResult {
	byHandle := make(map[string]*v2.AckMessageResultEntry, len(resp.GetEntries()))
	for _, re := range resp.GetEntries() {
		byHandle[re.GetReceiptHandle()] = re
	}
	out := make([]AckResult, len(entries))
	for i, e := range entries {
		out[i] = AckResult{MessageID: e.MessageID, ReceiptHandle: e.ReceiptHandle}
		re, ok := byHandle[e.ReceiptHandle]
		// A proxy that echoes no handles is matched by position.
		if !ok && len(resp.GetEntries()) == len(entries) && resp.GetEntries()[i].GetReceiptHandle() == "" {
			re, ok = resp.GetEntries()[i], true
		}
		switch {
		case !ok:
			// The broker said nothing about this entry: report the overall
			// status, or an explicit "no result" when that was OK.
			if err := checkStatus(op, resp.GetStatus()); err != nil && resp.GetStatus().GetCode() != v2.Code_MULTIPLE_RESULTS {
				out[i].Err = err
			} else {
				out[i].Err = &StatusError{Op: op, Code: CodeInternalError, Message: "no result for this entry in the response"}
			}
		default:
			out[i].Err = checkStatus(op, re.GetStatus())
		}
	}
	return out
}

// ChangeInvisibleRequest changes the invisibility of one received message.
type ChangeInvisibleRequest struct {
	Group         string
	Topic         string
	MessageID     string
	ReceiptHandle string
	// LiteTopic is set for messages of a lite topic.
	LiteTopic string
	// InvisibleDuration is the new invisibility, counted from now.
	InvisibleDuration time.Duration
	// Suspend asks the broker not to count this as a retry (lite consumers).
	// It is sent only when true.
	Suspend bool
}

// ChangeInvisibleDuration sets a new invisible duration and returns the new
// receipt handle the broker issues for the message.
func (c *Client) ChangeInvisibleDuration(ctx context.Context, req ChangeInvisibleRequest) (string, error) {
	if req.Group == "" {
		return "", &ConfigError{Option: "Group", Reason: "empty"}
	}
	if req.Topic == "" {
		return "", &ConfigError{Option: "Topic", Reason: "empty"}
	}
	if req.InvisibleDuration < 0 {
		return "", &ConfigError{Option: "InvisibleDuration", Reason: "must not be negative"}
	}
	pb := &v2.ChangeInvisibleDurationRequest{
		Group:             c.resource(req.Group),
		Topic:             c.resource(req.Topic),
		ReceiptHandle:     req.ReceiptHandle,
		InvisibleDuration: durationpb.New(req.InvisibleDuration),
		MessageId:         req.MessageID,
	}
	if req.LiteTopic != "" {
		lt := req.LiteTopic
		pb.LiteTopic = &lt
	}
	if req.Suspend {
		t := true
		pb.Suspend = &t
	}
	resp, err := unary(c, ctx, "ChangeInvisibleDuration", c.stub.ChangeInvisibleDuration, pb, (*v2.ChangeInvisibleDurationResponse).GetStatus)
	if err != nil {
		return "", err
	}
	return resp.GetReceiptHandle(), nil
}

// DeadLetterRequest forwards one received message to the group's dead-letter
// queue.
type DeadLetterRequest struct {
	Group               string
	Topic               string
	MessageID           string
	ReceiptHandle       string
	LiteTopic           string
	DeliveryAttempt     int32
	MaxDeliveryAttempts int32
}

// ForwardToDeadLetterQueue moves a received message to the group's DLQ.
func (c *Client) ForwardToDeadLetterQueue(ctx context.Context, req DeadLetterRequest) error {
	pb := &v2.ForwardMessageToDeadLetterQueueRequest{
		Group:               c.resource(req.Group),
		Topic:               c.resource(req.Topic),
		ReceiptHandle:       req.ReceiptHandle,
		MessageId:           req.MessageID,
		DeliveryAttempt:     req.DeliveryAttempt,
		MaxDeliveryAttempts: req.MaxDeliveryAttempts,
	}
	if req.LiteTopic != "" {
		lt := req.LiteTopic
		pb.LiteTopic = &lt
	}
	_, err := unary(c, ctx, "ForwardMessageToDeadLetterQueue", c.stub.ForwardMessageToDeadLetterQueue, pb, (*v2.ForwardMessageToDeadLetterQueueResponse).GetStatus)
	return err
}
