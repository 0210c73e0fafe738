// Package brokeradmin sends RocketMQ admin requests to a broker's own
// remoting port (listenPort, 10911 by default), not through the proxy. It
// speaks the broker's remoting protocol with a JSON header and needs nothing
// beyond the standard library.
//
// One request is here: [TriggerLiteDispatch] (request code 200079, RocketMQ
// 5.5.0's LiteManagerProcessor.triggerLiteDispatch), which makes the broker
// offer a lite group's backlog to its consumers at once instead of on its own
// schedule: a wildcard consumer that joins a group with a backlog otherwise
// waits 5 s plus up to one scan (liteEventCheckInterval) for its first
// message. [LiteDispatchKick] adapts it to rmqflow.SourceConfig.LiteDispatchKick.
//
// # Reach and cost
//
// The request goes to the broker's remoting port, which a gRPC client of the
// proxy usually cannot reach: it is for a consumer running beside the broker,
// an operator (rmqflow lite-dispatch) or a sidecar. A dispatch of a whole
// wildcard group walks every lite consume queue of the broker (all main
// topics): it answered in 16 to 37 ms over 1,200,000 lite topics on 5.5.0
// (docs/operations-lite.md).
//
// # Errors
//
// A refusal by the broker is an *[Error] carrying the remoting response code
// and the broker's remark; test for it with errors.Is and the sentinels
// ([ErrGroupNotFound], [ErrNotLiteGroup], [ErrNoPermission],
// [ErrRequestNotSupported]). Transport failures (refused connection, timeout,
// a malformed answer) are returned wrapped, so errors.Is(err,
// context.DeadlineExceeded) and net.Error work on them.
//
// # ACL
//
// No request is signed. A broker with authentication on
// (authenticationEnabled=true in broker.conf, not only on its proxy) refuses
// it: the answer comes back as an *Error, errors.Is(err, ErrNoPermission)
// for NO_PERMISSION (16); other codes are kept as the broker sent them.
// Nothing in an error or a log carries a credential: none is sent.
package brokeradmin

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// RequestTriggerLiteDispatch is the remoting request code of
// triggerLiteDispatch (RequestCode.TRIGGER_LITE_DISPATCH in RocketMQ 5.5.0).
const RequestTriggerLiteDispatch = 200079

// Code is a remoting response code (RemotingSysResponseCode and
// ResponseCode in RocketMQ's sources).
type Code int

// The response codes triggerLiteDispatch answers with, and the general ones
// any broker may send. Every other code is kept as is in [Error.Code].
const (
	CodeSuccess             Code = 0  // SUCCESS
	CodeSystemError         Code = 1  // SYSTEM_ERROR
	CodeSystemBusy          Code = 2  // SYSTEM_BUSY
	CodeRequestNotSupported Code = 3  // REQUEST_CODE_NOT_SUPPORTED: a broker before 5.5.0
	CodeNoPermission        Code = 16 // NO_PERMISSION
	CodeGroupNotExist       Code = 26 // SUBSCRIPTION_GROUP_NOT_EXIST
	CodeInvalidParameter    Code = 29 // INVALID_PARAMETER: triggerLiteDispatch on a group that is not a lite group
)

// Error is the broker's refusal of a request: its remoting response code and
// remark. Is compares codes, so errors.Is(err, ErrGroupNotFound) holds for
// any *Error with code 26.
type Error struct {
	// Request names the request, such as "triggerLiteDispatch".
	Request string
	// Addr is the broker address the request went to.
	Addr string
	// Code is the remoting response code.
	Code Code
	// Remark is the broker's explanation, as it sent it.
	Remark string
}

func (e *Error) Error() string {
	if e.Request == "" && e.Addr == "" && e.Remark == "" {
		return fmt.Sprintf("rocketmq remoting: response code %d", e.Code)
	}
	return fmt.Sprintf("rocketmq remoting: %s at %s: response code %d: %s", e.Request, e.Addr, e.Code, e.Remark)
}

// Is reports whether target is an *Error with the same Code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	// ErrGroupNotFound: the broker does not know the group (a broker with
	// autoCreateSubscriptionGroup=true, the 5.5.0 default, creates it instead
	// and answers ErrNotLiteGroup).
	ErrGroupNotFound = &Error{Code: CodeGroupNotExist}
	// ErrNotLiteGroup: the group has no lite.bind.topic (INVALID_PARAMETER).
	ErrNotLiteGroup = &Error{Code: CodeInvalidParameter}
	// ErrNoPermission: the broker checks credentials and the request carries
	// none (see the package doc, ACL).
	ErrNoPermission = &Error{Code: CodeNoPermission}
	// ErrRequestNotSupported: the broker does not know the request (before
	// RocketMQ 5.5.0).
	ErrRequestNotSupported = &Error{Code: CodeRequestNotSupported}
)

// DefaultTimeout bounds a request whose context has no deadline: dial, send
// and answer together.
const DefaultTimeout = 3 * time.Second

// maxFrame bounds an answer's frame; the broker's own limit is 16 MiB.
const maxFrame = 16 << 20

// Option configures one request.
type Option func(*options)

type options struct {
	timeout time.Duration
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
}

// WithTimeout bounds a request whose context has no deadline (default
// DefaultTimeout). A context deadline always applies; d <= 0 keeps the
// default.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithDialer replaces how the connection to the broker is opened (a proxy,
// TLS, a test). Default: a net.Dialer.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) {
		if dial != nil {
			o.dial = dial
		}
	}
}

// TriggerLiteDispatch asks the broker at addr (host:port of its remoting
// port) to dispatch lite group group's backlog now: with clientID, to that
// client of the group alone (its own lite topics; on 5.5.0 a client of a
// wildcard group has none of its own, so nothing is dispatched), without,
// to the whole group (a wildcard group: a walk of every lite consume queue
// of the broker). It returns when the broker has answered; the dispatch has
// run by then. A refusal is an *Error; see the package doc.
func TriggerLiteDispatch(ctx context.Context, addr, group, clientID string, opts ...Option) error {
	if group == "" {
		return errors.New("rocketmq remoting: triggerLiteDispatch: group is required")
	}
	ext := map[string]string{"group": group}
	if clientID != "" {
		ext["clientId"] = clientID
	}
	resp, err := roundTrip(ctx, addr, RequestTriggerLiteDispatch, ext, opts)
	if err != nil {
		return fmt.Errorf("rocketmq remoting: triggerLiteDispatch at %s: %w", addr, err)
	}
	if Code(resp.Code) != CodeSuccess {
		return &Error{Request: "triggerLiteDispatch", Addr: addr, Code: Code(resp.Code), Remark: resp.Remark}
	}
	return nil
}

// LiteDispatchKick returns a function for rmqflow's
// SourceConfig.LiteDispatchKick that sends TriggerLiteDispatch for the whole
// group to the broker at addr. It ignores the client id on purpose: on
// RocketMQ 5.5.0 a dispatch for one client of a wildcard group walks only
// that client's own lite topic set, which is empty, and dispatches nothing
// (conformance scenario aa); the group's dispatch offers each lite topic with
// a backlog to one of the group's clients, the new one included.
func LiteDispatchKick(addr string, opts ...Option) func(ctx context.Context, group, clientID string) error {
	return func(ctx context.Context, group, _ string) error {
		return TriggerLiteDispatch(ctx, addr, group, "", opts...)
	}
}

// command is a remoting command's JSON header (RemotingCommand's fields).
type command struct {
	Code      int               `json:"code"`
	Language  json.RawMessage   `json:"language,omitempty"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
}

const (
	flagResponse = 1 << 0 // RPC_TYPE bit: set on answers
	serialJSON   = 0      // SerializeType.JSON
	serialBinary = 1      // SerializeType.ROCKETMQ
)

// languageGo is LanguageCode.GO, by name as fastjson writes enums.
var languageGo = json.RawMessage(`"GO"`)

// opaqueSeq numbers requests; it starts at random so that two processes'
// requests are told apart in the broker's logs.
var opaqueSeq atomic.Int32

func init() { opaqueSeq.Store(rand.Int32N(1 << 30)) }

// roundTrip sends one request on a new connection and returns the answer
// with the same opaque.
func roundTrip(ctx context.Context, addr string, code int, ext map[string]string, opts []Option) (*command, error) {
	o := options{timeout: DefaultTimeout}
	for _, f := range opts {
		f(&o)
	}
	if o.dial == nil {
		var d net.Dialer
		o.dial = d.DialContext
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	conn, err := o.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// The context ends the exchange: its deadline on the connection, and a
	// cancellation closes it.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := command{Code: code, Language: languageGo, Opaque: opaqueSeq.Add(1), ExtFields: ext}
	frame, err := encode(&req, nil)
	if err != nil {
		return nil, err
	}
	resp, err := exchange(conn, frame, req.Opaque)
	switch {
	case err == nil:
		return resp, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The connection's deadline is the context's, which may end a
		// moment after it.
		return nil, fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return nil, err
}

func exchange(conn net.Conn, frame []byte, opaque int32) (*command, error) {
	if _, err := conn.Write(frame); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	for {
		resp, err := readFrame(r)
		if err != nil {
			return nil, err
		}
		if resp.Flag&flagResponse != 0 && resp.Opaque == opaque {
			return resp, nil
		}
		// Another answer or a request from the broker: not ours.
	}
}

// encode writes a frame: total length (4 bytes, big endian, counting what
// follows it), header length with the serialization type in its high byte,
// the JSON header, the body.
func encode(c *command, body []byte) ([]byte, error) {
	hdr, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if len(hdr) > 0xFFFFFF {
		return nil, errors.New("header too long")
	}
	out := make([]byte, 8, 8+len(hdr)+len(body))
	binary.BigEndian.PutUint32(out[0:4], uint32(4+len(hdr)+len(body)))
	binary.BigEndian.PutUint32(out[4:8], uint32(serialJSON)<<24|uint32(len(hdr)))
	out = append(out, hdr...)
	return append(out, body...), nil
}

// readFrame reads one frame and decodes its header (JSON or RocketMQ's
// binary header); the body is skipped.
func readFrame(r io.Reader) (*command, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	total := binary.BigEndian.Uint32(pre[0:4])
	hl := binary.BigEndian.Uint32(pre[4:8])
	typ, hlen := byte(hl>>24), hl&0xFFFFFF
	if total > maxFrame || total < 4 || hlen > total-4 {
		return nil, fmt.Errorf("malformed answer: frame length %d, header length %d", total, hlen)
	}
	buf := make([]byte, total-4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	hdr := buf[:hlen]
	switch typ {
	case serialJSON:
		var c command
		if err := json.Unmarshal(hdr, &c); err != nil {
			return nil, fmt.Errorf("malformed answer header: %w", err)
		}
		return &c, nil
	case serialBinary:
		return decodeBinary(hdr)
	default:
		return nil, fmt.Errorf("malformed answer: serialization type %d", typ)
	}
}

// decodeBinary decodes RocketMQ's binary header: code (2 bytes), language
// (1), version (2), opaque (4), flag (4), remark (4-byte length, then UTF-8),
// then the extension fields (4-byte length of them all; each a key with a
// 2-byte length and a value with a 4-byte length).
func decodeBinary(h []byte) (*command, error) {
	bad := errors.New("malformed answer: short binary header")
	if len(h) < 17 {
		return nil, bad
	}
	c := &command{
		Code:    int(int16(binary.BigEndian.Uint16(h[0:2]))),
		Version: int(int16(binary.BigEndian.Uint16(h[3:5]))),
		Opaque:  int32(binary.BigEndian.Uint32(h[5:9])),
		Flag:    int(int32(binary.BigEndian.Uint32(h[9:13]))),
	}
	n := int(binary.BigEndian.Uint32(h[13:17]))
	h = h[17:]
	if n < 0 || n > len(h) {
		return nil, bad
	}
	c.Remark, h = string(h[:n]), h[n:]
	if len(h) < 4 {
		return c, nil
	}
	n = int(binary.BigEndian.Uint32(h[0:4]))
	h = h[4:]
	if n < 0 || n > len(h) {
		return nil, bad
	}
	h = h[:n]
	for len(h) > 0 {
		if len(h) < 2 {
			return nil, bad
		}
		kl := int(binary.BigEndian.Uint16(h[0:2]))
		if 2+kl+4 > len(h) {
			return nil, bad
		}
		k := string(h[2 : 2+kl])
		h = h[2+kl:]
		vl := int(binary.BigEndian.Uint32(h[0:4]))
		if vl < 0 || 4+vl > len(h) {
			return nil, bad
		}
		if c.ExtFields == nil {
			c.ExtFields = map[string]string{}
		}
		c.ExtFields[k] = string(h[4 : 4+vl])
		h = h[4+vl:]
	}
	return c, nil
}
