package rmqfake

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Telemetry answers each settings command with the server's settings and
// keeps one settings record per client id, as the proxy does.
func (x *service) Telemetry(stream grpc.BidiStreamingServer[v2.TelemetryCommand, v2.TelemetryCommand]) error {
	s := x.s
	ctx := stream.Context()
	m := metaOf(ctx)
	// A stream speaks for its client id only once a settings command of it
	// was accepted (authenticated, when the server checks): as on the
	// proxy, whose client channel a settings command registers. Until then
	// it neither keeps the client's session alive nor, when cancelled,
	// drops its lite subscription: anyone may open a stream naming any id.
	registered := false
	s.b.locked(func() { s.b.lim.open++; s.b.notify() })
	defer s.b.locked(func() {
		s.b.lim.open--
		if registered {
			s.b.streamClosed(m.clientID)
		} else {
			s.b.notify()
		}
	})
	var sendMu sync.Mutex // the handler and the server's own commands (txn.go) send
	send := func(c *v2.TelemetryCommand) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(c)
	}
	tok := new(byte)
	defer s.b.locked(func() {
		// A command for this client must not go to a stream that ended.
		if sess := s.b.sessions[m.clientID]; sess != nil && sess.pushTok == tok {
			sess.push, sess.pushTok = nil, nil
		}
	})
	for {
		cmd, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled && ctx.Err() != nil && registered {
				// The client went away: the proxy drops its lite subscription,
				// unless a newer stream of the client has taken over.
				s.b.locked(func() {
					sess := s.b.sessions[m.clientID]
					if !s.b.closed && !s.b.restarting && (sess == nil || sess.pushTok == tok) {
						s.b.offlineLite(m.clientID)
					}
				})
			}
			return err
		}
		if _, err := s.decide(ctx, Call{Method: "Telemetry", ClientID: m.clientID, Request: cmd}); err != nil {
			return err
		}
		if f := s.precheck(ctx, m, cmd); f != nil {
			// The proxy writes the status and completes the stream.
			return send(&v2.TelemetryCommand{Status: f.status()})
		}
		st := cmd.GetSettings()
		if st == nil {
			continue // thread stack traces and verify results answer nothing here
		}
		resp, err := s.b.settings(m, st)
		if err != nil {
			return err
		}
		if err := send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_Settings{Settings: resp}}); err != nil {
			return err
		}
		s.b.locked(func() {
			if !registered {
				registered = true
				s.b.streamOpened(m.clientID)
			}
			if sess := s.b.sessions[m.clientID]; sess != nil {
				sess.push, sess.pushTok = send, tok
			}
		})
	}
}

// settings validates and records a client's settings and returns the
// server's answer. Failures are gRPC errors that end the stream: Internal for
// what the proxy fails on unexpectedly (an unknown client type or language),
// InvalidArgument for its validation errors.
func (b *broker) settings(m callMeta, st *v2.Settings) (*v2.Settings, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sess := &session{clientID: m.clientID, typ: st.GetClientType()}
	switch st.GetPubSub().(type) {
	case *v2.Settings_Publishing:
		for _, t := range st.GetPublishing().GetTopics() {
			if f := checkTopic(t.GetName()); f != nil {
				return nil, telemetryErr(codes.InvalidArgument, f)
			}
			if f := checkLanguage(m.language); f != nil {
				return nil, telemetryErr(codes.Internal, f)
			}
		}
	case *v2.Settings_Subscription:
		sub := st.GetSubscription()
		if f := checkGroup(sub.GetGroup().GetName()); f != nil {
			return nil, telemetryErr(codes.InvalidArgument, f)
		}
		if f := checkLanguage(m.language); f != nil {
			return nil, telemetryErr(codes.Internal, f)
		}
		gk := key(sub.GetGroup(), m.ns)
		var first resKey
		if len(sub.GetSubscriptions()) > 0 {
			first = key(sub.GetSubscriptions()[0].GetTopic(), m.ns)
		}
		g, f := b.consumerGroup(gk, st.GetClientType(), first, true)
		if f != nil {
			code := codes.InvalidArgument
			if f.code == v2.Code_INTERNAL_SERVER_ERROR {
				code = codes.Internal
			}
			return nil, telemetryErr(code, f)
		}
		for _, e := range sub.GetSubscriptions() {
			if e.GetExpression().GetType() == v2.FilterType_SQL {
				// An SQL92 expression is compiled by the broker, on receive;
				// the proxy refuses only an empty one here.
				if blank(e.GetExpression().GetExpression()) {
					return nil, telemetryErr(codes.InvalidArgument, fail(v2.Code_ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92"))
				}
				continue
			}
			if _, f := parseFilter(e.GetExpression()); f != nil {
				return nil, telemetryErr(codes.InvalidArgument, fail(v2.Code_ILLEGAL_FILTER_EXPRESSION, "expression format is not correct"))
			}
		}
		sess.group = gk
		if g.bind == "" {
			// The group starts consuming its topics now: messages from here on
			// are kept for it even before its first receive.
			for _, e := range sub.GetSubscriptions() {
				if t := b.topics[key(e.GetTopic(), m.ns)]; t != nil {
					b.consumer(g, t)
				}
			}
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "there is no publishing or subscription data in settings")
	}
	sess.settings = proto.Clone(st).(*v2.Settings)
	sess.seen = b.nowMS()
	b.sessions[m.clientID] = sess
	b.notify()
	return b.answer(sess), nil
}

// consumerGroup checks that a consumer of type typ may use group gk, as
// ClientActivity.registerConsumer and ClientProcessor do, creating the group
// in auto-create mode. first is the consumer's first subscribed topic.
func (b *broker) consumerGroup(gk resKey, typ v2.ClientType, first resKey, create bool) (*group, *failure) {
	switch typ {
	case v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PUSH_CONSUMER, v2.ClientType_LITE_PUSH_CONSUMER:
	default:
		return nil, fail(v2.Code_INTERNAL_SERVER_ERROR, "Client type is not consumer, type: %s", typ)
	}
	lite := typ == v2.ClientType_LITE_PUSH_CONSUMER
	g := b.groups[gk]
	if g == nil && b.auto && create {
		cfg := groupConfig{retryMax: defaultRetryMax}
		if lite {
			cfg.bind, cfg.wildcard = first.name, true
			if b.topics[first] == nil && first.name != "" {
				b.autoTopic(first, TopicLite)
			}
		}
		g = b.newGroup(gk, cfg)
	}
	switch {
	case g == nil:
		return nil, fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "group not found: %s%s", gk.name, b.autoGroupsFull())
	case g.bind == "" && lite:
		return nil, fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "regular group cannot use LITE mode: %s", gk.name)
	case g.bind != "" && !lite:
		return nil, fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "lite group must use LITE mode: %s", gk.name)
	case lite && first.name != "" && first.name != g.bind:
		return nil, fail(v2.Code_ILLEGAL_TOPIC, "lite group %s is expected to bind topic %s, but actual is %s", gk.name, g.bind, first.name)
	}
	return g, nil
}

// defaultBackoff is the group retry policy the proxy announces by default:
// the broker's delay levels from 1 s to 2 h.
var defaultBackoff = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	3 * time.Minute, 4 * time.Minute, 5 * time.Minute, 6 * time.Minute, 7 * time.Minute, 8 * time.Minute,
	9 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// answer merges the server's side into a client's settings
// (GrpcClientSettingsManager): retry policy and limits.
func (b *broker) answer(sess *session) *v2.Settings {
	out := proto.Clone(sess.settings).(*v2.Settings)
	out.Metric = &v2.Metric{On: false}
	switch {
	case out.GetPublishing() != nil:
		out.BackoffPolicy = &v2.RetryPolicy{MaxAttempts: 3, Strategy: &v2.RetryPolicy_ExponentialBackoff{
			ExponentialBackoff: &v2.ExponentialBackoff{Initial: durationpb.New(10 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2},
		}}
		out.GetPublishing().MaxBodySize = maxBodySize
		out.GetPublishing().ValidateMessageType = true
	case out.GetSubscription() != nil:
		sub := out.GetSubscription()
		g := b.groups[sess.group]
		retry, fifo := defaultRetryMax, false
		if g != nil {
			retry, fifo = g.retryMax, g.fifo
		}
		next := make([]*durationpb.Duration, len(defaultBackoff))
		for i, d := range defaultBackoff {
			next[i] = durationpb.New(d)
		}
		out.BackoffPolicy = &v2.RetryPolicy{MaxAttempts: int32(retry) + 1, Strategy: &v2.RetryPolicy_CustomizedBackoff{
			CustomizedBackoff: &v2.CustomizedBackoff{Next: next},
		}}
		batch, quota, size := int32(maxBatch), int32(liteSubQuota), int32(liteTopicMaxLen)
		sub.Fifo = &fifo
		sub.ReceiveBatchSize = &batch
		sub.LongPollingTimeout = durationpb.New(maxPolling * time.Millisecond)
		sub.LiteSubscriptionQuota = &quota
		sub.MaxLiteTopicSize = &size
	}
	return out
}

// Heartbeat re-registers a client of the role its settings announced.
func (x *service) Heartbeat(ctx context.Context, req *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
	m := metaOf(ctx)
	b := x.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	sess := b.sessions[m.clientID]
	if sess == nil {
		return &v2.HeartbeatResponse{Status: fail(v2.Code_UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client").status()}, nil
	}
	switch sess.typ {
	case v2.ClientType_PRODUCER:
		if len(sess.settings.GetPublishing().GetTopics()) > 0 {
			if f := checkLanguage(m.language); f != nil {
				return &v2.HeartbeatResponse{Status: f.status()}, nil
			}
		}
	case v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PUSH_CONSUMER, v2.ClientType_LITE_PUSH_CONSUMER:
		if f := checkGroup(req.GetGroup().GetName()); f != nil {
			return &v2.HeartbeatResponse{Status: f.status()}, nil
		}
		if f := checkLanguage(m.language); f != nil {
			return &v2.HeartbeatResponse{Status: f.status()}, nil
		}
		var first resKey
		if subs := sess.settings.GetSubscription().GetSubscriptions(); len(subs) > 0 {
			first = key(subs[0].GetTopic(), m.ns)
		}
		if _, f := b.consumerGroup(key(req.GetGroup(), m.ns), sess.typ, first, false); f != nil {
			return &v2.HeartbeatResponse{Status: f.status()}, nil
		}
	default:
		return &v2.HeartbeatResponse{Status: fail(v2.Code_UNRECOGNIZED_CLIENT_TYPE, "%s", sess.typ).status()}, nil
	}
	b.touch(sess)
	return &v2.HeartbeatResponse{Status: okStatus()}, nil
}

// NotifyClientTermination forgets a client's settings (and a lite
// consumer's subscription).
func (x *service) NotifyClientTermination(ctx context.Context, req *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
	m := metaOf(ctx)
	if f := checkLanguage(m.language); f != nil {
		return &v2.NotifyClientTerminationResponse{Status: f.status()}, nil
	}
	b := x.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	sess := b.sessions[m.clientID]
	delete(b.sessions, m.clientID)
	b.notify()
	b.clearRenewals(m.clientID)
	if sess == nil {
		return &v2.NotifyClientTerminationResponse{Status: fail(v2.Code_UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client").status()}, nil
	}
	switch sess.typ {
	case v2.ClientType_PRODUCER:
	case v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PUSH_CONSUMER, v2.ClientType_LITE_PUSH_CONSUMER:
		if f := checkGroup(req.GetGroup().GetName()); f != nil {
			return &v2.NotifyClientTerminationResponse{Status: f.status()}, nil
		}
		if sess.typ == v2.ClientType_LITE_PUSH_CONSUMER {
			b.offlineLite(m.clientID)
		}
	default:
		return &v2.NotifyClientTerminationResponse{Status: fail(v2.Code_UNRECOGNIZED_CLIENT_TYPE, "%s", sess.typ).status()}, nil
	}
	return &v2.NotifyClientTerminationResponse{Status: okStatus()}, nil
}

// offlineLite drops the lite subscription of a client that left (a
// COMPLETE_REMOVE on its behalf). Call it with b.mu held.
func (b *broker) offlineLite(clientID string) {
	if sess := b.sessions[clientID]; sess != nil && sess.typ != v2.ClientType_LITE_PUSH_CONSUMER {
		return
	}
	b.dropLiteSub(clientID)
}
