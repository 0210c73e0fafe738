package rmqfake

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// service implements apache.rocketmq.v2.MessagingService.
type service struct {
	v2.UnimplementedMessagingServiceServer
	s *Server
}

func methodName(full string) string { return full[strings.LastIndexByte(full, '/')+1:] }

// unaryInterceptor recovers panics, checks the client id and signature (an
// in-band status, as the proxy answers), and applies hooks and faults.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	method := methodName(info.FullMethod)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("rmqfake: panic", "method", method, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "rmqfake: internal error in %s: %v", method, r)
		}
	}()
	m := metaOf(ctx)
	ctx = context.WithValue(ctx, metaKey{}, &m)
	if pm, ok := req.(proto.Message); ok {
		r, derr := s.decide(ctx, Call{Method: method, ClientID: m.clientID, Request: pm})
		var after *afterError
		if errors.As(derr, &after) {
			// Handle the call, then lose its response (err is the result).
			defer func() {
				if err == nil {
					resp, err = nil, after.err
				}
			}()
		} else if derr != nil {
			return nil, derr
		}
		if r != nil {
			return r, nil
		}
	}
	var pm proto.Message
	if p, ok := req.(proto.Message); ok {
		pm = p
	}
	if f := s.precheck(ctx, m, pm); f != nil {
		if r := statusResponse(method, f.status()); r != nil {
			return r, nil
		}
	}
	return h(ctx, req)
}

// streamInterceptor recovers panics in ReceiveMessage and Telemetry; their
// handlers check headers and run hooks themselves, per request or command.
func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("rmqfake: panic", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "rmqfake: internal error in %s: %v", methodName(info.FullMethod), r)
		}
	}()
	return h(srv, ss)
}

// precheck is the proxy's request pipeline: signature, ACL (acl.go), then
// client id.
func (s *Server) precheck(ctx context.Context, m callMeta, req proto.Message) *failure {
	user, f := s.auth.check(m)
	if f != nil {
		return f
	}
	if f := s.auth.authorize(ctx, user, req); f != nil {
		return f
	}
	if strings.TrimSpace(m.clientID) == "" {
		return fail(v2.Code_CLIENT_ID_REQUIRED, "client id cannot be empty")
	}
	return nil
}

// statusResponse builds the response of a unary method carrying only st.
func statusResponse(method string, st *v2.Status) proto.Message {
	switch method {
	case "QueryRoute":
		return &v2.QueryRouteResponse{Status: st}
	case "Heartbeat":
		return &v2.HeartbeatResponse{Status: st}
	case "SendMessage":
		return &v2.SendMessageResponse{Status: st}
	case "AckMessage":
		return &v2.AckMessageResponse{Status: st}
	case "ChangeInvisibleDuration":
		return &v2.ChangeInvisibleDurationResponse{Status: st}
	case "ForwardMessageToDeadLetterQueue":
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: st}
	case "NotifyClientTermination":
		return &v2.NotifyClientTerminationResponse{Status: st}
	case "SyncLiteSubscription":
		return &v2.SyncLiteSubscriptionResponse{Status: st}
	case "QueryAssignment":
		return &v2.QueryAssignmentResponse{Status: st}
	case "EndTransaction":
		return &v2.EndTransactionResponse{Status: st}
	case "RecallMessage":
		return &v2.RecallMessageResponse{Status: st}
	}
	return nil
}

func (x *service) QueryRoute(ctx context.Context, req *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	return x.s.b.route(req, metaOf(ctx).ns, x.s.Addr()), nil
}

func (x *service) SendMessage(ctx context.Context, req *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	m := metaOf(ctx)
	return x.s.b.send(req, m.ns, peerOf(ctx)), nil
}

func (x *service) AckMessage(ctx context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	return x.s.b.ack(req, metaOf(ctx).ns), nil
}

func (x *service) ChangeInvisibleDuration(ctx context.Context, req *v2.ChangeInvisibleDurationRequest) (*v2.ChangeInvisibleDurationResponse, error) {
	m := metaOf(ctx)
	b := x.s.b
	respond := func(f *failure) (*v2.ChangeInvisibleDurationResponse, error) {
		return &v2.ChangeInvisibleDurationResponse{Status: f.status()}, nil
	}
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return respond(f)
	}
	if f := checkGroup(req.GetGroup().GetName()); f != nil {
		return respond(f)
	}
	inv := req.GetInvisibleDuration().AsDuration().Milliseconds()
	switch {
	case inv < 0:
		return respond(fail(v2.Code_ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too small. min is 0"))
	case inv > maxInvisible:
		return respond(fail(v2.Code_ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too large. max is %d", maxInvisible))
	}
	h, f := parseHandle(req.GetReceiptHandle())
	if f != nil {
		return respond(f)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sessions[m.clientID].registered() {
		// The proxy dereferences the client's missing channel (scenarios j, t).
		return respond(fail(v2.Code_INTERNAL_SERVER_ERROR, "rmqfake: client %s has no session: ChangeInvisibleDuration needs Telemetry settings of a consumer or of a producer with a topic (the proxy fails here with a NullPointerException)", m.clientID))
	}
	rn := b.stopRenewal(req.GetReceiptHandle(), key(req.GetGroup(), m.ns))
	nh, f := b.changeInvisible(key(req.GetGroup(), m.ns), key(req.GetTopic(), m.ns), req.GetLiteTopic(), h, inv, req.GetSuspend())
	if f != nil || (rn != nil && rn.lite != "" && req.GetLiteTopic() == "") {
		// Failed, or a lite message changed without its lite topic, which
		// the broker answers without touching the lite topic (scenario y):
		// either way the proxy has stopped renewing it.
		b.unsettled(rn)
	}
	if f != nil {
		return respond(f)
	}
	return &v2.ChangeInvisibleDurationResponse{Status: okStatus(), ReceiptHandle: nh}, nil
}

func (x *service) ForwardMessageToDeadLetterQueue(ctx context.Context, req *v2.ForwardMessageToDeadLetterQueueRequest) (*v2.ForwardMessageToDeadLetterQueueResponse, error) {
	m := metaOf(ctx)
	b := x.s.b
	respond := func(f *failure) (*v2.ForwardMessageToDeadLetterQueueResponse, error) {
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: f.status()}, nil
	}
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return respond(f)
	}
	if f := checkGroup(req.GetGroup().GetName()); f != nil {
		return respond(f)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sessions[m.clientID].registered() {
		return respond(fail(v2.Code_INTERNAL_SERVER_ERROR, "rmqfake: client %s has no session: ForwardMessageToDeadLetterQueue needs Telemetry settings of a consumer or of a producer with a topic", m.clientID))
	}
	h, f := parseHandle(req.GetReceiptHandle())
	if f != nil {
		return respond(f)
	}
	rn := b.stopRenewal(req.GetReceiptHandle(), key(req.GetGroup(), m.ns))
	if f := b.forward(key(req.GetGroup(), m.ns), key(req.GetTopic(), m.ns), req.GetLiteTopic(), h); f != nil {
		b.unsettled(rn)
		return respond(f)
	}
	return &v2.ForwardMessageToDeadLetterQueueResponse{Status: okStatus()}, nil
}

// unimplemented is what the 5.5.0 proxy answers for the RPCs it does not
// serve (the pull and offset RPCs): gRPC's own Unimplemented, worded the same
// (conformance scenario p).
func unimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "Method apache.rocketmq.v2.MessagingService/%s is unimplemented", method)
}

func (x *service) QueryAssignment(ctx context.Context, req *v2.QueryAssignmentRequest) (*v2.QueryAssignmentResponse, error) {
	return x.s.b.assignment(req, metaOf(ctx).ns, x.s.Addr()), nil
}

func (x *service) PullMessage(*v2.PullMessageRequest, grpc.ServerStreamingServer[v2.PullMessageResponse]) error {
	return unimplemented("PullMessage")
}

func (x *service) UpdateOffset(context.Context, *v2.UpdateOffsetRequest) (*v2.UpdateOffsetResponse, error) {
	return nil, unimplemented("UpdateOffset")
}

func (x *service) GetOffset(context.Context, *v2.GetOffsetRequest) (*v2.GetOffsetResponse, error) {
	return nil, unimplemented("GetOffset")
}

func (x *service) QueryOffset(context.Context, *v2.QueryOffsetRequest) (*v2.QueryOffsetResponse, error) {
	return nil, unimplemented("QueryOffset")
}

func (x *service) EndTransaction(ctx context.Context, req *v2.EndTransactionRequest) (*v2.EndTransactionResponse, error) {
	if f := x.s.b.endTransaction(req, metaOf(ctx).ns); f != nil {
		return &v2.EndTransactionResponse{Status: f.status()}, nil
	}
	return &v2.EndTransactionResponse{Status: okStatus()}, nil
}

func (x *service) RecallMessage(ctx context.Context, req *v2.RecallMessageRequest) (*v2.RecallMessageResponse, error) {
	id, f := x.s.b.recall(req, metaOf(ctx).ns)
	if f != nil {
		return &v2.RecallMessageResponse{Status: f.status()}, nil
	}
	return &v2.RecallMessageResponse{Status: okStatus(), MessageId: id}, nil
}

// errf is a gRPC error whose message carries the proxy's prefix for
// Telemetry failures.
func telemetryErr(code codes.Code, f *failure) error {
	return status.Error(code, fmt.Sprintf("process client telemetryCommand failed. %s", f.msg))
}
