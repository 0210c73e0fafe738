package rmqflow_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// forger is a transparent gRPC proxy in front of rmqfake that can rewrite
// ReceiveMessage calls: rmqfake's hooks can fail or delay a stream but not
// forge its content. Every other call passes through byte for byte.
type forger struct {
	addr string

	mu sync.Mutex
	// request, when set, may change a ReceiveMessage request before it is
	// forwarded.
	request func(*v2.ReceiveMessageRequest)
	// response, when set, rewrites the whole response stream of a
	// ReceiveMessage (status, messages, delivery timestamp).
	response func([]*v2.ReceiveMessageResponse) []*v2.ReceiveMessageResponse
}

func (f *forger) set(req func(*v2.ReceiveMessageRequest), resp func([]*v2.ReceiveMessageResponse) []*v2.ReceiveMessageResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.request, f.response = req, resp
}

func (f *forger) hooks() (func(*v2.ReceiveMessageRequest), func([]*v2.ReceiveMessageResponse) []*v2.ReceiveMessageResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.request, f.response
}

// rawCodec passes frames through undecoded.
type rawCodec struct{}

type frame struct{ b []byte }

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*frame).b, nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	v.(*frame).b = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// newForger starts a forger in front of backend; it stops with the test.
func newForger(t *testing.T, backend string) *forger {
	t.Helper()
	conn, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forger{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		return f.proxy(conn, ss)
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = conn.Close()
	})
	return f
}

func (f *forger) proxy(conn *grpc.ClientConn, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	md = md.Copy()
	for k := range md {
		if k == "" || k[0] == ':' {
			delete(md, k)
		}
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), md))
	defer cancel()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	isReceive := method == "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
	reqHook, respHook := f.hooks()
	go func() {
		for {
			var in frame
			if err := ss.RecvMsg(&in); err != nil {
				_ = cs.CloseSend()
				return
			}
			if isReceive && reqHook != nil {
				var r v2.ReceiveMessageRequest
				if proto.Unmarshal(in.b, &r) == nil {
					reqHook(&r)
					in.b, _ = proto.Marshal(&r)
				}
			}
			if err := cs.SendMsg(&in); err != nil {
				return
			}
		}
	}()
	if h, err := cs.Header(); err == nil {
		_ = ss.SendHeader(h)
	}
	var held []*v2.ReceiveMessageResponse
	for {
		var out frame
		err := cs.RecvMsg(&out)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if isReceive && respHook != nil {
			var r v2.ReceiveMessageResponse
			if err := proto.Unmarshal(out.b, &r); err != nil {
				return err
			}
			held = append(held, &r)
			continue
		}
		if err := ss.SendMsg(&out); err != nil {
			return err
		}
	}
	if isReceive && respHook != nil {
		for _, r := range respHook(held) {
			b, err := proto.Marshal(r)
			if err != nil {
				return err
			}
			if err := ss.SendMsg(&frame{b: b}); err != nil {
				return err
			}
		}
	}
	ss.SetTrailer(cs.Trailer())
	return nil
}
