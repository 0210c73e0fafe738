package brokeradmin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeBroker accepts connections on 127.0.0.1:0 and answers each request
// frame with what answer returns (raw frames, written in order).
func fakeBroker(t *testing.T, answer func(req *command, raw []byte) [][]byte) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				var pre [4]byte
				for {
					if _, err := readFull(r, pre[:]); err != nil {
						return
					}
					n := binary.BigEndian.Uint32(pre[:])
					body := make([]byte, n)
					if _, err := readFull(r, body); err != nil {
						return
					}
					raw := append(pre[:], body...)
					req, err := readFrame(bytes.NewReader(raw))
					if err != nil {
						t.Errorf("fake broker: %v", err)
						return
					}
					for _, f := range answer(req, raw) {
						if _, err := conn.Write(f); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return lis.Addr().String()
}

func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func answerFrame(t *testing.T, c command) []byte {
	t.Helper()
	c.Flag |= flagResponse
	c.Language = json.RawMessage(`"JAVA"`)
	f, err := encode(&c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestTriggerLiteDispatchFrame(t *testing.T) {
	var got *command
	var raw []byte
	addr := fakeBroker(t, func(req *command, r []byte) [][]byte {
		got, raw = req, r
		return [][]byte{answerFrame(t, command{Code: 0, Opaque: req.Opaque})}
	})
	if err := TriggerLiteDispatch(context.Background(), addr, "g1", "client-1"); err != nil {
		t.Fatalf("TriggerLiteDispatch: %v", err)
	}
	if got.Code != RequestTriggerLiteDispatch || got.Flag != 0 || string(got.Language) != `"GO"` {
		t.Errorf("request code %d flag %d language %s, want 200079, 0 (a request), \"GO\"", got.Code, got.Flag, got.Language)
	}
	if got.ExtFields["group"] != "g1" || got.ExtFields["clientId"] != "client-1" || len(got.ExtFields) != 2 {
		t.Errorf("extFields %v, want group and clientId", got.ExtFields)
	}
	// The frame: total length counts what follows it; the header length
	// word has serialization type 0 (JSON) in its high byte.
	if n := binary.BigEndian.Uint32(raw[0:4]); int(n) != len(raw)-4 {
		t.Errorf("frame length %d for %d bytes after it", n, len(raw)-4)
	}
	hl := binary.BigEndian.Uint32(raw[4:8])
	if hl>>24 != 0 || int(hl&0xFFFFFF) != len(raw)-8 {
		t.Errorf("header length word %#x for a %d-byte JSON header and no body", hl, len(raw)-8)
	}
	var m map[string]any
	if err := json.Unmarshal(raw[8:], &m); err != nil {
		t.Fatalf("header is not JSON: %v", err)
	}
	for _, k := range []string{"code", "language", "version", "opaque", "flag", "extFields"} {
		if _, ok := m[k]; !ok {
			t.Errorf("header %s has no %q", raw[8:], k)
		}
	}

	// Without a client id the field is left out: the whole group.
	if err := TriggerLiteDispatch(context.Background(), addr, "g1", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.ExtFields["clientId"]; ok || got.ExtFields["group"] != "g1" {
		t.Errorf("extFields %v, want group alone", got.ExtFields)
	}
	if err := TriggerLiteDispatch(context.Background(), addr, "", ""); err == nil {
		t.Error("empty group accepted")
	}
}

func TestTriggerLiteDispatchRefusals(t *testing.T) {
	codes := map[string]Code{"missing": CodeGroupNotExist, "normal": CodeInvalidParameter, "acl": CodeNoPermission, "old": CodeRequestNotSupported, "busy": CodeSystemBusy}
	addr := fakeBroker(t, func(req *command, _ []byte) [][]byte {
		g := req.ExtFields["group"]
		return [][]byte{answerFrame(t, command{Code: int(codes[g]), Opaque: req.Opaque, Remark: "remark for " + g})}
	})
	for g, want := range map[string]error{"missing": ErrGroupNotFound, "normal": ErrNotLiteGroup, "acl": ErrNoPermission, "old": ErrRequestNotSupported} {
		err := TriggerLiteDispatch(context.Background(), addr, g, "")
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", g, err, want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != codes[g] || e.Remark != "remark for "+g || e.Addr != addr || e.Request != "triggerLiteDispatch" {
			t.Errorf("%s: %#v, want code %d with the remark and address", g, e, codes[g])
		}
	}
	err := TriggerLiteDispatch(context.Background(), addr, "busy", "")
	if errors.Is(err, ErrGroupNotFound) || !errors.Is(err, &Error{Code: CodeSystemBusy}) {
		t.Errorf("busy: %v, want code 2 and no other sentinel", err)
	}
	if !strings.Contains(err.Error(), "response code 2") || !strings.Contains(err.Error(), "remark for busy") {
		t.Errorf("message %q, want the code and the remark", err)
	}
}

// An answer with another opaque (or a request from the broker) is not the
// answer: the client waits for its own.
func TestTriggerLiteDispatchMatchesOpaque(t *testing.T) {
	addr := fakeBroker(t, func(req *command, _ []byte) [][]byte {
		return [][]byte{
			answerFrame(t, command{Code: int(CodeGroupNotExist), Opaque: req.Opaque + 1}),
			mustEncode(t, command{Code: 40, Opaque: req.Opaque}), // a request with our opaque: no response flag
			answerFrame(t, command{Code: 0, Opaque: req.Opaque}),
		}
	})
	if err := TriggerLiteDispatch(context.Background(), addr, "g", ""); err != nil {
		t.Fatalf("%v, want the answer with the request's opaque (success)", err)
	}
}

func mustEncode(t *testing.T, c command) []byte {
	f, err := encode(&c, []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A broker configured for RocketMQ's binary header answers in it.
func TestTriggerLiteDispatchBinaryAnswer(t *testing.T) {
	addr := fakeBroker(t, func(req *command, _ []byte) [][]byte {
		return [][]byte{binaryFrame(int16(CodeGroupNotExist), req.Opaque, flagResponse, "Group [g] not exist.", map[string]string{"k": "v"})}
	})
	err := TriggerLiteDispatch(context.Background(), addr, "g", "")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeGroupNotExist || e.Remark != "Group [g] not exist." {
		t.Fatalf("%v, want code 26 with its remark", err)
	}
}

func binaryFrame(code int16, opaque int32, flag int32, remark string, ext map[string]string) []byte {
	var h bytes.Buffer
	w := func(v any) { _ = binary.Write(&h, binary.BigEndian, v) }
	w(code)
	h.WriteByte(0) // JAVA
	w(int16(0))
	w(opaque)
	w(flag)
	w(int32(len(remark)))
	h.WriteString(remark)
	var e bytes.Buffer
	for k, v := range ext {
		_ = binary.Write(&e, binary.BigEndian, int16(len(k)))
		e.WriteString(k)
		_ = binary.Write(&e, binary.BigEndian, int32(len(v)))
		e.WriteString(v)
	}
	w(int32(e.Len()))
	h.Write(e.Bytes())
	out := binary.BigEndian.AppendUint32(nil, uint32(4+h.Len()))
	out = binary.BigEndian.AppendUint32(out, 1<<24|uint32(h.Len()))
	return append(out, h.Bytes()...)
}

// A broker that never answers: the context's deadline ends the request,
// and so does a cancellation; without a deadline WithTimeout applies.
func TestTriggerLiteDispatchHonoursContext(t *testing.T) {
	addr := fakeBroker(t, func(*command, []byte) [][]byte { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := TriggerLiteDispatch(ctx, addr, "g", "")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
		t.Errorf("deadline: %v after %v, want context.DeadlineExceeded at 150 ms", err, time.Since(t0))
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	t0 = time.Now()
	err = TriggerLiteDispatch(ctx, addr, "g", "", WithTimeout(time.Minute))
	if !errors.Is(err, context.Canceled) || time.Since(t0) > 2*time.Second {
		t.Errorf("cancel: %v after %v, want context.Canceled at 100 ms", err, time.Since(t0))
	}

	t0 = time.Now()
	err = TriggerLiteDispatch(context.Background(), addr, "g", "", WithTimeout(100*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
		t.Errorf("WithTimeout: %v after %v, want context.DeadlineExceeded at 100 ms", err, time.Since(t0))
	}
}

func TestTriggerLiteDispatchTransportErrors(t *testing.T) {
	// Nothing listens: the dial error comes back wrapped.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	err = TriggerLiteDispatch(context.Background(), addr, "g", "")
	var op *net.OpError
	if !errors.As(err, &op) || !strings.Contains(err.Error(), addr) {
		t.Errorf("refused: %v, want a *net.OpError naming %s", err, addr)
	}
	var e *Error
	if errors.As(err, &e) {
		t.Errorf("refused: %v is not a broker answer", err)
	}

	// A frame that claims more than the broker's limit.
	huge := fakeBroker(t, func(*command, []byte) [][]byte { return [][]byte{{0x7f, 0, 0, 0, 0, 0, 0, 2}} })
	if err := TriggerLiteDispatch(context.Background(), huge, "g", ""); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("huge frame: %v, want a malformed answer", err)
	}

	// The dialer option is used.
	dialed := false
	_ = TriggerLiteDispatch(context.Background(), "x:1", "g", "", WithDialer(func(ctx context.Context, network, a string) (net.Conn, error) {
		dialed = a == "x:1" && network == "tcp"
		return nil, errors.New("no")
	}))
	if !dialed {
		t.Error("WithDialer not used")
	}
}

func TestLiteDispatchKickSendsTheGroup(t *testing.T) {
	var got *command
	addr := fakeBroker(t, func(req *command, _ []byte) [][]byte {
		got = req
		return [][]byte{answerFrame(t, command{Opaque: req.Opaque})}
	})
	if err := LiteDispatchKick(addr)(context.Background(), "g", "client-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.ExtFields["clientId"]; ok || got.ExtFields["group"] != "g" {
		t.Errorf("extFields %v, want the group alone (a wildcard client's own dispatch does nothing on 5.5.0)", got.ExtFields)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(mustEncodeF(command{Code: 1, Opaque: 2, Remark: "r", ExtFields: map[string]string{"a": "b"}}))
	f.Add(binaryFrame(26, 7, 1, "remark", map[string]string{"k": "v"}))
	f.Add([]byte{0, 0, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = readFrame(bytes.NewReader(b)) // must not panic
	})
}

func mustEncodeF(c command) []byte {
	b, err := encode(&c, nil)
	if err != nil {
		panic(err)
	}
	return b
}
