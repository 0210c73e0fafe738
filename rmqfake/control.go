package rmqfake

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Call is one request as rmqfake receives it: a unary RPC, a ReceiveMessage
// call, or one command on a Telemetry stream.
type Call struct {
	// Method is the RPC name without its service, such as "AckMessage".
	Method string
	// ClientID is the x-mq-client-id header.
	ClientID string
	// Request is the request message. Do not modify it.
	Request proto.Message
}

// Verdict tells rmqfake what to do with a Call. The zero Verdict lets the
// call through unchanged.
type Verdict struct {
	// Delay holds the call this long on the server's clock before anything
	// else (it ends early if the client gives up).
	Delay time.Duration
	// Err fails the call with this error instead of handling it. Use a gRPC
	// status error (status.Error) to choose the code; other errors become
	// codes.Unknown.
	Err error
	// Response answers a unary call with this message instead of handling it.
	// It must be the method's response type. Ignored for streams.
	Response proto.Message
	// ErrAfter handles a unary call as usual, then fails it with this error
	// instead of answering: the call took effect but the client sees a
	// failure, as when a response is lost. A ReceiveMessage long-polls and
	// pops as usual, then fails with it instead of answering: what it popped
	// stays invisible, as when the broker popped and the answer was lost
	// (a poll repeating its attempt id gets it again). On Telemetry it acts
	// as Err.
	ErrAfter error
}

// streamMethod reports whether method is a streaming RPC, which
// Fault.LostAnswerRate leaves alone (it has no single answer to lose).
func streamMethod(method string) bool { return method == "ReceiveMessage" || method == "Telemetry" }

// afterError carries Verdict.ErrAfter out of decide.
type afterError struct{ err error }

func (e *afterError) Error() string { return e.err.Error() }
func (e *afterError) Unwrap() error { return e.err }

// Hook inspects a call and decides its fate. Hooks run in the order they
// were added; the first one returning an Err or a Response decides, and the
// delays of all add up. A hook must not block.
type Hook func(Call) Verdict

// Fault is a standing fault for one method: added latency and a random error
// rate.
type Fault struct {
	// Latency delays every call of the method (on the server's clock).
	Latency time.Duration
	// ErrorRate is the probability (0..1) that a call fails with Code.
	ErrorRate float64
	// LostAnswerRate is the probability (0..1) that a unary call is handled
	// and then fails with Code instead of answering: it took effect, but
	// the client sees a failure (Verdict.ErrAfter). Drawn for calls that
	// ErrorRate let through; streaming methods (ReceiveMessage, Telemetry)
	// never get it.
	LostAnswerRate float64
	// Code is the gRPC code of injected failures; zero means
	// codes.Unavailable.
	Code codes.Code
}

type hookEntry struct {
	method string
	fn     Hook
}

type controls struct {
	mu     sync.Mutex
	hooks  []*hookEntry
	faults map[string]Fault
	breaks int // receive streams still to break
}

func newControls() *controls { return &controls{faults: map[string]Fault{}} }

// Intercept runs h for every call of method ("" or "*" for every method) until
// the returned function is called. Observing is a hook that returns the zero
// Verdict.
func (s *Server) Intercept(method string, h Hook) (remove func()) {
	if method == "*" {
		method = ""
	}
	e := &hookEntry{method: method, fn: h}
	c := s.ctl
	c.mu.Lock()
	c.hooks = append(c.hooks, e)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.hooks {
			if x == e {
				c.hooks = append(c.hooks[:i], c.hooks[i+1:]...)
				return
			}
		}
	}
}

// SetFault sets the standing fault of method ("" or "*" for every method),
// replacing the previous one; a zero Fault clears it.
func (s *Server) SetFault(method string, f Fault) {
	if method == "*" {
		method = ""
	}
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if f == (Fault{}) {
		delete(s.ctl.faults, method)
		return
	}
	s.ctl.faults[method] = f
}

// ClearFaults removes every standing fault and pending stream break.
func (s *Server) ClearFaults() {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	clear(s.ctl.faults)
	s.ctl.breaks = 0
}

// BreakReceiveStreams makes the next n ReceiveMessage calls that have
// messages to deliver fail half-way: they send the status and the first
// message, then end with codes.Unavailable. The messages not sent become
// visible again after one second, as when the proxy fails to write them; the
// one sent stays in flight.
func (s *Server) BreakReceiveStreams(n int) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.breaks += n
}

func (c *controls) takeBreak() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.breaks > 0 {
		c.breaks--
		return true
	}
	return false
}

// decide runs the hooks and faults for call. It returns the response to
// answer with (unary only), or an error to fail with, after any delay.
func (s *Server) decide(ctx context.Context, call Call) (proto.Message, error) {
	c := s.ctl
	c.mu.Lock()
	hooks := make([]Hook, 0, len(c.hooks))
	for _, e := range c.hooks {
		if e.method == "" || e.method == call.Method {
			hooks = append(hooks, e.fn)
		}
	}
	var faults []Fault
	if f, ok := c.faults[""]; ok {
		faults = append(faults, f)
	}
	if f, ok := c.faults[call.Method]; ok {
		faults = append(faults, f)
	}
	c.mu.Unlock()

	var delay time.Duration
	var resp proto.Message
	var err error
	for _, h := range hooks {
		v := h(call)
		delay += v.Delay
		if resp == nil && err == nil {
			resp, err = v.Response, v.Err
			if resp == nil && err == nil && v.ErrAfter != nil {
				err = &afterError{v.ErrAfter}
			}
		}
	}
	for _, f := range faults {
		delay += f.Latency
		code := f.Code
		if code == codes.OK {
			code = codes.Unavailable
		}
		if err == nil && resp == nil && f.ErrorRate > 0 && rand.Float64() < f.ErrorRate {
			err = status.Errorf(code, "rmqfake: injected fault on %s", call.Method)
		}
		if err == nil && resp == nil && f.LostAnswerRate > 0 && !streamMethod(call.Method) && rand.Float64() < f.LostAnswerRate {
			err = &afterError{status.Errorf(code, "rmqfake: injected fault on %s after it took effect", call.Method)}
		}
	}
	if delay > 0 && !sleep(ctx, s.cfg.clock, delay) {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return resp, err
}
