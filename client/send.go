package client

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SendResult is the broker's verdict on one sent message.
type SendResult struct {
	// MessageID is the id the message was stored under.
	MessageID string
	// Offset is the queue offset the broker stored it at.
	Offset int64
	// Err is nil on success, else a *StatusError (for instance
	// ErrIllegalLiteTopic or ErrLiteTopicQuotaExceeded).
	Err error
}

// Send sends msgs, which must all have the same topic. Results are in the order
// of msgs. The error is non-nil only when a request as a whole failed (then no
// results are returned for a single request); per-message failures are in the
// results. Each message goes under its MessageID, or a fresh id when that is
// empty: to retry without creating a second id, set MessageID first.
//
// Normal, FIFO and delayed messages go in one SendMessage RPC. Lite messages
// go one per RPC — in order within a lite topic, concurrently across lite
// topics: RocketMQ 5.5.0 accepts a multi-message request of lite messages with
// OK but never dispatches them to their lite topics (docs/broker-semantics.md,
// scenario k).
func (c *Client) Send(ctx context.Context, msgs ...*Message) ([]SendResult, error) {
	if len(msgs) > 1 && hasLite(msgs) {
		return c.sendEach(ctx, msgs)
	}
	return c.sendBatch(ctx, msgs)
}

func hasLite(msgs []*Message) bool {
	for _, m := range msgs {
		if m != nil && m.LiteTopic != "" {
			return true
		}
	}
	return false
}

// sendEach sends every message in its own RPC. Messages of one lite topic go
// one after another, in order (a lite topic is consumed FIFO); different lite
// topics go concurrently, at most 16 at a time. A request-level failure of one
// message becomes that message's Err.
func (c *Client) sendEach(ctx context.Context, msgs []*Message) ([]SendResult, error) {
	if err := validateBatch(msgs); err != nil {
		return nil, err
	}
	out := make([]SendResult, len(msgs))
	var order []string
	byLite := map[string][]int{}
	for i, m := range msgs {
		if _, ok := byLite[m.LiteTopic]; !ok {
			order = append(order, m.LiteTopic)
		}
		byLite[m.LiteTopic] = append(byLite[m.LiteTopic], i)
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, lite := range order {
		idx := byLite[lite]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, i := range idx {
				res, err := c.sendBatch(ctx, []*Message{msgs[i]})
				if err != nil {
					out[i].Err = err
					continue
				}
				out[i] = res[0]
			}
		}()
	}
	wg.Wait()
	return out, nil
}

func validateBatch(msgs []*Message) error {
	topic := ""
	for i, m := range msgs {
		if m == nil {
			return &ConfigError{Option: "Message", Reason: fmt.Sprintf("message %d is nil", i)}
		}
		if m.Topic == "" {
			return &ConfigError{Option: "Message.Topic", Reason: fmt.Sprintf("message %d has no topic", i)}
		}
		if i == 0 {
			topic = m.Topic
		} else if m.Topic != topic {
			return &ConfigError{Option: "Message.Topic", Reason: fmt.Sprintf("a batch must have one topic: %q and %q", topic, m.Topic)}
		}
	}
	return nil
}

// sendBatch sends msgs in one SendMessage RPC.
func (c *Client) sendBatch(ctx context.Context, msgs []*Message) ([]SendResult, error) {
	const op = "SendMessage"
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := validateBatch(msgs); err != nil {
		return nil, err
	}
	pb := &v2.SendMessageRequest{Messages: make([]*v2.Message, len(msgs))}
	ids := make([]string, len(msgs))
	host := hostname()
	now := timestamppb.Now()
	for i, m := range msgs {
		ids[i] = m.MessageID
		if ids[i] == "" {
			ids[i] = NewMessageID()
		}
		sp := &v2.SystemProperties{
			Keys:          m.Keys,
			MessageId:     ids[i],
			BornTimestamp: now,
			BornHost:      host,
			BodyEncoding:  v2.Encoding_IDENTITY,
			MessageType:   m.messageType(),
		}
		if m.Tag != "" {
			tag := m.Tag
			sp.Tag = &tag
		}
		if m.LiteTopic != "" {
			lt := m.LiteTopic
			sp.LiteTopic = &lt
		}
		if m.MessageGroup != "" {
			g := m.MessageGroup
			sp.MessageGroup = &g
		}
		if !m.DeliveryTime.IsZero() {
			sp.DeliveryTimestamp = timestamppb.New(m.DeliveryTime)
		}
		pb.Messages[i] = &v2.Message{
			Topic:            c.resource(m.Topic),
			UserProperties:   m.Properties,
			SystemProperties: sp,
			Body:             m.Body,
		}
	}
	resp, err := unary(c, ctx, op, c.stub.SendMessage, pb, (*v2.SendMessageResponse).GetStatus)
	if err != nil && len(resp.GetEntries()) == 0 {
		return nil, err
	}
	out := make([]SendResult, len(msgs))
	entries := resp.GetEntries()
	if len(entries) == 1 && len(msgs) > 1 {
		// The proxy stores a multi-message request as one batch and answers
		// with a single entry for all of it.
		e := entries[0]
		for i := range msgs {
			out[i] = SendResult{MessageID: ids[i], Offset: e.GetOffset(), Err: checkStatus(op, e.GetStatus())}
		}
		return out, nil
	}
	for i := range msgs {
		out[i].MessageID = ids[i]
		if i >= len(entries) {
			if err != nil {
				out[i].Err = err
			} else {
				out[i].Err = &StatusError{Op: op, Code: CodeInternalError, Message: "no result for this message in the response"}
			}
			continue
		}
		e := entries[i]
		if e.GetMessageId() != "" {
			out[i].MessageID = e.GetMessageId()
		}
		out[i].Offset = e.GetOffset()
		out[i].Err = checkStatus(op, e.GetStatus())
	}
	return out, nil
}

var (
	hostOnce atomic.Pointer[string]
	idPrefix = func() string {
		// 0x01 version, 6 bytes of host identity, 2 bytes of pid, as the
		// official clients' v1 message id; the host bytes are random per
		// process because a MAC address is not always readable.
		var b [9]byte
		b[0] = 1
		r := rand.Uint64()
		binary.BigEndian.PutUint32(b[1:5], uint32(r))
		binary.BigEndian.PutUint16(b[5:7], uint16(r>>32))
		binary.BigEndian.PutUint16(b[7:9], uint16(os.Getpid()))
		return strings.ToUpper(hex.EncodeToString(b[:]))
	}()
	idSeq   atomic.Uint32
	idEpoch = time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
)

// NewMessageID returns a fresh message id in the format of the official
// clients (version 01, host, pid, seconds since 2021-01-01 UTC, sequence).
func NewMessageID() string {
	var b [8]byte
	binary.BigEndian.PutUint32(b[0:4], uint32(time.Since(idEpoch)/time.Second))
	binary.BigEndian.PutUint32(b[4:8], idSeq.Add(1))
	return idPrefix + strings.ToUpper(hex.EncodeToString(b[:]))
}

func hostname() string {
	if p := hostOnce.Load(); p != nil {
		return *p
	}
	h, err := os.Hostname()
	if err != nil {
		h = "localhost"
	}
	hostOnce.Store(&h)
	return h
}
