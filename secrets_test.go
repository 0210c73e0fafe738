package rmqflow_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The canary credentials of the no-secrets tests. The access key is an
// identifier (it is sent in clear in every signed request and may be
// printed); the secret and the security token must never appear.
const (
	leakAK     = "AK-canary-5e1f"
	leakSecret = "SECRET-canary-8d2b7c41e9"
	leakToken  = "TOKEN-canary-3a9f60d2"
)

var leakCreds = client.Credentials{AccessKey: leakAK, AccessSecret: leakSecret, SecurityToken: leakToken}

// leakScan collects every text a test can observe and checks that none
// carries the secret, the token, or a signature made with the secret.
type leakScan struct {
	start time.Time
	mu    sync.Mutex
	texts []leakText
}

type leakText struct{ where, text string }

func newLeakScan() *leakScan { return &leakScan{start: time.Now()} }

func (l *leakScan) add(where, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.texts = append(l.texts, leakText{where, text})
}

// err records every rendering of err: %v, %+v, %#v, %s, %q and the
// messages of its whole chain.
func (l *leakScan) err(where string, err error) {
	if err == nil {
		return
	}
	l.add(where, fmt.Sprintf("%v | %+v | %#v | %s | %q", err, err, err, err, err))
	for e := err; e != nil; e = errors.Unwrap(e) {
		l.add(where+" (chain)", e.Error())
	}
}

// value records fmt's renderings of v and its JSON form.
func (l *leakScan) value(where string, v any) {
	l.add(where, fmt.Sprintf("%v | %+v | %#v", v, v, v))
	if b, err := json.Marshal(v); err == nil {
		l.add(where+" (json)", string(b))
	}
}

// handle records every encoding of h.
func (l *leakScan) handle(where string, h rmqflow.ReceiptHandle) {
	l.value(where, h)
	l.add(where+" String", h.String())
	if b, err := h.MarshalBinary(); err == nil {
		l.add(where+" binary", string(b))
		l.add(where+" binary hex", hex.EncodeToString(b))
	}
	if b, err := h.MarshalJSON(); err == nil {
		l.add(where+" json", string(b))
	}
}

// forbidden lists what must not appear: the secret and token, their hex and
// base64 forms, and the signature of every second the test ran (the
// authorization header's Signature is hex HMAC-SHA1(secret, x-mq-date-time)).
func (l *leakScan) forbidden() map[string]string {
	out := map[string]string{}
	for name, s := range map[string]string{"secret": leakSecret, "token": leakToken, "secret core": "8d2b7c41e9", "token core": "3a9f60d2"} {
		out[name] = s
		out[name+" hex"] = hex.EncodeToString([]byte(s))
		out[name+" base64"] = base64.StdEncoding.EncodeToString([]byte(s))
		out[name+" base64url"] = base64.RawURLEncoding.EncodeToString([]byte(s))
	}
	for ts := l.start.Add(-2 * time.Second); ts.Before(time.Now().Add(2 * time.Second)); ts = ts.Add(time.Second) {
		dt := ts.UTC().Format("20060102T150405Z")
		h := hmac.New(sha1.New, []byte(leakSecret))
		h.Write([]byte(dt))
		sig := h.Sum(nil)
		out["signature at "+dt] = hex.EncodeToString(sig)
		out["signature (base64) at "+dt] = base64.StdEncoding.EncodeToString(sig)
	}
	return out
}

// findings lists every text that carries something forbidden.
func (l *leakScan) findings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, x := range l.texts {
		low := strings.ToLower(x.text)
		for name, f := range l.forbidden() {
			if strings.Contains(low, strings.ToLower(f)) {
				out = append(out, fmt.Sprintf("LEAK of the %s in %s: %.400q", name, x.where, x.text))
			}
		}
	}
	return out
}

// check fails t for every finding, and fails if fewer than minTexts texts
// were seen (the scan must have looked).
func (l *leakScan) check(t *testing.T, minTexts int) {
	t.Helper()
	for _, f := range l.findings() {
		t.Error(f)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.texts) < minTexts {
		t.Errorf("scanned %d texts, want at least %d: the test did not observe what it should", len(l.texts), minTexts)
	}
	t.Logf("scanned %d texts for %d forbidden strings", len(l.texts), len(l.forbidden()))
}

// TestLeakScanFindsEachForm: the scanner itself catches the secret, the
// token, their hex and base64 forms and a signature made now.
func TestLeakScanFindsEachForm(t *testing.T) {
	h := hmac.New(sha1.New, []byte(leakSecret))
	h.Write([]byte(time.Now().UTC().Format("20060102T150405Z")))
	for name, text := range map[string]string{
		"secret":    "x " + leakSecret + " y",
		"token":     leakToken,
		"hex":       hex.EncodeToString([]byte(leakSecret)),
		"upper hex": strings.ToUpper(hex.EncodeToString([]byte(leakSecret))),
		"base64":    base64.StdEncoding.EncodeToString([]byte(leakSecret)),
		"signature": "Signature=" + hex.EncodeToString(h.Sum(nil)),
		"truncated": "SECRET-canary-8d2b7c41e9"[7:],
	} {
		l := newLeakScan()
		l.add(name, text)
		if len(l.findings()) == 0 {
			t.Errorf("the scan misses the %s form: %q", name, text)
		}
	}
	l := newLeakScan()
	l.add("clean", "Credentials{AccessKey: "+leakAK+", AccessSecret: <redacted>}")
	if f := l.findings(); len(f) != 0 {
		t.Errorf("the scan flags a clean text: %v", f)
	}
}

// leakLogHandler renders every record with a text and a JSON handler into
// one buffer (so that slog.Any values go through both fmt and JSON).
type leakLogHandler struct {
	mu   *sync.Mutex
	buf  *bytes.Buffer
	text slog.Handler
	json slog.Handler
	n    *int
}

func newLeakLogger() (*slog.Logger, func() (string, int)) {
	h := &leakLogHandler{mu: &sync.Mutex{}, buf: &bytes.Buffer{}, n: new(int)}
	opts := &slog.HandlerOptions{Level: slog.Level(-100)}
	h.text = slog.NewTextHandler(lockedWriter{h.mu, h.buf}, opts)
	h.json = slog.NewJSONHandler(lockedWriter{h.mu, h.buf}, opts)
	return slog.New(h), func() (string, int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.buf.String(), *h.n
	}
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (h *leakLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *leakLogHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.n++
	h.mu.Unlock()
	_ = h.text.Handle(ctx, r)
	return h.json.Handle(ctx, r)
}

func (h *leakLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.text, c.json = h.text.WithAttrs(as), h.json.WithAttrs(as)
	return &c
}

func (h *leakLogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.text, c.json = h.text.WithGroup(name), h.json.WithGroup(name)
	return &c
}

// leakMeter is a metric.Meter (the noop one, embedded) that records the
// name, description and unit of every instrument and the attributes of
// every measurement, including those of observable callbacks.
type leakMeter struct {
	noop.Meter
	mu        sync.Mutex
	texts     []string
	callbacks []metric.Callback
	int64CBs  []metric.Int64Callback
	measured  int
}

func (m *leakMeter) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.texts = append(m.texts, s)
}

func (m *leakMeter) attrs(name string, set attribute.Set) {
	m.mu.Lock()
	m.measured++
	m.mu.Unlock()
	var b strings.Builder
	b.WriteString(name)
	for _, kv := range set.ToSlice() {
		fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.Emit())
	}
	m.note(b.String())
}

func (m *leakMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	return leakI64Counter{name: name, m: m}, nil
}

func (m *leakMeter) Float64Counter(name string, opts ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	c := metric.NewFloat64CounterConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	return leakF64Counter{name: name, m: m}, nil
}

func (m *leakMeter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	c := metric.NewInt64UpDownCounterConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	return leakI64UpDown{name: name, m: m}, nil
}

func (m *leakMeter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	return leakI64Hist{name: name, m: m}, nil
}

func (m *leakMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	return leakF64Hist{name: name, m: m}, nil
}

func (m *leakMeter) Int64Gauge(name string, opts ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	c := metric.NewInt64GaugeConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	return leakI64Gauge{name: name, m: m}, nil
}

func (m *leakMeter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	c := metric.NewInt64ObservableGaugeConfig(opts...)
	m.note(name + " " + c.Description() + " " + c.Unit())
	m.mu.Lock()
	m.int64CBs = append(m.int64CBs, c.Callbacks()...)
	m.mu.Unlock()
	return leakI64ObsGauge{name: name}, nil
}

func (m *leakMeter) RegisterCallback(f metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	m.mu.Lock()
	m.callbacks = append(m.callbacks, f)
	m.mu.Unlock()
	return noop.Registration{}, nil
}

// collect runs every registered callback, recording what they observe.
func (m *leakMeter) collect() {
	m.mu.Lock()
	cbs, i64 := append([]metric.Callback(nil), m.callbacks...), append([]metric.Int64Callback(nil), m.int64CBs...)
	m.mu.Unlock()
	for _, f := range cbs {
		_ = f(context.Background(), leakObserver{m: m})
	}
	for _, f := range i64 {
		_ = f(context.Background(), leakI64Observer{m: m})
	}
}

func (m *leakMeter) scan(l *leakScan) int {
	m.collect()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.texts {
		l.add("metric", s)
	}
	return m.measured
}

type leakI64Counter struct {
	noop.Int64Counter
	name string
	m    *leakMeter
}

func (c leakI64Counter) Add(_ context.Context, _ int64, opts ...metric.AddOption) {
	c.m.attrs(c.name, metric.NewAddConfig(opts).Attributes())
}

type leakF64Counter struct {
	noop.Float64Counter
	name string
	m    *leakMeter
}

func (c leakF64Counter) Add(_ context.Context, _ float64, opts ...metric.AddOption) {
	c.m.attrs(c.name, metric.NewAddConfig(opts).Attributes())
}

type leakI64UpDown struct {
	noop.Int64UpDownCounter
	name string
	m    *leakMeter
}

func (c leakI64UpDown) Add(_ context.Context, _ int64, opts ...metric.AddOption) {
	c.m.attrs(c.name, metric.NewAddConfig(opts).Attributes())
}

type leakI64Hist struct {
	noop.Int64Histogram
	name string
	m    *leakMeter
}

func (c leakI64Hist) Record(_ context.Context, _ int64, opts ...metric.RecordOption) {
	c.m.attrs(c.name, metric.NewRecordConfig(opts).Attributes())
}

type leakF64Hist struct {
	noop.Float64Histogram
	name string
	m    *leakMeter
}

func (c leakF64Hist) Record(_ context.Context, _ float64, opts ...metric.RecordOption) {
	c.m.attrs(c.name, metric.NewRecordConfig(opts).Attributes())
}

type leakI64Gauge struct {
	noop.Int64Gauge
	name string
	m    *leakMeter
}

func (c leakI64Gauge) Record(_ context.Context, _ int64, opts ...metric.RecordOption) {
	c.m.attrs(c.name, metric.NewRecordConfig(opts).Attributes())
}

type leakI64ObsGauge struct {
	noop.Int64ObservableGauge
	name string
}

type leakObserver struct {
	noop.Observer
	m *leakMeter
}

func (o leakObserver) ObserveInt64(obs metric.Int64Observable, _ int64, opts ...metric.ObserveOption) {
	name := "observable"
	if g, ok := obs.(leakI64ObsGauge); ok {
		name = g.name
	}
	o.m.attrs(name, metric.NewObserveConfig(opts).Attributes())
}

func (o leakObserver) ObserveFloat64(_ metric.Float64Observable, _ float64, opts ...metric.ObserveOption) {
	o.m.attrs("observable", metric.NewObserveConfig(opts).Attributes())
}

type leakI64Observer struct {
	noop.Int64Observer
	m *leakMeter
}

func (o leakI64Observer) Observe(_ int64, opts ...metric.ObserveOption) {
	o.m.attrs("observable", metric.NewObserveConfig(opts).Attributes())
}

// TestNoSecretsAnywhere runs the library with the canary credentials through
// every error path it can reach (a dead endpoint, refused credentials, an
// unknown group and topic, an expired handle, ack pool and sink errors, a
// body that does not decode) and checks that the secret, the security token,
// their hex and base64 forms and every signature made with the secret appear
// in no log line (text and JSON handlers, of the library and of rmqfake), no
// error (%v, %+v, %#v, chain), no handle (binary, JSON, String, fmt), no
// message, no metric instrument or attribute, and no printed configuration.
func TestNoSecretsAnywhere(t *testing.T) {
	scan := newLeakScan()
	logger, logs := newLeakLogger()
	meter := &leakMeter{}
	prevDefault := slog.Default()
	slog.SetDefault(logger) // anything that logs to the default logger is scanned too
	t.Cleanup(func() { slog.SetDefault(prevDefault) })
	ctx := rmqtest.Context(t, 2*time.Minute)

	// ok accepts the canary credentials; other requires another key.
	fakeLogger, fakeLogs := newLeakLogger()
	clock := rmqfake.NewManualClock(time.Now())
	ok := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch(), rmqfake.Credentials(leakAK, leakSecret), rmqfake.Logger(fakeLogger), rmqfake.WithClock(clock))
	other := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch(), rmqfake.Credentials("AK-other", "other-secret"), rmqfake.Logger(fakeLogger))
	for _, s := range []*rmqfake.Server{ok, other} {
		if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateGroup("g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTopic("plain", rmqfake.TopicNormal); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateGroup("pg"); err != nil {
			t.Fatal(err)
		}
	}
	conn := func(ep string) rmqflow.Connection {
		return rmqflow.Connection{Endpoints: ep, Credentials: leakCreds, Logger: logger, Meter: meter, RequestTimeout: 2 * time.Second}
	}
	dead := "127.0.0.1:1"

	// The happy path first: handles, messages and acks of a signed session.
	srcCfg := rmqflow.SourceConfig{Connection: conn(ok.Addr()), Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(ok.Addr()), Topic: "main"})
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{`"a"`, `"b"`, `"c"`, "not json"} {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("lt-%d", i), Body: []byte(body), Keys: []string{"k"}, Properties: map[string]string{"p": "v"}}).Wait(ctx); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	src, err := rmqflow.NewSource(srcCfg, rmqflow.JSONDecoder[string]())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var got []*rmqflow.AckableMessage[string]
	for len(got) < 4 {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		got = append(got, m)
		scan.value("message", m)
		scan.value("metadata", m.Meta)
		scan.handle("handle", m.Handle)
		scan.err("decode error", m.Err)
	}
	decodeErrs := 0
	for _, m := range got {
		if m.Err != nil {
			decodeErrs++
		}
	}
	if decodeErrs != 1 {
		t.Errorf("%d messages failed to decode, want 1 (the decode-error path)", decodeErrs)
	}
	pool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn(ok.Addr())})
	if err != nil {
		t.Fatal(err)
	}
	scan.value("AckPoolStats", pool.Stats())
	// got[0]: renewed by the source's acker; got[1]: renewed by the pool.
	h0, err := src.Acker().ChangeInvisibleDuration(ctx, got[0].Handle, 20*time.Second)
	scan.err("source acker change", err)
	scan.handle("renewed handle", h0)
	h1, err := pool.ChangeInvisibleDuration(ctx, got[1].Handle, 20*time.Second)
	scan.err("pool change", err)
	scan.handle("pool-renewed handle", h1)
	// The invisibility of got[2] and got[3] ends (on the server's clock):
	// their handles are expired.
	clock.Advance(11 * time.Second)
	expired := 0
	for i, h := range []rmqflow.ReceiptHandle{got[2].Handle, got[3].Handle} {
		var err error
		if i == 0 {
			err = src.Acker().Ack(ctx, h)
		} else {
			err = pool.Ack(ctx, h)
		}
		scan.err("expired-handle ack", err)
		if errors.Is(err, client.ErrInvalidReceiptHandle) {
			expired++
		}
		_, err = pool.ChangeInvisibleDuration(ctx, h, time.Minute)
		scan.err("expired-handle change", err)
	}
	if expired != 2 {
		t.Errorf("%d of 2 expired-handle acks failed with INVALID_RECEIPT_HANDLE", expired)
	}
	scan.err("acker ack", src.Acker().Ack(ctx, h0))
	scan.err("pool ack", pool.Ack(ctx, h1))

	// Ack pool errors: a garbage broker handle, a malformed handle, a handle
	// naming another endpoint, an unknown group, a context already done.
	garbage := got[0].Handle
	garbage.Handle = "garbage-handle"
	scan.err("garbage handle ack", pool.Ack(ctx, garbage))
	scan.err("malformed handle ack", pool.Ack(ctx, rmqflow.ReceiptHandle{}))
	// A handle naming another endpoint: the pool must not send it there, so
	// that endpoint never sees a request signed with the canary secret.
	var foreignCalls sync.Map
	stopCount := other.Intercept("", func(c rmqfake.Call) rmqfake.Verdict {
		foreignCalls.Store(c.Method, true)
		return rmqfake.Verdict{}
	})
	foreign := got[0].Handle
	foreign.Endpoints = other.Addr()
	err = pool.Ack(ctx, foreign)
	scan.err("foreign endpoint ack", err)
	if err == nil {
		t.Error("an ack of a handle naming an endpoint the pool is not configured for succeeded")
	}
	_, err = pool.ChangeInvisibleDuration(ctx, foreign, time.Minute)
	scan.err("foreign endpoint change", err)
	stopCount()
	foreignCalls.Range(func(k, _ any) bool {
		t.Errorf("the pool for %s sent %v, signed with its secret, to %s named by a handle", ok.Addr(), k, other.Addr())
		return true
	})
	nogroup := got[0].Handle
	nogroup.Group = "no-such-group"
	scan.err("unknown group ack", pool.Ack(ctx, nogroup))
	done, cancel := context.WithCancel(ctx)
	cancel()
	scan.err("canceled ack", pool.Ack(done, got[0].Handle))
	fut := pool.AckAsync(ctx, garbage)
	select {
	case <-fut.Done():
		scan.err("async ack", fut.Err())
	case <-ctx.Done():
		t.Fatal("AckAsync never completed")
	}
	var bad rmqflow.ReceiptHandle
	scan.err("handle unmarshal", bad.UnmarshalBinary([]byte("not a handle")))
	scan.err("handle unmarshal json", bad.UnmarshalJSON([]byte(`{"endpoints":1}`)))
	_, err = rmqflow.ParseReceiptHandleJSON([]byte("{"))
	scan.err("handle parse json", err)

	// Refused credentials: a pool, a source and a sink on the server that
	// wants another key.
	refused := 0
	opool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn(other.Addr())})
	if err != nil {
		t.Fatal(err)
	}
	oh := got[0].Handle
	oh.Endpoints = other.Addr()
	err = opool.Ack(ctx, oh)
	scan.err("refused pool ack", err)
	if errors.Is(err, client.ErrUnauthorized) {
		refused++
	}
	_, err = opool.ChangeInvisibleDuration(ctx, oh, time.Minute)
	scan.err("refused pool change", err)
	osink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(other.Addr()), Topic: "main", MaxAttempts: 1})
	scan.err("refused sink start", err)
	if err == nil {
		_, err = osink.Write(ctx, rmqflow.Record{LiteTopic: "x", Body: []byte("x")}).Wait(ctx)
		scan.err("refused sink write", err)
		if errors.Is(err, client.ErrUnauthorized) {
			refused++
		}
		scan.err("refused sink close", osink.Close(ctx))
	} else if errors.Is(err, client.ErrUnauthorized) {
		refused++
	}
	err = sourceErr(t, ctx, rmqflow.SourceConfig{Connection: conn(other.Addr()), Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second})
	scan.err("refused source", err)
	if errors.Is(err, client.ErrUnauthorized) {
		refused++
	}
	if refused != 3 {
		t.Errorf("%d of 3 refused-credential paths (pool, sink, source) failed with UNAUTHORIZED", refused)
	}

	// Unknown group and topic, with accepted credentials.
	err = sourceErr(t, ctx, rmqflow.SourceConfig{Connection: conn(ok.Addr()), Mode: rmqflow.ModeSimple, Topic: "plain", Group: "no-such-group", AwaitDuration: 5 * time.Second})
	scan.err("unknown group source", err)
	err = sourceErr(t, ctx, rmqflow.SourceConfig{Connection: conn(ok.Addr()), Mode: rmqflow.ModeSimple, Topic: "no-such-topic", Group: "pg", AwaitDuration: 5 * time.Second})
	scan.err("unknown topic source", err)
	usink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(ok.Addr()), Topic: "no-such-topic", MaxAttempts: 1})
	scan.err("unknown topic sink start", err)
	if err == nil {
		_, err = usink.Write(ctx, rmqflow.Record{Body: []byte("x")}).Wait(ctx)
		scan.err("unknown topic sink write", err)
		scan.err("unknown topic sink close", usink.Close(ctx))
	}

	// Sink errors: a send the server fails, a closed sink.
	remove := ok.Intercept("SendMessage", func(rmqfake.Call) rmqfake.Verdict {
		return rmqfake.Verdict{Err: status.Error(codes.Unavailable, "injected")}
	})
	_, err = sink.Write(ctx, rmqflow.Record{LiteTopic: "x", Body: []byte("x")}).Wait(ctx)
	scan.err("failing sink write", err)
	remove()
	scan.err("sink close", sink.Close(ctx))
	_, err = sink.Write(ctx, rmqflow.Record{LiteTopic: "x", Body: []byte("x")}).Wait(ctx)
	scan.err("closed sink write", err)
	_, errs := sink.Send(ctx, rmqflow.Record{LiteTopic: "x", Body: []byte("x")})
	for _, e := range errs {
		scan.err("closed sink send", e)
	}

	// A dead endpoint: pool, sink, source (bounded by MaxOutage).
	dpool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn(dead)})
	if err != nil {
		t.Fatal(err)
	}
	dh := got[0].Handle
	dh.Endpoints = dead
	scan.err("dead pool ack", dpool.Ack(ctx, dh))
	_, err = dpool.ChangeInvisibleDuration(ctx, dh, time.Minute)
	scan.err("dead pool change", err)
	dsink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn(dead), Topic: "main", MaxAttempts: 2})
	scan.err("dead sink start", err)
	if err == nil {
		_, err = dsink.Write(ctx, rmqflow.Record{LiteTopic: "x", Body: []byte("x")}).Wait(ctx)
		scan.err("dead sink write", err)
		scan.err("dead sink close", dsink.Close(ctx))
	}
	err = sourceErr(t, ctx, rmqflow.SourceConfig{Connection: conn(dead), Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}, AwaitDuration: 5 * time.Second, MaxOutage: 2 * time.Second})
	scan.err("dead source", err)
	if err == nil {
		t.Error("a source on a dead endpoint reported no error")
	}
	_, err = rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn("not an endpoint"), Mode: rmqflow.ModeSimple, Topic: "t", Group: "g"}, rmqflow.StringDecoder())
	scan.err("bad endpoint source", err)
	_, err = rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn("not an endpoint")})
	scan.err("bad endpoint pool", err)

	// Closing and releasing.
	scan.err("source close", src.Close(ctx))
	scan.err("acker after close", src.Acker().Ack(ctx, got[0].Handle))
	for _, p := range []*rmqflow.AckPool{pool, opool, dpool} {
		scan.value("pool stats", p.Stats())
		p.Release(ctx)
	}
	scan.err("released pool ack", pool.Ack(ctx, got[0].Handle))

	if n := meter.scan(scan); n == 0 {
		t.Error("the meter recorded no measurement: metrics were not exercised")
	}
	text, n := logs()
	scan.add("library logs", text)
	if n == 0 {
		t.Error("no log line was written: the logs were not exercised")
	}
	ftext, fn := fakeLogs()
	scan.add("rmqfake logs", ftext)
	t.Logf("%d library log records, %d rmqfake log records", n, fn)
	scan.check(t, 100)
}

// sourceErr starts a source and returns the error of Start or of the first
// Next, or nil if neither comes within 8 s (whether an error reaches the
// caller is TestSourcePermanentReceiveErrors' concern; this test scans what
// the path writes and returns, the logs of its retries included).
func sourceErr(t *testing.T, ctx context.Context, cfg rmqflow.SourceConfig) error {
	t.Helper()
	src, err := rmqflow.NewSource(cfg, rmqflow.StringDecoder())
	if err != nil {
		return err
	}
	defer func() { _ = src.Close(context.Background()) }()
	if err := src.Start(ctx); err != nil {
		return err
	}
	nctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	m, err := src.Next(nctx)
	if m != nil {
		t.Errorf("a message from a failing source: %v", m.Value)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Logf("source %s/%s on %s: no error within 8 s", cfg.Topic, cfg.Group, cfg.Endpoints)
		return nil
	}
	return err
}

// TestNoSecretsInPrintedConfig: a user who prints or logs a configuration
// (fmt, slog text and JSON handlers, encoding/json) prints no secret.
//
// client.Credentials redacts itself for fmt, encoding/json and log/slog;
// before it did for JSON and slog, this test found AccessSecret and
// SecurityToken in clear.
func TestNoSecretsInPrintedConfig(t *testing.T) {
	scan := newLeakScan()
	logger, logs := newLeakLogger()
	conn := rmqflow.Connection{Endpoints: "127.0.0.1:1", Credentials: leakCreds}
	src := rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: "main", Group: "g"}}}
	scan.value("Connection", conn)
	scan.value("SourceConfig", src)
	scan.value("SinkConfig", rmqflow.SinkConfig{Connection: conn, Topic: "main"})
	scan.value("AckPoolConfig", rmqflow.AckPoolConfig{Connection: conn})
	scan.value("Credentials", leakCreds)
	scan.value("client.Config", client.Config{Endpoints: "127.0.0.1:1", Credentials: leakCreds})
	logger.Info("config as a user logs it", "conn", conn, "creds", leakCreds, "source", src)
	text, _ := logs()
	scan.add("logs", text)
	b, err := json.Marshal(leakCreds)
	if err != nil {
		t.Fatal(err)
	}
	scan.add("json.Marshal(Credentials)", string(b))
	scan.check(t, 10)
}

// TestNoSecretsRealBroker runs the paths the real broker can take with the
// canary credentials (it does not check signatures, so they are accepted):
// send, receive, every handle encoding, acks, an expired handle, a garbage
// handle, an unknown group (source and ack) and an unknown topic (sink), and
// scans logs, errors, handles, messages and metrics as TestNoSecretsAnywhere
// does: the proxy's error messages must not echo the signature either.
func TestNoSecretsRealBroker(t *testing.T) {
	ep := rmqtest.Endpoint(t)
	const topic, group = "rmqflow-lite-secrets", "rmqflow-lite-secrets-g"
	scan := newLeakScan()
	logger, logs := newLeakLogger()
	meter := &leakMeter{}
	ctx := rmqtest.Context(t, 2*time.Minute)
	conn := rmqflow.Connection{Endpoints: ep, Credentials: leakCreds, Logger: logger, Meter: meter}

	src, err := rmqflow.NewSource(rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: topic, Group: group}},
		AwaitDuration: 5 * time.Second, InvisibleDuration: 10 * time.Second}, rmqflow.JSONDecoder[string]())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { scan.err("source close", src.Close(context.Background())) }()
	sink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	run := rmqtest.Unique("secrets")
	for i, body := range []string{`"ok"`, "not json"} {
		if _, err := sink.Write(ctx, rmqflow.Record{LiteTopic: fmt.Sprintf("%s-%d", run, i), Body: []byte(body)}).Wait(ctx); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	pool, err := rmqflow.AcquireAckPool(rmqflow.AckPoolConfig{Connection: conn})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(context.Background())
	var mine []*rmqflow.AckableMessage[string]
	for len(mine) < 2 {
		m, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if !strings.HasPrefix(m.Meta.LiteTopic, run) {
			_ = pool.Ack(ctx, m.Handle) // left over by an earlier run
			continue
		}
		mine = append(mine, m)
		scan.value("message", m)
		scan.handle("handle", m.Handle)
		scan.err("decode error", m.Err)
	}
	garbage := mine[0].Handle
	garbage.Handle = "garbage-handle"
	scan.err("garbage handle ack", pool.Ack(ctx, garbage))
	nogroup := mine[0].Handle
	nogroup.Group = "rmqflow-no-such-group"
	scan.err("unknown group ack", pool.Ack(ctx, nogroup))
	scan.err("ack", pool.Ack(ctx, mine[0].Handle))
	// The broker's clock: mine[1]'s invisibility (10 s from its receipt) ends.
	time.Sleep(11 * time.Second)
	err = pool.Ack(ctx, mine[1].Handle)
	scan.err("expired handle ack", err)
	if !errors.Is(err, client.ErrInvalidReceiptHandle) {
		t.Errorf("ack of an expired handle: %v, want INVALID_RECEIPT_HANDLE", err)
	}
	_, err = pool.ChangeInvisibleDuration(ctx, mine[1].Handle, time.Minute)
	scan.err("expired handle change", err)

	err = sourceErr(t, ctx, rmqflow.SourceConfig{Connection: conn, Lite: []rmqflow.LiteBinding{{Topic: topic, Group: "rmqflow-no-such-group"}}, AwaitDuration: 5 * time.Second})
	scan.err("unknown group source", err)
	usink, err := rmqflow.NewSink(ctx, rmqflow.SinkConfig{Connection: conn, Topic: "rmqflow-no-such-topic", MaxAttempts: 1})
	scan.err("unknown topic sink start", err)
	if err == nil {
		_, err = usink.Write(ctx, rmqflow.Record{Body: []byte("x")}).Wait(ctx)
		scan.err("unknown topic sink write", err)
		if err == nil {
			t.Error("a send to an unknown topic succeeded")
		}
		scan.err("unknown topic sink close", usink.Close(ctx))
	}
	scan.err("sink close", sink.Close(ctx))

	if n := meter.scan(scan); n == 0 {
		t.Error("the meter recorded no measurement")
	}
	text, n := logs()
	scan.add("library logs", text)
	t.Logf("%d log records", n)
	scan.check(t, 30)
}
