package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"

	"github.com/rmqflow/rmqflow/bench/internal/peerkit"
)

const (
	methodReceive = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
	methodAck     = "/apache.rocketmq.v2.MessagingService/AckMessage"
	methodChange  = "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration"
)

// wire watches the official client's RPCs on its gRPC connection and keeps
// the tracker's books from them: each ReceiveMessage stream is one receive
// RPC (empty when it carried no message), each AckMessage one ack RPC, and
// an entry the broker answered OK is an acked message, any other entry (or
// every entry of a failed RPC) an ack failure; each ChangeInvisibleDuration
// is a change RPC; each message a ReceiveMessage brought is a receipt
// (Tracker.Seen: a message of the run received before is redelivered). The
// client's own API
// cannot tell all of this: its Ack returns nil when the broker answers with
// a non-OK status, and its push consumers ack inside the client without a
// callback.
//
// It is installed through the client's exported factory rmq.NewRpcClient
// (which its client manager calls for every connection it opens), adding
// interceptors with rmq.WithRpcClientConnOption(rmq.WithDialOptions(...));
// the client's own code and options are untouched.
type wire struct {
	f peerkit.Flags
	t *peerkit.Tracker

	mu       sync.Mutex
	inflight map[string]peerkit.Delivery // receipt handle -> delivery not yet acked
}

func newWire(f peerkit.Flags, t *peerkit.Tracker) *wire {
	w := &wire{f: f, t: t, inflight: map[string]peerkit.Delivery{}}
	orig := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		opts = append(opts, rmq.WithRpcClientConnOption(rmq.WithDialOptions(
			grpc.WithChainUnaryInterceptor(w.unary), grpc.WithChainStreamInterceptor(w.stream))))
		return orig(target, opts...)
	}
	return w
}

func (w *wire) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case methodAck:
	case methodChange:
		w.t.ChangeRPC()
		return invoker(ctx, method, req, reply, cc, opts...)
	default:
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	w.t.AckRPC()
	err := invoker(ctx, method, req, reply, cc, opts...)
	sent := int64(1)
	if r, ok := req.(*v2.AckMessageRequest); ok {
		sent = int64(len(r.GetEntries()))
	}
	if err != nil {
		w.t.AckFailed(sent)
		return err
	}
	resp, ok := reply.(*v2.AckMessageResponse)
	if !ok {
		return nil
	}
	entries := resp.GetEntries()
	if len(entries) == 0 && resp.GetStatus().GetCode() != v2.Code_OK {
		w.t.AckFailed(sent)
		fmt.Fprintf(os.Stderr, "official: AckMessage answered %v %q\n", resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	}
	for _, e := range entries {
		if c := e.GetStatus().GetCode(); c != v2.Code_OK {
			w.t.AckFailed(1)
			fmt.Fprintf(os.Stderr, "official: ack %s answered %v %q (the client's Ack returns nil)\n", e.GetMessageId(), c, e.GetStatus().GetMessage())
			continue
		}
		w.mu.Lock()
		d, found := w.inflight[e.GetReceiptHandle()]
		delete(w.inflight, e.GetReceiptHandle())
		w.mu.Unlock()
		if !found {
			fmt.Fprintf(os.Stderr, "official: ack of %s: no receive seen for its handle\n", e.GetMessageId())
			continue
		}
		w.t.Ack(d)
	}
	return nil
}

func (w *wire) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != methodReceive {
		return s, err
	}
	return &receiveStream{ClientStream: s, w: w}, nil
}

// receiveStream collects the messages of one ReceiveMessage call and books
// them when the stream ends, which is when the client returns them.
type receiveStream struct {
	grpc.ClientStream
	w    *wire
	msgs []*v2.Message
	done bool
}

func (s *receiveStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		if r, ok := m.(*v2.ReceiveMessageResponse); ok && r.GetMessage() != nil {
			s.msgs = append(s.msgs, r.GetMessage())
		}
		return nil
	}
	if !s.done {
		s.done = true
		s.w.received(s.msgs, errors.Is(err, io.EOF))
	}
	return err
}

func (w *wire) received(msgs []*v2.Message, ok bool) {
	if !ok && len(msgs) == 0 {
		w.t.Receive(0) // a failed receive is not an empty one, but it is an RPC
		w.t.AddReceives(0, -1)
		return
	}
	at := w.t.Receive(len(msgs))
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range msgs {
		sp := m.GetSystemProperties()
		var born time.Time
		if ts := sp.GetBornTimestamp(); ts != nil {
			born = ts.AsTime()
		}
		mine := w.f.Mine(sp.GetKeys(), sp.GetLiteTopic())
		w.t.Seen(sp.GetMessageId(), mine)
		w.inflight[sp.GetReceiptHandle()] = peerkit.Delivery{ID: sp.GetMessageId(), Mine: mine,
			LiteTopic: sp.GetLiteTopic(), Born: born, Received: at}
	}
}
