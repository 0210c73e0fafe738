package rmqfake

import (
	"context"
	"crypto/md5"
	"errors"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ReceiveMessage long-polls for messages. The stream carries a status, the
// messages, then a delivery timestamp, in the proxy's order.
func (x *service) ReceiveMessage(req *v2.ReceiveMessageRequest, stream grpc.ServerStreamingServer[v2.ReceiveMessageResponse]) error {
	s := x.s
	ctx := stream.Context()
	m := metaOf(ctx)
	// lost is Verdict.ErrAfter: the poll is handled, then fails instead of
	// answering, and what it popped stays in flight.
	var lost error
	if _, err := s.decide(ctx, Call{Method: "ReceiveMessage", ClientID: m.clientID, Request: req}); err != nil {
		var after *afterError
		if !errors.As(err, &after) {
			return err
		}
		lost = after.err
	}
	if f := s.precheck(ctx, m, req); f != nil {
		return x.finishOrLose(stream, f.status(), lost)
	}
	r, poll, f := s.b.receiveRequest(ctx, m, req)
	if f != nil {
		return x.finishOrLose(stream, f.status(), lost)
	}
	out, t, f, err := s.b.longPoll(ctx, r, poll)
	if err != nil {
		return err
	}
	if f != nil {
		return x.finishOrLose(stream, f.status(), lost)
	}
	if lost != nil {
		return lost
	}
	if len(out) == 0 {
		return x.finish(stream, fail(v2.Code_MESSAGE_NOT_FOUND, "no new message").status())
	}
	if r.autoRenew {
		s.b.locked(func() { s.b.holdRenewed(r, out) })
	}
	if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: okStatus()}}); err != nil {
		s.b.nack(r, t, out)
		return err
	}
	broken := s.ctl.takeBreak()
	for i, d := range out {
		if broken && i == 1 {
			s.b.nack(r, t, out[i:])
			return status.Error(codes.Unavailable, "rmqfake: injected broken receive stream")
		}
		if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: s.b.toProto(d, s.Addr())}}); err != nil {
			s.b.nack(r, t, out[i:])
			return err
		}
	}
	return stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.New(s.cfg.clock.Now())}})
}

// finishOrLose answers with st, or fails with lost instead when it is set.
func (x *service) finishOrLose(stream grpc.ServerStreamingServer[v2.ReceiveMessageResponse], st *v2.Status, lost error) error {
	if lost != nil {
		return lost
	}
	return x.finish(stream, st)
}

func (x *service) finish(stream grpc.ServerStreamingServer[v2.ReceiveMessageResponse], st *v2.Status) error {
	if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: st}}); err != nil {
		return err
	}
	return stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.New(x.s.cfg.clock.Now())}})
}

// receiveRequest validates a ReceiveMessage in the order of
// ReceiveMessageActivity and works out its long-polling window.
func (b *broker) receiveRequest(ctx context.Context, m callMeta, req *v2.ReceiveMessageRequest) (*popRequest, time.Duration, *failure) {
	var sess *session
	b.locked(func() { sess = b.sessions[m.clientID] })
	if sess == nil {
		return nil, 0, fail(v2.Code_INTERNAL_SERVER_ERROR, "rmqfake: client %s has no settings: open a Telemetry session before receiving (the proxy fails here with a NullPointerException)", m.clientID)
	}
	remaining := time.Duration(1<<62 - 1)
	if dl, ok := ctx.Deadline(); ok {
		remaining = time.Until(dl)
	}
	var poll time.Duration
	if req.LongPollingTimeout != nil {
		poll = req.GetLongPollingTimeout().AsDuration()
	} else {
		poll = remaining - sess.settings.GetRequestTimeout().AsDuration()/2
	}
	poll = min(max(poll, minPolling*time.Millisecond), maxPolling*time.Millisecond)
	if poll > remaining {
		if remaining < minPolling*time.Millisecond {
			return nil, 0, fail(v2.Code_ILLEGAL_POLLING_TIME, "The deadline time remaining is not enough for polling, please check network condition")
		}
		poll = remaining
	}
	if f := checkTopic(req.GetMessageQueue().GetTopic().GetName()); f != nil {
		return nil, 0, f
	}
	if f := checkGroup(req.GetGroup().GetName()); f != nil {
		return nil, 0, f
	}
	inv := req.GetInvisibleDuration().AsDuration().Milliseconds()
	if req.GetAutoRenew() {
		inv = autoRenewMax // popped for 60 s and renewed by the proxy up to 3 h (renew.go)
	} else if inv < minInvisible {
		return nil, 0, fail(v2.Code_ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too small. min is %d", minInvisible)
	} else if inv > maxInvisible {
		return nil, 0, fail(v2.Code_ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too large. max is %d", maxInvisible)
	}
	flt, f := parseFilter(req.GetFilterExpression())
	var filterErr *failure
	switch {
	case f != nil && f.code == v2.Code_INTERNAL_SERVER_ERROR && sess.typ == v2.ClientType_LITE_PUSH_CONSUMER:
		flt = filter{} // an SQL92 expression the broker cannot compile: a lite pop has no filter to compile
	case f != nil && f.code == v2.Code_INTERNAL_SERVER_ERROR:
		filterErr = f // the broker compiles it on its pop, after the route and group checks
	case f != nil:
		return nil, 0, f
	}
	if sess.typ == v2.ClientType_LITE_PUSH_CONSUMER && req.GetAutoRenew() {
		var held int
		b.locked(func() {
			b.purgeRenewals(m.clientID)
			held = b.renewCount[m.clientID]
		})
		if held > maxLiteRenewPerClient {
			return nil, 0, fail(v2.Code_FORBIDDEN, "The client [%s] has too many unacked messages. Unacked count: %d", m.clientID, held)
		}
	}
	if req.GetBatchSize() < 0 {
		// The proxy sizes a list by it; 0 polls and finds nothing (scenario p).
		return nil, 0, fail(v2.Code_INTERNAL_SERVER_ERROR, "java.lang.IllegalArgumentException: Illegal Capacity: %d", req.GetBatchSize())
	}
	return &popRequest{
		clientID:  m.clientID,
		lite:      sess.typ == v2.ClientType_LITE_PUSH_CONSUMER,
		group:     key(req.GetGroup(), m.ns),
		topic:     key(req.GetMessageQueue().GetTopic(), m.ns),
		batch:     min(int(req.GetBatchSize()), maxBatch),
		invisible: inv,
		filter:    flt,
		attemptID: req.GetAttemptId(),
		autoRenew: req.GetAutoRenew(),
		filterErr: filterErr,
	}, poll, nil
}

// longPoll pops for r, waiting up to poll on the broker's clock (and no
// longer than the client's deadline) for something to arrive.
func (b *broker) longPoll(ctx context.Context, r *popRequest, poll time.Duration) ([]delivered, *topic, *failure, error) {
	expired := make(chan struct{})
	tm := b.clock.AfterFunc(poll, func() { close(expired) })
	defer tm.Stop()
	w := &waiter{ch: make(chan struct{}, 1)}
	var t *topic
	defer func() {
		if t != nil {
			b.locked(func() { b.unpark(t, w) })
		}
	}()
	for {
		out, tt, f, err := b.popOrPark(ctx, r, &t, w)
		if err != nil || f != nil || len(out) > 0 {
			return out, tt, f, err
		}
		select {
		case <-w.ch:
		case <-expired:
			return nil, t, nil, nil
		case <-ctx.Done():
			return nil, nil, nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// popOrPark pops for r or, when nothing is there, parks w on the topic
// (recorded in *parked) so that a send wakes the poll.
func (b *broker) popOrPark(ctx context.Context, r *popRequest, parked **topic, w *waiter) ([]delivered, *topic, *failure, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, nil, status.Error(codes.Unavailable, "rmqfake: server stopped")
	}
	if err := ctx.Err(); err != nil {
		// The client left (its cancellation came before whatever woke this
		// poll): pop nothing it would never read.
		return nil, nil, nil, status.FromContextError(err).Err()
	}
	tt, g, f := b.target(r)
	if f == nil {
		f = r.filterErr
	}
	if f != nil {
		return nil, nil, f, nil
	}
	if out := b.pop(r, tt, g); len(out) > 0 {
		return out, tt, nil, nil
	}
	if *parked == nil {
		*parked = tt
		b.park(tt, w)
	}
	return nil, nil, nil, nil
}

// nack makes messages that could not be written visible again after a
// second, as the proxy does when a write fails.
func (b *broker) nack(r *popRequest, t *topic, ds []delivered) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range ds {
		b.stopRenewal(d.handle.String(), r.group) // never delivered: nothing to renew
	}
	g := b.groups[r.group]
	if g == nil || t == nil {
		return
	}
	for _, d := range ds {
		h := d.handle
		if h.kind == kindLite {
			if c := b.liteCursorOf(t.key, d.m.lite, g); c != nil {
				c.ord.change(h.offset, h.popTime, b.nowMS()+nackInvisible, false)
				b.settleLite(c)
			}
			continue
		}
		_, _ = b.changeInvisible(g.key, t.key, "", h, nackInvisible, false)
	}
}

// toProto renders a delivery as the proxy does (GrpcConverter.buildMessage).
// The protobuf objects of one delivery are allocated together; the ones the
// message shares with other deliveries (body, properties, keys) are only
// read while the response is written.
func (b *broker) toProto(d delivered, storeHost string) *v2.Message {
	m := d.m
	r := &rendered{offset: d.handle.offset, attempt: d.attempt}
	r.born = timestamppb.Timestamp{Seconds: m.bornSec, Nanos: m.bornNanos}
	r.stored = timestamppb.Timestamp{Seconds: m.storedSec, Nanos: m.storedNanos}
	r.digest.Type, r.digest.Checksum = v2.DigestType_MD5, hexUpper(m.sum)
	r.handle = d.handle.String()
	sp := &r.sp
	sp.Keys = m.keys()
	sp.MessageId = m.id
	sp.BodyDigest = &r.digest
	sp.BodyEncoding = v2.Encoding_IDENTITY
	sp.MessageType = m.mtype
	sp.BornTimestamp = &r.born
	sp.BornHost = m.bornHost
	sp.StoreTimestamp = &r.stored
	sp.StoreHost = storeHost
	sp.ReceiptHandle = &r.handle
	sp.QueueId = m.queueID
	sp.QueueOffset = &r.offset
	sp.DeliveryAttempt = &r.attempt
	if tag := m.tag(); tag != "" {
		sp.Tag = &tag
	}
	if g := m.msgGroup(); g != "" {
		sp.MessageGroup = &g
	}
	if m.lite != "" {
		r.lite = m.lite
		sp.LiteTopic = &r.lite
	}
	if at := m.deliverAt(); !at.IsZero() {
		sp.DeliveryTimestamp = timestamppb.New(at)
	}
	if tc := m.trace(); tc != "" {
		sp.TraceContext = &tc
	}
	props := m.props
	if m.lmq {
		props = withProp(props, "INNER_MULTI_DISPATCH", "%LMQ%$"+m.main.key.name+"$"+m.lite)
	}
	r.res.ResourceNamespace, r.res.Name = m.store.key.ns, m.store.key.name
	r.msg.Topic, r.msg.UserProperties, r.msg.SystemProperties, r.msg.Body = &r.res, props, sp, m.body
	return &r.msg
}

// rendered holds the protobuf objects of one delivered message.
type rendered struct {
	msg     v2.Message
	sp      v2.SystemProperties
	res     v2.Resource
	born    timestamppb.Timestamp
	stored  timestamppb.Timestamp
	digest  v2.Digest
	handle  string
	lite    string
	offset  int64
	attempt int32
}

// hexUpper renders an MD5 sum as the proxy does: upper-case hex.
func hexUpper(sum [md5.Size]byte) string {
	const digits = "0123456789ABCDEF"
	var out [2 * md5.Size]byte
	for i, c := range sum {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out[:])
}

func ptr[T any](v T) *T { return &v }
