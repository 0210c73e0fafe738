package rmqfake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
)

// DefaultAddr is where a Server listens when no address is given: a random
// port on the loopback interface.
const DefaultAddr = "127.0.0.1:0"

// Server is an in-process RocketMQ 5 proxy and broker serving the gRPC
// MessagingService on one address. Create it with [New] (or [NewForTest]),
// point clients at [Server.Addr], and [Server.Stop] it when done. All methods
// are safe for concurrent use.
type Server struct {
	cfg  config
	b    *broker
	ctl  *controls
	auth *authenticator
	log  *slog.Logger
	tls  *serverTLS

	addr string // set once by New; Restart keeps it

	mu      sync.Mutex // guards the fields below; never taken by RPC handlers
	gs      *grpc.Server
	serving chan struct{} // closed when the current Serve returns
	stopped bool
}

type config struct {
	addr        string
	clock       Clock
	auto        bool
	creds       map[string]string
	minLiteTTL  *time.Duration
	ttlInterval time.Duration
	users       map[string]userConfig
	acl         []ACLEntry
	fixtures    []Fixture
	logger      *slog.Logger
	// dispatch: FastLiteDispatch and the lite dispatch knobs (dispatch.go).
	dispatch     dispatchConfig
	project      bool
	projectUsers bool
	limits       limits
}

// Option configures a Server.
type Option func(*config)

// Addr sets the listen address ("host:port"). The default is DefaultAddr.
func Addr(addr string) Option { return func(c *config) { c.addr = addr } }

// WithClock sets the clock the server's timers follow. The default is
// RealClock(); tests pass a *ManualClock.
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// AutoCreate makes the server create what clients use without asking: a topic
// on first send (typed after the message: lite, FIFO, delay or normal), on
// QueryRoute or on receive; a group on first use (bound to the topic and
// wildcard for a lite consumer, otherwise normal, with the default 16
// retries). For development; tests should create what they use.
func AutoCreate() Option { return func(c *config) { c.auto = true } }

// Credentials makes the server require requests signed with this access key
// and secret (HMAC-SHA1 of x-mq-date-time, as the RocketMQ clients sign).
// Repeat it to accept several keys. Without it, any request is accepted.
func Credentials(accessKey, secretKey string) Option {
	return func(c *config) {
		if c.creds == nil {
			c.creds = map[string]string{}
		}
		c.creds[accessKey] = secretKey
	}
}

// WithFixtures creates these topics and groups at start.
func WithFixtures(fs ...Fixture) Option {
	return func(c *config) { c.fixtures = append(c.fixtures, fs...) }
}

// WithProjectFixtures creates, at start, the topics and groups of
// scripts/rocketmq/fixtures.txt (see ProjectFixtures): the fixtures the
// project's tests use on the real broker. New fails if the file is not found.
func WithProjectFixtures() Option { return func(c *config) { c.project = true } }

// Logger sets where the server logs (nil: discard).
func Logger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New starts a server and returns once it accepts connections.
func New(opts ...Option) (*Server, error) {
	cfg := config{addr: DefaultAddr, clock: RealClock(), limits: defaultLimits(), dispatch: defaultDispatch()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.clock == nil {
		cfg.clock = RealClock()
	}
	if cfg.project {
		fs, err := ProjectFixtures()
		if err != nil {
			return nil, err
		}
		cfg.fixtures = append(fs, cfg.fixtures...)
	}
	if cfg.projectUsers {
		path, err := projectFile(ProjectUsersFile)
		if err != nil {
			return nil, err
		}
		uo, err := LoadUsers(path)
		if err != nil {
			return nil, err
		}
		for _, o := range uo {
			o(&cfg)
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rules, err := parseACL(cfg.acl)
	if err != nil {
		return nil, err
	}
	auth := newAuthenticator(cfg.creds, cfg.users, rules)
	s := &Server{
		cfg:  cfg,
		b:    newBroker(cfg.clock, cfg.auto, cfg.dispatch),
		ctl:  newControls(),
		auth: auth,
		log:  cfg.logger,
		tls:  &serverTLS{},
	}
	s.b.lim = limiter{limits: cfg.limits}
	s.b.ttl.min, s.b.ttl.interval = DefaultMinLiteTTL.Milliseconds(), DefaultLiteTTLCheckInterval.Milliseconds()
	if cfg.minLiteTTL != nil {
		s.b.ttl.min = max(cfg.minLiteTTL.Milliseconds(), 0)
	}
	if cfg.ttlInterval > 0 {
		s.b.ttl.interval = cfg.ttlInterval.Milliseconds()
	}
	if err := s.ApplyFixtures(cfg.fixtures); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("rmqfake: listen on %s: %w", cfg.addr, err)
	}
	s.addr = lis.Addr().String()
	s.serve(lis)
	return s, nil
}

func (s *Server) serve(lis net.Listener) {
	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(130<<20),
		grpc.MaxSendMsgSize(130<<20),
		// gRPC's default pool hands a 1 MiB buffer (cleared on every Get) to
		// any message above 32 KiB, such as a SendMessage of 32 1-KiB
		// messages; finer tiers clear less.
		experimental.BufferPool(bufferPool),
		// Handlers run on long-lived goroutines whose stacks have grown
		// already, instead of a new goroutine per RPC growing its stack
		// while it decodes the request (gRPC spawns one when all are busy,
		// as with parked long polls).
		grpc.NumStreamWorkers(streamWorkers),
		grpc.WaitForHandlers(true),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	v2.RegisterMessagingServiceServer(gs, &service{s: s})
	done := make(chan struct{})
	s.gs, s.serving = gs, done
	go func() {
		defer close(done)
		if err := gs.Serve(&sniffListener{Listener: lis, tls: s.tls}); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("rmqfake: serve", "err", err)
		}
	}()
}

// bufferPool is the gRPC buffer pool of every Server: power-of-two tiers
// from 256 B to 4 MiB.
var bufferPool = func() mem.BufferPool {
	var sizes []int
	for s := 256; s <= 4<<20; s *= 2 {
		sizes = append(sizes, s)
	}
	return mem.NewTieredBufferPool(sizes...)
}()

// streamWorkers is how many goroutines of a Server run RPC handlers.
const streamWorkers = 16

// Addr returns the address clients connect to ("127.0.0.1:port").
func (s *Server) Addr() string { return s.addr }

// Clock returns the server's clock.
func (s *Server) Clock() Clock { return s.cfg.clock }

// Stop ends every RPC, closes the listener and stops every timer. It returns
// once all handlers have returned. It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.b.locked(s.b.close)
	s.gs.Stop()
	<-s.serving
}

// Restart emulates a broker restart on the same address: every connection
// and RPC is cut, client sessions (Telemetry settings) are forgotten so that
// clients must send them again, and in-flight messages become deliverable
// again (normal messages with one more attempt, as the broker's revive does;
// lite and FIFO messages from their committed offset). Stored messages,
// topics, groups, committed offsets and lite subscriptions are kept.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("rmqfake: restart of a stopped server")
	}
	s.b.locked(func() { s.b.restarting = true })
	s.gs.Stop()
	<-s.serving
	s.b.locked(func() {
		defer func() { s.b.restarting = false }()
		s.b.restart()
	})
	lis, err := listenRetry(s.addr)
	if err != nil {
		s.stopped = true
		s.b.locked(s.b.close)
		return fmt.Errorf("rmqfake: restart: listen on %s: %w", s.addr, err)
	}
	s.serve(lis)
	return nil
}

// listenRetry listens on addr, retrying briefly while the old socket lets go.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50; i++ {
		var lis net.Listener
		if lis, err = net.Listen("tcp", addr); err == nil {
			return lis, nil
		}
		time.Sleep(20 * time.Millisecond) // the port is released asynchronously by the kernel; no event to wait for
	}
	return nil, err
}

// WaitForPollers blocks until at least n ReceiveMessage calls are parked in
// long polling, or ctx ends. With a ManualClock, a test calls it before
// Advance so that the polls it advances past have started.
func (s *Server) WaitForPollers(ctx context.Context, n int) error {
	return s.WaitFor(ctx, func(st Stats) bool { return st.Pollers >= n })
}

// WaitFor blocks until cond holds for the server's Stats, or ctx ends. cond
// is evaluated now and again whenever a long poll parks or leaves, or a
// client's session (Telemetry settings) comes or goes; it must not block.
func (s *Server) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	for {
		var ch chan struct{}
		s.b.locked(func() { ch = s.b.changed })
		if cond(s.Stats()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
