package rmqfake_test

// Fuzz targets for rmqfake's request handling: receipt handles, filters,
// names and raw request protos, each against one live in-process server per
// fuzz target (per worker process when fuzzing), driven by a manual clock.
// Every target checks that no request panics (the server's logger records
// the recovered panics), that every unary RPC answers in band within
// rpcDeadline, and that Stats never shows a negative count.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// rpcDeadline bounds every unary RPC of the fuzz targets: an answer later
// than this is a hang. A loopback RPC takes about a millisecond; the margin
// is for -race on a loaded machine.
const rpcDeadline = 5 * time.Second

// errorLog is a slog handler that keeps the server's error records: a
// recovered panic is logged as "rmqfake: panic" at level Error.
type errorLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *errorLog) WithGroup(string) slog.Handler                 { return l }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "stack" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}

// take returns and forgets the records logged so far.
func (l *errorLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.recs
	l.recs = nil
	return r
}

// pair is a consumer group and the topic it consumes.
type pair struct{ group, topic string }

// Sources of FuzzHandle and FuzzFilter: a group and topic of each type.
const (
	srcNormal = iota
	srcFIFO1  // FIFO topic, 1 queue
	srcFIFO2  // FIFO topic, 2 queues
	srcLite   // lite topic, wildcard group
	srcDelay
	nSources
)

var fzPairs = [...]pair{
	srcNormal: {"fz-gn", "fz-n"},
	srcFIFO1:  {"fz-gf1", "fz-f1"},
	srcFIFO2:  {"fz-gf2", "fz-f2"},
	srcLite:   {"fz-gl", "fz-l"},
	srcDelay:  {"fz-gd", "fz-d"},
}

// targets are where forged requests go: every source, a DLQ topic, and a
// group and topic that do not exist.
func (e *fzEnv) targets() []pair {
	return append(e.pairs[:], pair{"fz-gn", "%DLQ%fz-gn"}, pair{"fz-nogroup", "fz-notopic"})
}

func ordered(src int) bool { return src == srcFIFO1 || src == srcFIFO2 || src == srcLite }

// fzEnv is one server with a topic and group of every type, a producer and
// one consumer session per group.
type fzEnv struct {
	s     *rmqfake.Server
	clk   *rmqfake.ManualClock
	log   *errorLog
	prod  *client.Client
	cons  [nSources]*client.Client
	queue map[string]*v2.MessageQueue // a queue of each topic, for raw receives
	iter  int
	// pairs are the sources' groups and topics; the lite pair is replaced
	// when a message forwarded to the DLQ comes back into its lite topic,
	// where it stays for good (scenario g).
	pairs   [nSources]pair
	liteGen int
	clients []*client.Client // closed when the fuzz target ends
}

func newFzEnv(tb testing.TB) *fzEnv {
	tb.Helper()
	e := &fzEnv{log: &errorLog{}, queue: map[string]*v2.MessageQueue{}, pairs: fzPairs}
	e.clk = rmqfake.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, c := range e.clients {
			_ = c.Close(ctx)
		}
	})
	e.s = rmqfake.NewForTest(tb, rmqfake.WithClock(e.clk), rmqfake.FastLiteDispatch(), rmqfake.Logger(slog.New(e.log)))
	s := e.s
	must(tb, s.CreateTopic("fz-n", rmqfake.TopicNormal, rmqfake.Queues(2)))
	must(tb, s.CreateTopic("fz-f1", rmqfake.TopicFIFO, rmqfake.Queues(1)))
	must(tb, s.CreateTopic("fz-f2", rmqfake.TopicFIFO, rmqfake.Queues(2)))
	must(tb, s.CreateTopic("fz-l", rmqfake.TopicLite))
	must(tb, s.CreateTopic("fz-d", rmqfake.TopicDelay, rmqfake.Queues(1)))
	// Retry limits far above what an input can use: the invariants count
	// on no message reaching the DLQ by its attempts.
	must(tb, s.CreateGroup("fz-gn", rmqfake.RetryMax(1000)))
	must(tb, s.CreateGroup("fz-gf1", rmqfake.FIFO(), rmqfake.RetryMax(1000)))
	must(tb, s.CreateGroup("fz-gf2", rmqfake.FIFO(), rmqfake.RetryMax(1000)))
	must(tb, s.CreateGroup("fz-gl", rmqfake.LiteBind("fz-l"), rmqfake.Wildcard(), rmqfake.RetryMax(1000)))
	must(tb, s.CreateGroup("fz-gd", rmqfake.RetryMax(1000)))
	e.prod = e.session(tb, client.SessionConfig{Type: client.Producer})
	for src := range e.pairs {
		e.open(tb, src)
	}
	return e
}

// open starts the consumer session of source src.
func (e *fzEnv) open(tb testing.TB, src int) {
	tb.Helper()
	p := e.pairs[src]
	sc := client.SessionConfig{Type: client.SimpleConsumer, Group: p.group, Subscriptions: []client.Subscription{{Topic: p.topic}}}
	if src == srcLite {
		sc.Type, sc.LiteWildcard = client.LiteSimpleConsumer, true
	}
	e.cons[src] = e.session(tb, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qs, err := e.prod.QueryRoute(ctx, p.topic)
	must(tb, err)
	e.queue[p.topic] = qs[0]
}

// renewLite replaces the lite source with a new lite topic and wildcard
// group (the old ones keep their dead-lettered copies).
func (e *fzEnv) renewLite(tb testing.TB) {
	tb.Helper()
	e.liteGen++
	p := pair{fmt.Sprintf("fz-gl%d", e.liteGen), fmt.Sprintf("fz-l%d", e.liteGen)}
	must(tb, e.s.CreateTopic(p.topic, rmqfake.TopicLite))
	must(tb, e.s.CreateGroup(p.group, rmqfake.LiteBind(p.topic), rmqfake.Wildcard(), rmqfake.RetryMax(1000)))
	old := e.cons[srcLite]
	e.pairs[srcLite] = p
	e.open(tb, srcLite)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = old.Close(ctx)
	e.clients = slices.DeleteFunc(e.clients, func(c *client.Client) bool { return c == old })
}

// begin starts an input: errors logged by an earlier input that failed
// are not this one's.
func (e *fzEnv) begin() {
	e.iter++
	e.log.take()
}

// session opens a client with a session of sc.
func (e *fzEnv) session(tb testing.TB, sc client.SessionConfig) *client.Client {
	tb.Helper()
	c, err := client.New(client.Config{Endpoints: e.s.Addr()})
	must(tb, err)
	e.clients = append(e.clients, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.OpenSession(ctx, sc); err != nil {
		tb.Fatalf("open %v session: %v", sc.Type, err)
	}
	return c
}

// call runs one unary RPC through c's connection, with c's headers, and
// fails the test unless it answers within rpcDeadline without a gRPC error
// (a recovered panic is a gRPC Internal).
func call[Req, Resp proto.Message](t testing.TB, c *client.Client, name string, rpc func(v2.MessagingServiceClient, context.Context, Req) (Resp, error), req Req) Resp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	defer cancel()
	resp, err := rpc(v2.NewMessagingServiceClient(c.Conn()), c.OutgoingContext(ctx), req)
	switch {
	case status.Code(err) == codes.DeadlineExceeded:
		t.Fatalf("%s did not answer within %v (a hang): %v\nrequest: %v", name, rpcDeadline, err, req)
	case err != nil:
		t.Fatalf("%s: %v, want an in-band status\nrequest: %v", name, err, req)
	}
	return resp
}

func ackRPC(c v2.MessagingServiceClient, ctx context.Context, r *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	return c.AckMessage(ctx, r)
}

func changeRPC(c v2.MessagingServiceClient, ctx context.Context, r *v2.ChangeInvisibleDurationRequest) (*v2.ChangeInvisibleDurationResponse, error) {
	return c.ChangeInvisibleDuration(ctx, r)
}

func forwardRPC(c v2.MessagingServiceClient, ctx context.Context, r *v2.ForwardMessageToDeadLetterQueueRequest) (*v2.ForwardMessageToDeadLetterQueueResponse, error) {
	return c.ForwardMessageToDeadLetterQueue(ctx, r)
}

func sendRPC(c v2.MessagingServiceClient, ctx context.Context, r *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	return c.SendMessage(ctx, r)
}

func routeRPC(c v2.MessagingServiceClient, ctx context.Context, r *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	return c.QueryRoute(ctx, r)
}

func syncLiteRPC(c v2.MessagingServiceClient, ctx context.Context, r *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
	return c.SyncLiteSubscription(ctx, r)
}

// rawReceived is what one raw ReceiveMessage returned.
type rawReceived struct {
	st     *v2.Status
	msgs   []*v2.Message
	parked bool // the poll waited for its long-polling window to end
	err    error
}

// receive runs one ReceiveMessage through c. A poll that parks (nothing to
// deliver, and the manual clock does not move by itself) is ended by
// advancing the clock past its window; it must then answer within
// rpcDeadline.
func (e *fzEnv) receive(t testing.TB, c *client.Client, req *v2.ReceiveMessageRequest) rawReceived {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan rawReceived, 1)
	go func() {
		var r rawReceived
		stream, err := v2.NewMessagingServiceClient(c.Conn()).ReceiveMessage(c.OutgoingContext(ctx), req)
		for err == nil {
			var resp *v2.ReceiveMessageResponse
			if resp, err = stream.Recv(); err == nil {
				switch x := resp.GetContent().(type) {
				case *v2.ReceiveMessageResponse_Status:
					r.st = x.Status
				case *v2.ReceiveMessageResponse_Message:
					r.msgs = append(r.msgs, x.Message)
				}
			}
		}
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		done <- r
	}()
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	parked := make(chan error, 1)
	go func() { parked <- e.s.WaitForPollers(pctx, 1) }()
	select {
	case r := <-done:
		return r
	case err := <-parked:
		if err != nil {
			t.Fatalf("waiting for the receive to park: %v", err)
		}
	}
	e.clk.Advance(21 * time.Second)
	select {
	case r := <-done:
		r.parked = true
		return r
	case <-time.After(rpcDeadline):
		t.Fatalf("ReceiveMessage did not end %v after its long-polling window: a hang\nrequest: %v", rpcDeadline, req)
		return rawReceived{}
	}
}

func (e *fzEnv) receiveReq(src, batch int, filter *v2.FilterExpression) *v2.ReceiveMessageRequest {
	p := e.pairs[src]
	attempt := fmt.Sprintf("fz-%d-%d", e.iter, batch)
	return &v2.ReceiveMessageRequest{
		Group:              &v2.Resource{Name: p.group},
		MessageQueue:       e.queue[p.topic],
		FilterExpression:   filter,
		BatchSize:          int32(batch),
		InvisibleDuration:  durationpb.New(10 * time.Second),
		LongPollingTimeout: durationpb.New(20 * time.Second),
		AttemptId:          &attempt,
	}
}

// ackAll acks msgs of src with their own handles; every entry must be
// acked.
func (e *fzEnv) ackAll(t testing.TB, src int, msgs []*v2.Message) {
	t.Helper()
	if len(msgs) == 0 {
		return
	}
	p := e.pairs[src]
	req := &v2.AckMessageRequest{Group: &v2.Resource{Name: p.group}, Topic: &v2.Resource{Name: p.topic}}
	for _, m := range msgs {
		sp := m.GetSystemProperties()
		req.Entries = append(req.Entries, &v2.AckMessageEntry{MessageId: sp.GetMessageId(), ReceiptHandle: sp.GetReceiptHandle(), LiteTopic: sp.LiteTopic})
	}
	resp := call(t, e.cons[src], "AckMessage", ackRPC, req)
	for _, en := range resp.GetEntries() {
		if en.GetStatus().GetCode() != v2.Code_OK {
			t.Fatalf("ack of a received message with its own handle: %v", en.GetStatus())
		}
	}
	if resp.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("ack of received messages: %v", resp.GetStatus())
	}
}

// sent is one message sent by an iteration: its body and its order key
// (message group or lite topic; empty where no order is promised).
type sent struct{ body, key string }

// send stores this iteration's messages for src: 3 or 4, in two order keys
// where the type has them, tagged from tags (cycled) with a user property.
func (e *fzEnv) send(t testing.TB, src, n int, tags []string) []sent {
	t.Helper()
	var out []sent
	for i := 0; i < n; i++ {
		m := &client.Message{Topic: e.pairs[src].topic, Body: []byte(fmt.Sprintf("%d-%d", e.iter, i)),
			Properties: map[string]string{"i": strconv.Itoa(i), "a": "x" + strconv.Itoa(i%2)}}
		if len(tags) > 0 {
			m.Tag = tags[i%len(tags)]
		}
		key := ""
		switch src {
		case srcFIFO1:
			m.MessageGroup = "o"
		case srcFIFO2:
			m.MessageGroup = []string{"a", "b"}[i%2]
		case srcLite:
			m.LiteTopic = []string{"l1", "l2"}[i%2]
		case srcDelay:
			m.DeliveryTime = e.clk.Now().Add(time.Second)
		}
		key = m.MessageGroup + m.LiteTopic
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := e.prod.Send(ctx, m)
		cancel()
		must(t, err)
		must(t, res[0].Err)
		out = append(out, sent{string(m.Body), key})
	}
	if src == srcDelay {
		e.clk.Advance(time.Second) // due now
	}
	return out
}

// checkStats fails the test on a negative count anywhere in Stats, and on a
// panic logged by the server.
func (e *fzEnv) checkStats(t testing.TB, when string) rmqfake.Stats {
	t.Helper()
	if recs := e.log.take(); len(recs) > 0 {
		t.Fatalf("%s: the server logged errors (a recovered panic?):\n%s", when, strings.Join(recs, "\n"))
	}
	st := e.s.Stats()
	neg := func(what string, c rmqfake.Counts) {
		if c.Backlog < 0 || c.InFlight < 0 || c.Acked < 0 || c.DeadLettered < 0 {
			t.Fatalf("%s: %s has a negative count: %+v", when, what, c)
		}
	}
	for name, g := range st.Groups {
		neg("group "+name, g.Counts)
		for tn, c := range g.Topics {
			neg("group "+name+" on "+tn, c)
		}
		for ln, c := range g.LiteTopics {
			neg("group "+name+" on lite topic "+ln, c)
		}
	}
	for name, ts := range st.Topics {
		neg("topic "+name, ts.Counts)
		if ts.Stored < 0 || ts.Scheduled < 0 || ts.Sent < 0 {
			t.Fatalf("%s: topic %s: %+v", when, name, ts)
		}
		for ln, ls := range ts.LiteTopics {
			neg("lite topic "+ln, ls.Counts)
			if ls.Stored < 0 {
				t.Fatalf("%s: lite topic %s stores %d", when, ln, ls.Stored)
			}
		}
	}
	if st.Held < 0 || st.Pollers < 0 || st.Timers < 0 {
		t.Fatalf("%s: %+v", when, st)
	}
	return st
}

// drain receives and acks everything src's group has left, until Stats
// show no backlog and nothing in flight, and returns the messages in the
// order received. A receive that finds nothing while Stats show a backlog
// fails the test: a stored message that can no longer be delivered. stuck
// counts the copies of lite messages forwarded to the DLQ that came back
// into their lite topic: they cannot be acked for good (scenario g), so the
// drain stops when only they are left, and they are not in got.
func (e *fzEnv) drain(t testing.TB, src int) (got []*v2.Message, stuck int) {
	t.Helper()
	dlq := map[string]bool{}
	for i := 0; ; i++ {
		g := e.s.Stats().Groups[e.pairs[src].group]
		if g.Backlog+g.InFlight == int64(len(dlq)) {
			return got, len(dlq)
		}
		if i == 50 {
			t.Fatalf("group %s: still %+v after 50 receives", e.pairs[src].group, g.Counts)
		}
		r := e.receive(t, e.cons[src], e.receiveReq(src, 32, &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"}))
		if r.err != nil || r.parked || len(r.msgs) == 0 {
			t.Fatalf("group %s shows %+v but a receive got %d messages (%v, %v, parked %v): stored messages are no longer deliverable",
				e.pairs[src].group, g.Counts, len(r.msgs), r.st, r.err, r.parked)
		}
		e.ackAll(t, src, r.msgs)
		for _, m := range r.msgs {
			if strings.HasPrefix(m.GetTopic().GetName(), "%DLQ%") {
				dlq[m.GetSystemProperties().GetMessageId()] = true
			} else {
				got = append(got, m)
			}
		}
	}
}

func msgKey(m *v2.Message) string {
	return m.GetSystemProperties().GetMessageGroup() + m.GetSystemProperties().GetLiteTopic()
}

// checkDrained: what the drain delivered after the forged requests. Each
// order key's messages come in order, as a suffix of what was sent (an ack
// may commit a FIFO or lite queue past messages, as the broker does, but
// never leave a gap or reorder); unordered messages may come twice (a
// second checkpoint, as on the broker). Without an ack or DLQ forward that
// took effect, every message sent is delivered. pending is the group's
// Backlog+InFlight before the drain: for ordered sources the drain must
// deliver exactly that many.
func checkDrained(t testing.TB, src int, msgs []sent, got []*v2.Message, ackedOrDLQ, pending int64) {
	t.Helper()
	seen := map[string]bool{}
	var uniq []string
	for _, m := range got {
		b := string(m.GetBody())
		if !seen[b] {
			seen[b] = true
			uniq = append(uniq, b)
		}
	}
	if ordered(src) {
		if len(uniq) != len(got) {
			t.Fatalf("ordered source %d: the drain delivered a message twice: %v", src, bodiesOf(got))
		}
		if int64(len(got)) != pending {
			t.Fatalf("ordered source %d: Stats showed %d pending, the drain delivered %d: %v", src, pending, len(got), bodiesOf(got))
		}
		byKey := map[string][]string{}
		for _, m := range got {
			byKey[msgKey(m)] = append(byKey[msgKey(m)], string(m.GetBody()))
		}
		want := map[string][]string{}
		for _, m := range msgs {
			want[m.key] = append(want[m.key], m.body)
		}
		for k, bs := range byKey {
			w := want[k]
			if len(bs) > len(w) || !slices.Equal(bs, w[len(w)-len(bs):]) {
				t.Fatalf("ordered source %d, key %q: drained %v, want a suffix of %v", src, k, bs, w)
			}
		}
	}
	missing := 0
	for _, m := range msgs {
		if !seen[m.body] {
			missing++
		}
	}
	if int64(missing) > ackedOrDLQ {
		t.Fatalf("source %d: %d of %d messages never delivered again, but only %d acks/forwards took effect (drained %v)",
			src, missing, len(msgs), ackedOrDLQ, bodiesOf(got))
	}
}

func bodiesOf(ms []*v2.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = msgKey(m) + ":" + string(m.GetBody())
	}
	return out
}

// expandHandle builds a forged handle from tmpl: {h} is the real handle,
// {k} {p} {i} {q} {o} {s} its fields (kind, pop time, invisible time, queue,
// offset, sequence). Then, when the result has the handle's seven fields,
// field (1 kind .. 6 sequence) is shifted by delta.
func expandHandle(tmpl, real string, field uint8, delta int64) string {
	f := strings.Split(real, " ")
	if len(f) == 7 {
		tmpl = strings.NewReplacer("{h}", real, "{k}", f[1], "{p}", f[2], "{i}", f[3], "{q}", f[4], "{o}", f[5], "{s}", f[6]).Replace(tmpl)
	}
	h := strings.Split(tmpl, " ")
	if len(h) == 7 {
		switch i := int(field % 8); {
		case i == 1 && delta != 0:
			h[1] = string(rune(' ' + 1 + uint64(delta)%94)) // any printable ASCII kind
		case i >= 2 && i <= 6:
			if n, err := strconv.ParseInt(h[i], 10, 64); err == nil {
				h[i] = strconv.FormatInt(n+delta, 10) // wraps, on purpose
			} else if u, err := strconv.ParseUint(h[i], 10, 64); err == nil {
				h[i] = strconv.FormatUint(u+uint64(delta), 10)
			}
		}
		tmpl = strings.Join(h, " ")
	}
	return tmpl
}

// validUTF8: the strings of a request must be valid UTF-8, or the client
// fails to marshal it (the server never sees it).
func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// FuzzHandle forges receipt handles from real ones and sends them, with
// arbitrary lite topic names and invisible durations, in AckMessage,
// ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue to every kind
// of group and topic: each answers in band within rpcDeadline, no panic is
// logged, Stats stay non-negative, and afterwards (the clock past every
// invisible time) what the group still holds is delivered, ordered queues in
// order and in full unless an ack or forward took effect.
//
// Inputs: src picks the source of the real handle (normal, FIFO with 1 and
// 2 queues, lite, delay); batch (1..3) the receive that produced it; tgt the
// group and topic the requests name (0: the source's own); ops the requests
// (bit 1 ack, 2 change, 4 forward, none of them: all three; 8 suspend, 16
// ack and forward with the handle the change returned); tmpl, field and
// delta the handle (see expandHandle); lite the lite topic the requests name
// ({l} is the real one); inv the invisible duration in ms.
func FuzzHandle(f *testing.F) {
	type in struct {
		src, batch, tgt, ops uint8
		tmpl                 string
		field                uint8
		delta                int64
		lite                 string
		inv                  int64
	}
	var seeds []in
	for src := uint8(0); src < nSources; src++ {
		lite := ""
		if src == srcLite {
			lite = "{l}"
		}
		seeds = append(seeds,
			in{src, 0, 0, 0, "{h}", 0, 0, lite, 1000},
			in{src, 1, 0, 1, "{h}", 0, 0, lite, 0},
			in{src, 2, 0, 2 | 16, "{h}", 3, 1000, lite, 60_000},
			in{src, 0, 0, 2 | 8, "{h}", 0, 0, lite, 5000},
			in{src, 0, 0, 4, "{h}", 0, 0, lite, 0},
		)
		for _, q := range []int64{-1, 1, 2, 4294967295 + 1, math.MaxInt32, math.MinInt32} {
			seeds = append(seeds, in{src, 0, 0, 0, "{h}", 4, q, lite, 1000})
		}
		for _, off := range []int64{-1, 1, 2, 3, 1000, math.MaxInt64, math.MinInt64} {
			seeds = append(seeds, in{src, 1, 0, 0, "{h}", 5, off, lite, 1000})
		}
		for _, d := range []int64{-1, 1, math.MaxInt64} {
			seeds = append(seeds, in{src, 0, 0, 0, "{h}", 2, d, lite, 1000}, in{src, 0, 0, 0, "{h}", 3, d, lite, 1000}, in{src, 0, 0, 0, "{h}", 6, d, lite, 1000})
		}
		for tgt := uint8(1); tgt < nSources+2; tgt++ {
			seeds = append(seeds, in{src, 0, tgt, 0, "{h}", 0, 0, lite, 1000}, in{src, 0, tgt, 0, "{h}", 4, 1, "{l}", 1000})
		}
		for _, k := range []string{"n", "r", "f", "l", "x"} {
			seeds = append(seeds, in{src, 0, 0, 0, "F1 " + k + " {p} {i} {q} {o} {s}", 0, 0, lite, 1000})
		}
	}
	seeds = append(seeds,
		in{srcLite, 0, 0, 0, "{h}", 0, 0, "nope", 1000},
		in{srcLite, 0, 0, 0, "{h}", 0, 0, "", 1000},
		in{srcFIFO1, 0, 0, 0, "{h}", 0, 0, "l1", 1000},
		in{srcFIFO2, 0, 0, 0, "F1 f {p} {i} -1 {o} {s}", 0, 0, "", -1},
		in{srcFIFO2, 0, 0, 0, "F1 f 9223372036854775807 {i} {q} {o} {s}", 0, 0, "", math.MaxInt64},
		in{srcNormal, 0, 0, 0, "F1 n {p} 9223372036854775807 {q} {o} {s}", 0, 0, "", math.MinInt64},
		in{srcNormal, 0, 0, 0, "", 0, 0, "", 1000},
		in{srcNormal, 0, 0, 0, "F1", 0, 0, "", 1000},
		in{srcNormal, 0, 0, 0, "F1 n 1 2 3 4 5 6", 0, 0, "", 1000},
		in{srcNormal, 0, 0, 0, "{h} ", 0, 0, "", 1000},
		in{srcNormal, 0, 0, 0, "F1 n +1 -0 0x1 1e3 18446744073709551615", 0, 0, "", 1000},
		in{srcLite, 0, 0, 0, "{h}", 0, 0, strings.Repeat("x", 65), 1000},
		in{srcLite, 0, 0, 0, "{h}", 0, 0, "l1\x00", 1000},
	)
	for _, s := range seeds {
		f.Add(s.src, s.batch, s.tgt, s.ops, s.tmpl, s.field, s.delta, s.lite, s.inv)
	}
	e := newFzEnv(f)
	f.Fuzz(func(t *testing.T, srcB, batchB, tgtB, ops uint8, tmpl string, field uint8, delta int64, lite string, inv int64) {
		e.begin()
		src := int(srcB) % nSources
		p := e.pairs[src]
		targets := e.targets()
		tgt := targets[(src+int(tgtB))%len(targets)]
		c := e.cons[src]
		base := e.checkStats(t, "before the iteration").Groups[p.group]

		msgs := e.send(t, src, 4, nil)
		r := e.receive(t, c, e.receiveReq(src, 1+int(batchB)%3, &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"}))
		if r.err != nil || len(r.msgs) == 0 {
			t.Fatalf("source %d: receive after a send: %v, %v, parked %v", src, r.st, r.err, r.parked)
		}
		real := r.msgs[0].GetSystemProperties()
		h := validUTF8(expandHandle(tmpl, real.GetReceiptHandle(), field, delta))
		lt := validUTF8(strings.ReplaceAll(lite, "{l}", real.GetLiteTopic()))
		var ltp *string
		if lt != "" {
			ltp = &lt
		}
		group, topic := &v2.Resource{Name: tgt.group}, &v2.Resource{Name: tgt.topic}
		id := real.GetMessageId()
		if ops&7 == 0 {
			ops |= 7
		}
		ackH, fwdH := h, h
		if ops&2 != 0 {
			suspend := ops&8 != 0
			resp := call(t, c, "ChangeInvisibleDuration", changeRPC, &v2.ChangeInvisibleDurationRequest{Group: group, Topic: topic,
				ReceiptHandle: h, InvisibleDuration: &durationpb.Duration{Seconds: inv / 1000, Nanos: int32(inv % 1000 * 1e6)},
				MessageId: id, LiteTopic: ltp, Suspend: &suspend})
			if resp.GetStatus() == nil {
				t.Fatalf("ChangeInvisibleDuration answered no status")
			}
			if ops&16 != 0 && resp.GetReceiptHandle() != "" {
				ackH, fwdH = resp.GetReceiptHandle(), resp.GetReceiptHandle()
			}
		}
		if ops&1 != 0 {
			resp := call(t, c, "AckMessage", ackRPC, &v2.AckMessageRequest{Group: group, Topic: topic,
				Entries: []*v2.AckMessageEntry{{MessageId: id, ReceiptHandle: ackH, LiteTopic: ltp}}})
			if resp.GetStatus() == nil {
				t.Fatalf("AckMessage answered no status")
			}
		}
		if ops&4 != 0 {
			resp := call(t, c, "ForwardMessageToDeadLetterQueue", forwardRPC, &v2.ForwardMessageToDeadLetterQueueRequest{Group: group, Topic: topic,
				ReceiptHandle: fwdH, MessageId: id, LiteTopic: ltp, DeliveryAttempt: 1, MaxDeliveryAttempts: 2})
			if resp.GetStatus() == nil {
				t.Fatalf("ForwardMessageToDeadLetterQueue answered no status")
			}
		}
		e.checkStats(t, "after the forged requests")

		// Past every invisible time (12 h at most), then drain.
		e.clk.Advance(13 * time.Hour)
		g := e.checkStats(t, "past the invisible times").Groups[p.group]
		done := g.Acked - base.Acked + g.DeadLettered - base.DeadLettered
		got, stuck := e.drain(t, src)
		checkDrained(t, src, msgs, got, done, g.Backlog+g.InFlight-int64(stuck))
		e.checkStats(t, "after the drain")
		if stuck > 0 {
			e.renewLite(t)
		}
	})
}

// tagOracle is what a TAG expression selects, as the broker builds it
// (FilterAPI.build: "" or "*" is everything; otherwise split on "||", Java
// dropping trailing empty parts, each part trimmed; no part at all is an
// error). trim is the trimming applied to each part. ok is false for an
// illegal expression; all is true when every message matches.
func tagOracle(expr string, trim func(string) string) (tags map[string]bool, all, ok bool) {
	if expr == "" || expr == "*" {
		return nil, true, true
	}
	parts := strings.Split(expr, "||")
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if len(parts) == 0 {
		return nil, false, false
	}
	tags = map[string]bool{}
	for _, p := range parts {
		if p = trim(p); p != "" {
			tags[p] = true
		}
	}
	return tags, len(tags) == 0, true
}

// javaTrim is Java's String.trim: it strips every char <= U+0020, which
// the proxy applies to each tag of an expression.
func javaTrim(s string) string { return strings.TrimFunc(s, func(r rune) bool { return r <= ' ' }) }

// fzTags are the tags of FuzzFilter's messages ("" is no tag).
var fzTags = []string{"a", "b", "", "TagA", "a b", "*", " a"}

// FuzzFilter sends arbitrary filter expressions (TAG, SQL92, unspecified and
// unknown types) in ReceiveMessage to a normal, a FIFO and a lite group,
// over messages with varied tags and user properties: no panic, an in-band
// answer, and for a TAG expression exactly the messages the broker's tag
// rules select (or ILLEGAL_FILTER_EXPRESSION for an expression they refuse);
// afterwards nothing is left behind that cannot be received.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{"*", "", "a", "a||b", "a || b", "TagA", "||", "|| ||", "a||", "||a", " || a", "a|b", "a b", " a ",
		"*||a", "a||*", "\ta\n", "a\u00a0", "\x01a", "a||||b", strings.Repeat("a||", 100)} {
		f.Add(uint8(0), uint8(v2.FilterType_TAG), s)
		f.Add(uint8(1), uint8(v2.FilterType_TAG), s)
		f.Add(uint8(2), uint8(v2.FilterType_TAG), s)
	}
	for _, s := range []string{"a = 'x1'", "i > 1 AND a IS NOT NULL", "i BETWEEN 1 AND 2", "a IN ('x0', 'x1')", "TRUE", "", "(", "a =", "i > 9223372036854775808"} {
		f.Add(uint8(0), uint8(v2.FilterType_SQL), s)
		f.Add(uint8(2), uint8(v2.FilterType_SQL), s)
	}
	f.Add(uint8(0), uint8(v2.FilterType_FILTER_TYPE_UNSPECIFIED), "a")
	f.Add(uint8(1), uint8(99), "a")
	e := newFzEnv(f)
	sources := []int{srcNormal, srcFIFO1, srcLite}
	f.Fuzz(func(t *testing.T, srcB, typ uint8, expr string) {
		e.begin()
		src := sources[int(srcB)%len(sources)]
		expr = validUTF8(expr)
		e.checkStats(t, "before the iteration")
		msgs := e.send(t, src, len(fzTags), fzTags)
		fe := &v2.FilterExpression{Type: v2.FilterType(typ), Expression: expr}
		r := e.receive(t, e.cons[src], e.receiveReq(src, 32, fe))
		if r.err != nil {
			t.Fatalf("receive with filter %v: %v, want an in-band answer", fe, r.err)
		}
		if r.st == nil {
			t.Fatalf("receive with filter %v: no status", fe)
		}
		if r.st.GetCode() != v2.Code_OK && len(r.msgs) > 0 {
			t.Fatalf("receive with filter %v: status %v and %d messages", fe, r.st, len(r.msgs))
		}
		sentBodies := map[string]string{} // body -> tag
		for i, m := range msgs {
			sentBodies[m.body] = fzTags[i%len(fzTags)]
		}
		var gotBodies []string
		for _, m := range r.msgs {
			b := string(m.GetBody())
			if _, ok := sentBodies[b]; !ok {
				t.Fatalf("filter %v delivered %q, not sent by this iteration", fe, b)
			}
			gotBodies = append(gotBodies, b)
		}
		// The TAG rules, where Java's trim and rmqfake's agree (see
		// tagOracle); SQL92 and other types are only checked for an in-band
		// answer and messages of this iteration.
		if fe.GetType() != v2.FilterType_SQL {
			tags, all, ok := tagOracle(expr, javaTrim)
			tags2, all2, _ := tagOracle(expr, strings.TrimSpace)
			if all == all2 && fmt.Sprint(tags) == fmt.Sprint(tags2) {
				var want []string
				if ok {
					for _, m := range msgs {
						if all || tags[sentBodies[m.body]] {
							want = append(want, m.body)
						}
					}
				}
				switch {
				case !ok && r.st.GetCode() != v2.Code_ILLEGAL_FILTER_EXPRESSION:
					t.Fatalf("TAG %q: %v, want ILLEGAL_FILTER_EXPRESSION", expr, r.st)
				case ok && len(want) == 0 && r.st.GetCode() != v2.Code_MESSAGE_NOT_FOUND:
					t.Fatalf("TAG %q selects none of %v: got %v %v, want MESSAGE_NOT_FOUND", expr, fzTags, r.st, gotBodies)
				case ok && len(want) > 0:
					g := slices.Clone(gotBodies)
					if src != srcFIFO1 {
						slices.Sort(g)
						slices.Sort(want)
					}
					if !slices.Equal(g, want) {
						t.Fatalf("TAG %q on tags %q (source %d): got %v (%v), want %v", expr, fzTags, src, gotBodies, r.st, want)
					}
				}
			}
		}
		e.ackAll(t, src, r.msgs)
		e.checkStats(t, "after the filtered receive")
		// Whatever the filter left (a refused filter leaves everything) is
		// still received without one.
		if _, stuck := e.drain(t, src); stuck > 0 {
			t.Fatalf("%d messages went to the DLQ", stuck)
		}
		e.checkStats(t, "after the drain")
	})
}

// javaWhitespace is Java's Character.isWhitespace, which StringUtils.isBlank
// (the proxy's blank checks) uses: space, line and paragraph separators but
// not the no-break spaces, and \t \n \v \f \r and U+001C..U+001F.
func javaWhitespace(r rune) bool {
	switch r {
	case '\u00a0', '\u2007', '\u202f':
		return false
	case '\t', '\n', '\v', '\f', '\r', '\x1c', '\x1d', '\x1e', '\x1f':
		return true
	}
	return unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp)
}

func javaBlank(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return !javaWhitespace(r) }) < 0
}

// blankDisagrees reports whether Java's and Go's notions of a blank string
// (StringUtils.isBlank, strings.TrimSpace) differ on s, e.g. for "\u00a0".
func blankDisagrees(s string) bool { return javaBlank(s) != (strings.TrimSpace(s) == "") }

func hasCtl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

// nameChars: ^[%|a-zA-Z0-9_-]+$ (topics, groups) or ^[a-zA-Z0-9_-]+$
// (lite topics).
func nameChars(s string, extra string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}

// The rules of names.go (the proxy's Validators and GrpcValidator), written
// out again: blank, too long, or outside the allowed characters.
func topicCode(s string) v2.Code {
	if javaBlank(s) || len(s) > 127 || !nameChars(s, "%|") {
		return v2.Code_ILLEGAL_TOPIC
	}
	return v2.Code_OK
}

func groupCode(s string) v2.Code {
	if javaBlank(s) || len(s) > 120 || !nameChars(s, "%|") {
		return v2.Code_ILLEGAL_CONSUMER_GROUP
	}
	return v2.Code_OK
}

func liteTopicCode(s string) v2.Code {
	if javaBlank(s) || len(s) > 64 || !nameChars(s, "") {
		return v2.Code_ILLEGAL_LITE_TOPIC
	}
	return v2.Code_OK
}

// reservedKeys are the system property names a message may not carry
// (names.go's reservedProps, from MessageConst).
var reservedKeys = strings.Fields(`KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP MIN_OFFSET MAX_OFFSET
	BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG RECONSUME_TIME MSG_REGION TRACE_ON UNIQ_KEY
	MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET 1ST_POP_TIME SHARDING_KEY __STARTDELIVERTIME
	TIMER_DELIVER_MS TIMER_DELAY_SEC TIMER_DELAY_MS INNER_MULTI_DISPATCH INNER_MULTI_QUEUE_OFFSET LITE_TOPIC __BORNHOST`)

// fzTopicTypes are the topics FuzzNames can name, by type.
var fzTopicTypes = map[string]v2.MessageType{
	"fz-n": v2.MessageType_NORMAL, "fz-f1": v2.MessageType_FIFO, "fz-f2": v2.MessageType_FIFO,
	"fz-l": v2.MessageType_LITE, "fz-d": v2.MessageType_DELAY,
}

// sendCode is the answer to a SendMessage of one message with these names,
// in the order SendMessageActivity validates them.
func sendCode(topic, lite, msgGroup, key, tag, pk, pv string) v2.Code {
	if c := topicCode(topic); c != v2.Code_OK {
		return c
	}
	if pk != "" || pv != "" {
		if slices.Contains(reservedKeys, pk) || hasCtl(pk) || hasCtl(pv) {
			return v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY
		}
	}
	if tag != "" && (javaBlank(tag) || strings.Contains(tag, "|") || hasCtl(tag)) {
		return v2.Code_ILLEGAL_MESSAGE_TAG
	}
	if key != "" && (javaBlank(key) || hasCtl(key)) {
		return v2.Code_ILLEGAL_MESSAGE_KEY
	}
	if len(pk)+len(pv)+len(tag)+len(key) > 16<<10 {
		return v2.Code_MESSAGE_PROPERTIES_TOO_LARGE
	}
	if msgGroup != "" && (javaBlank(msgGroup) || len(msgGroup) >= 64 || hasCtl(msgGroup)) {
		return v2.Code_ILLEGAL_MESSAGE_GROUP
	}
	if lite != "" {
		if c := liteTopicCode(lite); c != v2.Code_OK {
			return c
		}
	}
	if strings.HasPrefix(topic, "%DLQ%") || strings.HasPrefix(topic, "%RETRY%") {
		return v2.Code_TOPIC_NOT_FOUND // none exists on this server
	}
	typ := v2.MessageType_NORMAL
	switch {
	case msgGroup != "":
		typ = v2.MessageType_FIFO
	case lite != "":
		typ = v2.MessageType_LITE
	}
	if have, ok := fzTopicTypes[topic]; !ok || have != typ {
		return v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
	}
	return v2.Code_OK
}

// fzGroups are the groups FuzzNames can name: their bind topic and whether
// they are wildcard groups.
var fzGroups = map[string]struct {
	bind     string
	wildcard bool
}{
	"fz-gn": {}, "fz-gf1": {}, "fz-gf2": {}, "fz-gd": {},
	"fz-gl": {"fz-l", true}, "fz-ge": {"fz-l", false},
}

// syncCode is the answer to a SyncLiteSubscription of one lite topic.
func syncCode(action v2.LiteSubscriptionAction, topic, group, lite string) v2.Code {
	if c := topicCode(topic); c != v2.Code_OK {
		return c
	}
	if c := groupCode(group); c != v2.Code_OK {
		return c
	}
	if action == v2.LiteSubscriptionAction_PARTIAL_ADD {
		if c := liteTopicCode(lite); c != v2.Code_OK {
			return c
		}
	}
	g, ok := fzGroups[group]
	switch {
	case !ok:
		return v2.Code_ILLEGAL_CONSUMER_GROUP
	case g.bind != topic:
		return v2.Code_ILLEGAL_TOPIC
	case action == v2.LiteSubscriptionAction_PARTIAL_ADD && g.wildcard:
		return v2.Code_INTERNAL_SERVER_ERROR
	}
	return v2.Code_OK
}

// FuzzNames sends arbitrary topic, lite topic, message group, key, tag and
// property names in SendMessage, a topic in QueryRoute, and topic, group and
// lite topic in SyncLiteSubscription (every action): no panic, an in-band
// answer within rpcDeadline, and the code names.go's rules give (written out
// again here, in the proxy's validation order). Where Java's and Go's idea
// of a blank string differ (no-break spaces), only the in-band answer is
// checked.
func FuzzNames(f *testing.F) {
	type in struct {
		action                                         uint8
		topic, group, lite, msgGroup, key, tag, pk, pv string
	}
	seeds := []in{
		{0, "fz-n", "fz-ge", "", "", "k", "a", "p", "v"},
		{0, "fz-f1", "fz-ge", "", "o", "", "", "", ""},
		{0, "fz-l", "fz-ge", "l1", "", "", "", "", ""},
		{1, "fz-l", "fz-ge", "l1", "", "", "", "", ""},
		{2, "fz-l", "fz-gl", "l1", "", "", "", "", ""},
		{3, "fz-l", "fz-gl", "", "", "", "", "", ""},
		{0, "fz-l", "fz-gl", "l1", "", "", "", "", ""},
		{0, "fz-l", "fz-gn", "l1", "", "", "", "", ""},
		{0, "fz-n", "fz-nope", "l1", "o", "", "", "", ""},
		{0, "", "", "", "", "", "", "", ""},
		{0, " ", " ", " ", " ", " ", " ", " ", " "},
		{0, "a b", "a b", "a b", "a b", "a b", "a|b", "a b", "a b"},
		{0, "%DLQ%fz-gn", "%RETRY%fz-gn", "%", "\x00", "\x7f", "\u0085", "KEYS", "\t"},
		{0, strings.Repeat("t", 127), strings.Repeat("g", 120), strings.Repeat("l", 64), strings.Repeat("m", 63), "k", "t", "p", "v"},
		{0, strings.Repeat("t", 128), strings.Repeat("g", 121), strings.Repeat("l", 65), strings.Repeat("m", 64), "k", "t", "p", "v"},
		{0, "fz-n", "fz-ge", "", "", strings.Repeat("k", 8192), strings.Repeat("t", 8192), "p", "v"},
		{0, "fz-n", "fz-ge", "", "", "", "", "UNIQ_KEY", "x"},
		{4, "fz-l", "fz-ge", "l1", "", "", "", "", ""},
		{0, "fz-d", "fz-ge", "\u00e9", "\u00a0", "\u00a0", "\u00a0", "\u00a0", "\u00a0"},
		{0, "fz|n", "fz|ge", "l_1-2", "o", "k", "t", "", "v"},
	}
	for _, s := range seeds {
		f.Add(s.action, s.topic, s.group, s.lite, s.msgGroup, s.key, s.tag, s.pk, s.pv)
	}
	e := newFzEnv(f)
	must(f, e.s.CreateGroup("fz-ge", rmqfake.LiteBind("fz-l")))
	syncer, err := client.New(client.Config{Endpoints: e.s.Addr()}) // a client without a session: SyncLiteSubscription needs none
	must(f, err)
	e.clients = append(e.clients, syncer)
	f.Fuzz(func(t *testing.T, actionB uint8, topic, group, lite, msgGroup, key, tag, pk, pv string) {
		e.begin()
		topic, group, lite, msgGroup = validUTF8(topic), validUTF8(group), validUTF8(lite), validUTF8(msgGroup)
		key, tag, pk, pv = validUTF8(key), validUTF8(tag), validUTF8(pk), validUTF8(pv)
		exact := !slices.ContainsFunc([]string{topic, group, lite, msgGroup, key, tag, pk, pv}, blankDisagrees)

		sp := &v2.SystemProperties{MessageId: fmt.Sprintf("fz-%d", e.iter), BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL,
			BornTimestamp: timestamppb.New(e.clk.Now()), BornHost: "fz"}
		if tag != "" {
			sp.Tag = &tag
		}
		if key != "" {
			sp.Keys = []string{key}
		}
		if msgGroup != "" {
			sp.MessageGroup, sp.MessageType = &msgGroup, v2.MessageType_FIFO
		} else if lite != "" {
			sp.MessageType = v2.MessageType_LITE
		}
		if lite != "" {
			sp.LiteTopic = &lite
		}
		msg := &v2.Message{Topic: &v2.Resource{Name: topic}, SystemProperties: sp, Body: []byte("x")}
		if pk != "" || pv != "" {
			msg.UserProperties = map[string]string{pk: pv}
		}
		sresp := call(t, e.prod, "SendMessage", sendRPC, &v2.SendMessageRequest{Messages: []*v2.Message{msg}})
		want := sendCode(topic, lite, msgGroup, key, tag, pk, pv)
		if got := sresp.GetStatus().GetCode(); exact && got != want || sresp.GetStatus() == nil {
			t.Fatalf("SendMessage of topic %q lite %q group %q key %q tag %q property %q=%q: %v, want %v", topic, lite, msgGroup, key, tag, pk, pv, sresp.GetStatus(), want)
		}

		rresp := call(t, e.prod, "QueryRoute", routeRPC, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: topic}})
		want = topicCode(topic)
		if _, ok := fzTopicTypes[topic]; want == v2.Code_OK && !ok {
			want = v2.Code_TOPIC_NOT_FOUND
		}
		if got := rresp.GetStatus().GetCode(); exact && got != want || rresp.GetStatus() == nil {
			t.Fatalf("QueryRoute of %q: %v, want %v", topic, rresp.GetStatus(), want)
		}
		if rresp.GetStatus().GetCode() == v2.Code_OK && len(rresp.GetMessageQueues()) == 0 {
			t.Fatalf("QueryRoute of %q: OK without queues", topic)
		}

		action := v2.LiteSubscriptionAction(actionB % 5) // 4: a value 5.5.0 does not know
		lresp := call(t, syncer, "SyncLiteSubscription", syncLiteRPC, &v2.SyncLiteSubscriptionRequest{Action: action,
			Topic: &v2.Resource{Name: topic}, Group: &v2.Resource{Name: group}, LiteTopicSet: []string{lite}})
		want = syncCode(action, topic, group, lite)
		if got := lresp.GetStatus().GetCode(); exact && got != want || lresp.GetStatus() == nil {
			t.Fatalf("SyncLiteSubscription %v of topic %q group %q lite %q: %v, want %v", action, topic, group, lite, lresp.GetStatus(), want)
		}
		if lresp.GetStatus().GetCode() == v2.Code_OK {
			// Leave no subscription behind for the next input.
			undo := call(t, syncer, "SyncLiteSubscription", syncLiteRPC, &v2.SyncLiteSubscriptionRequest{Action: v2.LiteSubscriptionAction_COMPLETE_REMOVE,
				Topic: &v2.Resource{Name: topic}, Group: &v2.Resource{Name: group}})
			if undo.GetStatus().GetCode() != v2.Code_OK {
				t.Fatalf("COMPLETE_REMOVE after an accepted sync: %v", undo.GetStatus())
			}
		}
		e.checkStats(t, "after the requests")
	})
}

// fzRequestTypes are the requests FuzzRequestProto decodes its bytes as.
var fzRequestTypes = []func() proto.Message{
	func() proto.Message { return &v2.SendMessageRequest{} },
	func() proto.Message { return &v2.AckMessageRequest{} },
	func() proto.Message { return &v2.ChangeInvisibleDurationRequest{} },
	func() proto.Message { return &v2.ReceiveMessageRequest{} },
	func() proto.Message { return &v2.QueryRouteRequest{} },
	func() proto.Message { return &v2.SyncLiteSubscriptionRequest{} },
	func() proto.Message { return &v2.ForwardMessageToDeadLetterQueueRequest{} },
}

// FuzzRequestProto decodes arbitrary bytes as one of the request protos
// (which % 7) and sends it, from a client with a session of one of the
// consumer groups (which / 7 % 5): whatever decodes gets an in-band answer
// (ReceiveMessage: a status on the stream) within rpcDeadline, no panic is
// logged, and Stats stay non-negative. Between inputs the clock moves past
// every invisible time.
func FuzzRequestProto(f *testing.F) {
	handle := "F1 f 1893456000000 10000 0 0 1"
	res := func(n string) *v2.Resource { return &v2.Resource{Name: n} }
	lite := "l1"
	attempt := "a"
	reqs := []proto.Message{
		&v2.SendMessageRequest{Messages: []*v2.Message{{Topic: res("fz-f1"), Body: []byte("x"), UserProperties: map[string]string{"a": "b"},
			SystemProperties: &v2.SystemProperties{MessageId: "m1", Tag: ptrTo("t"), Keys: []string{"k"}, MessageGroup: ptrTo("o"), MessageType: v2.MessageType_FIFO,
				BodyEncoding: v2.Encoding_IDENTITY, BornTimestamp: timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}}}},
		&v2.AckMessageRequest{Group: res("fz-gf1"), Topic: res("fz-f1"), Entries: []*v2.AckMessageEntry{{MessageId: "m1", ReceiptHandle: handle}}},
		&v2.ChangeInvisibleDurationRequest{Group: res("fz-gf1"), Topic: res("fz-f1"), ReceiptHandle: handle, InvisibleDuration: durationpb.New(time.Minute), MessageId: "m1"},
		&v2.ReceiveMessageRequest{Group: res("fz-gf1"), MessageQueue: &v2.MessageQueue{Topic: res("fz-f1"), Id: 0, Permission: v2.Permission_READ_WRITE},
			FilterExpression: &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"}, BatchSize: 32,
			InvisibleDuration: durationpb.New(10 * time.Second), LongPollingTimeout: durationpb.New(5 * time.Second), AttemptId: &attempt},
		&v2.QueryRouteRequest{Topic: res("fz-l"), Endpoints: &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: "127.0.0.1", Port: 1}}}},
		&v2.SyncLiteSubscriptionRequest{Action: v2.LiteSubscriptionAction_PARTIAL_ADD, Topic: res("fz-l"), Group: res("fz-ge"), LiteTopicSet: []string{"l1", "l2"},
			OffsetOption: &v2.OffsetOption{OffsetType: &v2.OffsetOption_TailN{TailN: math.MinInt64}}},
		&v2.ForwardMessageToDeadLetterQueueRequest{Group: res("fz-gl"), Topic: res("fz-l"), ReceiptHandle: "F1 l 1893456000000 10000 0 0 1", MessageId: "m1",
			DeliveryAttempt: 1, MaxDeliveryAttempts: 2, LiteTopic: &lite},
	}
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		must(f, err)
		for src := 0; src < nSources; src++ {
			f.Add(uint8(i+7*src), b)
		}
	}
	f.Add(uint8(3+7*srcLite), mustMarshal(f, &v2.ReceiveMessageRequest{Group: res("fz-gl"), MessageQueue: &v2.MessageQueue{Topic: res("fz-l")},
		BatchSize: -1, InvisibleDuration: &durationpb.Duration{Seconds: math.MaxInt64}, AutoRenew: true}))
	f.Add(uint8(0), mustMarshal(f, &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: res("fz-d"), Body: []byte("x"),
		SystemProperties: &v2.SystemProperties{MessageId: "m", DeliveryTimestamp: &timestamppb.Timestamp{Seconds: math.MaxInt64, Nanos: -1}}}}}))
	f.Add(uint8(5), mustMarshal(f, &v2.SyncLiteSubscriptionRequest{Action: 2, Topic: res("fz-l"), Group: res("fz-gl"),
		OffsetOption: &v2.OffsetOption{OffsetType: &v2.OffsetOption_Offset{Offset: -1}}}))
	f.Add(uint8(1), []byte{})
	e := newFzEnv(f)
	must(f, e.s.CreateGroup("fz-ge", rmqfake.LiteBind("fz-l")))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		e.begin()
		req := fzRequestTypes[int(which)%len(fzRequestTypes)]()
		if err := proto.Unmarshal(data, req); err != nil {
			return
		}
		c := e.cons[int(which)/len(fzRequestTypes)%nSources]
		var st *v2.Status
		switch r := req.(type) {
		case *v2.SendMessageRequest:
			st = call(t, c, "SendMessage", sendRPC, r).GetStatus()
		case *v2.AckMessageRequest:
			st = call(t, c, "AckMessage", ackRPC, r).GetStatus()
		case *v2.ChangeInvisibleDurationRequest:
			st = call(t, c, "ChangeInvisibleDuration", changeRPC, r).GetStatus()
		case *v2.QueryRouteRequest:
			st = call(t, c, "QueryRoute", routeRPC, r).GetStatus()
		case *v2.SyncLiteSubscriptionRequest:
			st = call(t, c, "SyncLiteSubscription", syncLiteRPC, r).GetStatus()
		case *v2.ForwardMessageToDeadLetterQueueRequest:
			st = call(t, c, "ForwardMessageToDeadLetterQueue", forwardRPC, r).GetStatus()
		case *v2.ReceiveMessageRequest:
			got := e.receive(t, c, r)
			if got.err != nil {
				t.Fatalf("ReceiveMessage: %v, want an in-band status\nrequest: %v", got.err, r)
			}
			st = got.st
		}
		if st == nil {
			t.Fatalf("%T answered no status: %v", req, req)
		}
		e.checkStats(t, fmt.Sprintf("after %T", req))
		e.clk.Advance(13 * time.Hour)
		e.checkStats(t, "past the invisible times")
	})
}

func ptrTo[T any](v T) *T { return &v }

func mustMarshal(tb testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	must(tb, err)
	return b
}
