package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Version is the client version sent in x-mq-client-version.
const Version = "rmqflow-0.1.0"

// maxMessageSize bounds one gRPC message in either direction. RocketMQ caps a
// message body at 4 MiB; a send batch of several such messages needs more.
const maxMessageSize = 130 << 20

// ClientType is the role a session announces to the broker in Telemetry
// settings and heartbeats.
type ClientType int32

const (
	// Producer sends messages.
	Producer = ClientType(v2.ClientType_PRODUCER)
	// SimpleConsumer receives from normal topics with ReceiveMessage.
	SimpleConsumer = ClientType(v2.ClientType_SIMPLE_CONSUMER)
	// LiteSimpleConsumer receives from LITE main topics with ReceiveMessage.
	LiteSimpleConsumer = ClientType(v2.ClientType_LITE_SIMPLE_CONSUMER)
)

func (t ClientType) String() string { return v2.ClientType(t).String() }

// Client is a connection to one RocketMQ 5 proxy access point under one client
// id. It is safe for concurrent use. Every RPC is bounded by the context's
// deadline or, when the context has none, by Config.RequestTimeout (receives by
// their long-polling timeout plus RequestTimeout).
type Client struct {
	cfg       Config // with Credentials zeroed: they live behind creds only
	creds     *Credentials
	endpoints Endpoints
	conn      *grpc.ClientConn
	stub      v2.MessagingServiceClient
	id        string
	log       *slog.Logger

	routes sync.Map // topic name -> *routeEntry

	mu       sync.Mutex
	closed   bool
	sessions map[*Session]struct{}
}

var clientSeq atomic.Int64

func newClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s@%d@%d@%08x", host, os.Getpid(), clientSeq.Add(1), rand.Uint32())
}

// New validates cfg and creates a client. It does not dial: the connection is
// made lazily by the first RPC, whose deadline bounds the attempt.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	eps, _ := ParseEndpoints(cfg.Endpoints)
	if cfg.ClientID == "" {
		cfg.ClientID = newClientID()
	}

	r := manual.NewBuilderWithScheme("rmqflow")
	addrs := make([]resolver.Address, len(eps))
	for i, a := range eps {
		addrs[i] = resolver.Address{Addr: a.String()}
	}
	r.InitialState(resolver.State{Addresses: addrs})

	var tc credentials.TransportCredentials = insecure.NewCredentials()
	if cfg.TLS != nil {
		tc = credentials.NewTLS(cfg.TLS)
	}
	// The target only names the connection (the manual resolver gives the
	// addresses); a '%' (an IPv6 zone) must be escaped to parse as a URL.
	conn, err := grpc.NewClient("rmqflow:///"+strings.ReplaceAll(eps.String(), "%", "%25"),
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(tc),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// Reconnect quickly after a broker restart (gRPC's default starts at
		// 1 s); calls still fail fast while the broker is away.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, &ConfigError{Option: "Endpoints", Reason: err.Error()}
	}
	creds := cfg.Credentials
	cfg.Credentials = Credentials{}
	c := &Client{
		cfg:       cfg,
		creds:     &creds,
		endpoints: eps,
		conn:      conn,
		stub:      v2.NewMessagingServiceClient(conn),
		id:        cfg.ClientID,
		sessions:  map[*Session]struct{}{},
	}
	c.log = cfg.Logger.With("client_id", c.id, "endpoints", eps.String())
	return c, nil
}

// Conn returns the underlying gRPC connection, for calls this package does not
// wrap. Use OutgoingContext to attach the request headers and signature.
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// OutgoingContext returns ctx with this client's request headers (client id,
// namespace, signature) attached, for raw calls on Conn.
func (c *Client) OutgoingContext(ctx context.Context) context.Context { return c.sign(ctx) }

// String describes the client without its credentials.
func (c *Client) String() string {
	return "rocketmq.Client{id: " + c.id + ", endpoints: " + c.endpoints.String() + "}"
}

// GoString is String: %#v must not reach the credentials either.
func (c *Client) GoString() string { return c.String() }

// ID returns the client id sent in x-mq-client-id.
func (c *Client) ID() string { return c.id }

// Endpoints returns the parsed access point.
func (c *Client) Endpoints() Endpoints { return c.endpoints }

// Namespace returns the configured namespace.
func (c *Client) Namespace() string { return c.cfg.Namespace }

// RequestTimeout returns the effective per-RPC timeout.
func (c *Client) RequestTimeout() time.Duration { return c.cfg.RequestTimeout }

// Close ends every open session (each sends NotifyClientTermination), then
// closes the connection. It is idempotent. ctx bounds the termination notices.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	sessions := make([]*Session, 0, len(c.sessions))
	for s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	var first error
	for _, s := range sessions {
		if err := s.close(ctx); err != nil && first == nil {
			first = err
		}
	}
	if err := c.conn.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) resource(name string) *v2.Resource {
	return &v2.Resource{ResourceNamespace: c.cfg.Namespace, Name: name}
}

// callCtx applies the default timeout (when ctx has no earlier deadline) and
// attaches the request headers.
func (c *Client) callCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	cancel := context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	return c.sign(ctx), cancel
}

const dateTimeLayout = "20060102T150405Z"

// sign attaches the x-mq-* headers and, with credentials, the authorization
// header: "MQv2-HMAC-SHA1 Credential=<AK>//Rocketmq, SignedHeaders=x-mq-date-time,
// Signature=<hex HMAC-SHA1(secret, date-time)>", as the official clients send.
func (c *Client) sign(ctx context.Context) context.Context {
	now := time.Now().UTC().Format(dateTimeLayout)
	kv := make([]string, 0, 18)
	kv = append(kv,
		"x-mq-language", "GO",
		"x-mq-protocol", "v2",
		"x-mq-client-version", Version,
		"x-mq-request-id", requestID(),
		"x-mq-client-id", c.id,
		"x-mq-date-time", now,
	)
	if c.cfg.Namespace != "" {
		kv = append(kv, "x-mq-namespace", c.cfg.Namespace)
	}
	if cr := *c.creds; cr.AccessKey != "" {
		h := hmac.New(sha1.New, []byte(cr.AccessSecret))
		h.Write([]byte(now))
		kv = append(kv, "authorization", "MQv2-HMAC-SHA1 Credential="+cr.AccessKey+
			"//Rocketmq, SignedHeaders=x-mq-date-time, Signature="+hex.EncodeToString(h.Sum(nil)))
		if cr.SecurityToken != "" {
			kv = append(kv, "x-mq-session-token", cr.SecurityToken)
		}
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func requestID() string {
	var b [16]byte
	x, y := rand.Uint64(), rand.Uint64()
	for i := 0; i < 8; i++ {
		b[i] = byte(x >> (8 * i))
		b[8+i] = byte(y >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

func (c *Client) wrap(op string, err error) error {
	return &transportError{op: op, endpoint: c.endpoints.String(), err: err}
}

// unary runs one unary RPC with the default deadline, mapping a transport
// failure to a wrapped error and a response status to a *StatusError.
func unary[Req, Resp any](c *Client, ctx context.Context, op string, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, st func(Resp) *v2.Status) (Resp, error) {
	var zero Resp
	if c.isClosed() {
		return zero, ErrClosed
	}
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := call(cctx, req)
	if err != nil {
		return zero, c.wrap(op, err)
	}
	if err := checkStatus(op, st(resp)); err != nil {
		return resp, err
	}
	return resp, nil
}

// Heartbeat tells the broker this client (of the given type, in the given group;
// group may be empty for producers) is alive.
func (c *Client) Heartbeat(ctx context.Context, group string, typ ClientType) error {
	req := &v2.HeartbeatRequest{ClientType: v2.ClientType(typ)}
	if group != "" {
		req.Group = c.resource(group)
	}
	_, err := unary(c, ctx, "Heartbeat", c.stub.Heartbeat, req, (*v2.HeartbeatResponse).GetStatus)
	return err
}

// NotifyClientTermination tells the broker this client leaves group (empty for
// producers). Sessions send it on Close; call it directly only without sessions.
func (c *Client) NotifyClientTermination(ctx context.Context, group string) error {
	req := &v2.NotifyClientTerminationRequest{}
	if group != "" {
		req.Group = c.resource(group)
	}
	_, err := unary(c, ctx, "NotifyClientTermination", c.stub.NotifyClientTermination, req, (*v2.NotifyClientTerminationResponse).GetStatus)
	return err
}

// routeTTL is how long a route stays cached before QueryRoute is asked again.
const routeTTL = 30 * time.Second

type routeEntry struct {
	queues  []*v2.MessageQueue
	fetched time.Time
	next    atomic.Uint32 // round-robin cursor over readable queues
}

// QueryRoute returns the message queues of topic as the proxy reports them.
func (c *Client) QueryRoute(ctx context.Context, topic string) ([]*v2.MessageQueue, error) {
	if topic == "" {
		return nil, &ConfigError{Option: "topic", Reason: "empty"}
	}
	req := &v2.QueryRouteRequest{Topic: c.resource(topic), Endpoints: c.endpoints.proto()}
	resp, err := unary(c, ctx, "QueryRoute", c.stub.QueryRoute, req, (*v2.QueryRouteResponse).GetStatus)
	if err != nil {
		return nil, err
	}
	return resp.GetMessageQueues(), nil
}

// TopicMessageTypes returns the message types topic accepts, as its route
// names them (accept_message_types: "NORMAL", "FIFO", "DELAY",
// "TRANSACTION", "LITE"), each once; none when the route names none.
func (c *Client) TopicMessageTypes(ctx context.Context, topic string) ([]string, error) {
	qs, err := c.QueryRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	var types []string
	for _, q := range qs {
		for _, t := range q.GetAcceptMessageTypes() {
			if n := t.String(); t != v2.MessageType_MESSAGE_TYPE_UNSPECIFIED && !slices.Contains(types, n) {
				types = append(types, n)
			}
		}
	}
	return types, nil
}

// route returns the cached route of topic, refreshing it when stale.
func (c *Client) route(ctx context.Context, topic string) (*routeEntry, error) {
	if v, ok := c.routes.Load(topic); ok {
		e := v.(*routeEntry)
		if time.Since(e.fetched) < routeTTL {
			return e, nil
		}
	}
	qs, err := c.QueryRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	e := &routeEntry{queues: qs, fetched: time.Now()}
	c.routes.Store(topic, e)
	return e, nil
}

func readable(q *v2.MessageQueue) bool {
	p := q.GetPermission()
	return (p == v2.Permission_READ || p == v2.Permission_READ_WRITE) && q.GetBroker().GetId() == 0
}

func writable(q *v2.MessageQueue) bool {
	p := q.GetPermission()
	return (p == v2.Permission_WRITE || p == v2.Permission_READ_WRITE) && q.GetBroker().GetId() == 0
}

// pick returns the next queue (round-robin) that satisfies ok, or nil.
func (e *routeEntry) pick(ok func(*v2.MessageQueue) bool) *v2.MessageQueue {
	n := len(e.queues)
	start := e.next.Add(1)
	for i := 0; i < n; i++ {
		q := e.queues[(start+uint32(i))%uint32(n)]
		if ok(q) {
			return q
		}
	}
	return nil
}

// first returns the first queue that satisfies ok, or nil.
func (e *routeEntry) first(ok func(*v2.MessageQueue) bool) *v2.MessageQueue {
	for _, q := range e.queues {
		if ok(q) {
			return q
		}
	}
	return nil
}
