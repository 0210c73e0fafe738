package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/internal/backoff"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Subscription is one topic a consumer session reads, with its filter.
type Subscription struct {
	Topic  string
	Filter Filter
}

// SessionConfig describes the role a session announces in its Telemetry
// settings.
type SessionConfig struct {
	// Type is Producer, SimpleConsumer or LiteSimpleConsumer.
	Type ClientType
	// Group is the consumer group; empty for producers.
	Group string
	// Topics are the topics a producer publishes to (may be empty).
	Topics []string
	// Subscriptions are the topics a consumer reads. For LiteSimpleConsumer,
	// the LITE main topics the group is bound to.
	Subscriptions []Subscription
	// LongPollingTimeout is announced for consumers. Zero means
	// DefaultLongPollingTimeout.
	LongPollingTimeout time.Duration
	// LiteWildcard makes a LiteSimpleConsumer session keep a wildcard
	// subscription fresh: a COMPLETE_ADD of its exact lite topics (none for a
	// pure wildcard group) for every subscribed main topic, at start, every
	// Config.LiteSyncInterval, and at once whenever the Telemetry stream
	// reconnects (retried until it succeeds).
	LiteWildcard bool
}

// Session is an open Telemetry stream plus the periodic work a client of a
// given role does: heartbeats and, for lite consumers, subscription syncs. The
// stream is re-opened with backoff (100 ms doubling to 5 s) when it breaks,
// and a wildcard lite session then syncs its subscription again at once. Close
// it (or the Client) to stop its goroutines and send NotifyClientTermination.
type Session struct {
	c   *Client
	cfg SessionConfig

	subMu    sync.Mutex // Rejoin against SubscribeLite and UnsubscribeLite
	mu       sync.Mutex
	settings *v2.Settings
	exact    map[string]map[string]struct{} // main topic -> exact lite topics
	lastErr  error

	// wireType is the client type announced on the wire. A LiteSimpleConsumer
	// session falls back to LITE_PUSH_CONSUMER on brokers older than 5.5.1,
	// whose proxy knows no LITE_SIMPLE_CONSUMER (see docs/broker-semantics.md).
	wireType v2.ClientType

	firstSettings chan struct{}
	firstOnce     sync.Once
	// resync is signalled when the broker answers the settings of a
	// re-opened stream: the periodic goroutine then syncs lite
	// subscriptions at once instead of on its next tick.
	resync    chan struct{}
	life      context.Context // ends when the session closes
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// OpenSession opens a Telemetry stream, sends this client's settings and waits
// for the broker's answer (bounded by ctx and RequestTimeout). It returns an
// error when the broker rejects the settings or does not answer.
func (c *Client) OpenSession(ctx context.Context, cfg SessionConfig) (*Session, error) {
	switch cfg.Type {
	case Producer:
	case SimpleConsumer, LiteSimpleConsumer:
		if cfg.Group == "" {
			return nil, &ConfigError{Option: "SessionConfig.Group", Reason: "required for consumers"}
		}
		if len(cfg.Subscriptions) == 0 {
			return nil, &ConfigError{Option: "SessionConfig.Subscriptions", Reason: "a consumer needs at least one topic"}
		}
	default:
		return nil, &ConfigError{Option: "SessionConfig.Type", Reason: fmt.Sprintf("unsupported client type %v", cfg.Type)}
	}
	if cfg.LiteWildcard && cfg.Type != LiteSimpleConsumer {
		return nil, &ConfigError{Option: "SessionConfig.LiteWildcard", Reason: "only for LiteSimpleConsumer"}
	}
	if cfg.LongPollingTimeout == 0 {
		cfg.LongPollingTimeout = DefaultLongPollingTimeout
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if len(c.sessions) > 0 {
		c.mu.Unlock()
		// The proxy keeps one settings record per client id: a second role
		// would silently replace the first.
		return nil, &ConfigError{Option: "SessionConfig", Reason: "this client already has an open session; the broker keeps one role per client id, so use another Client"}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Session{
		c:             c,
		cfg:           cfg,
		exact:         map[string]map[string]struct{}{},
		firstSettings: make(chan struct{}),
		resync:        make(chan struct{}, 1),
		life:          runCtx,
		cancel:        cancel,
		done:          make(chan struct{}),
		wireType:      v2.ClientType(cfg.Type),
	}
	c.sessions[s] = struct{}{}
	c.mu.Unlock()

	go s.run(runCtx)

	wait, wcancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer wcancel()
	select {
	case <-s.firstSettings:
	case <-wait.Done():
	case <-s.done: // closed meanwhile (Client.Close)
	}
	s.mu.Lock()
	got, lastErr := s.settings != nil, s.lastErr
	s.mu.Unlock()
	if !got {
		_ = s.shutdown(ctx, false)
		if c.isClosed() {
			return nil, ErrClosed
		}
		if lastErr == nil {
			lastErr = wait.Err()
		}
		return nil, fmt.Errorf("rocketmq: telemetry settings handshake: %w", lastErr)
	}
	if cfg.LiteWildcard {
		if err := s.syncAll(ctx); err != nil {
			_ = s.close(ctx)
			return nil, err
		}
	}
	return s, nil
}

// Settings returns the settings the broker sent last (nil before the first).
func (s *Session) Settings() *v2.Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings
}

// Close stops the session and sends NotifyClientTermination (bounded by ctx).
func (s *Session) Close(ctx context.Context) error { return s.close(ctx) }

func (s *Session) close(ctx context.Context) error { return s.shutdown(ctx, true) }

// shutdown stops the session's goroutines and, when notify is set, tells the
// broker this client leaves.
func (s *Session) shutdown(ctx context.Context, notify bool) error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		// A Rejoin in progress sees the session's end and returns; none
		// starts after this, so no COMPLETE_ADD follows the termination.
		s.subMu.Lock()
		s.subMu.Unlock() //nolint:staticcheck // a barrier, not a critical section
		s.c.mu.Lock()
		delete(s.c.sessions, s)
		s.c.mu.Unlock()
		if notify {
			// The connection is still open here: Client.Close closes it after
			// its sessions.
			s.closeErr = s.c.notifyTermination(ctx, s.cfg.Group)
		}
	})
	return s.closeErr
}

func (c *Client) notifyTermination(ctx context.Context, group string) error {
	req := &v2.NotifyClientTerminationRequest{}
	if group != "" {
		req.Group = c.resource(group)
	}
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := c.stub.NotifyClientTermination(cctx, req)
	if err != nil {
		return c.wrap("NotifyClientTermination", err)
	}
	return checkStatus("NotifyClientTermination", resp.GetStatus())
}

func (s *Session) settingsCommand() *v2.TelemetryCommand {
	s.mu.Lock()
	typ := s.wireType
	s.mu.Unlock()
	st := &v2.Settings{
		ClientType:     &typ,
		AccessPoint:    s.c.endpoints.proto(),
		RequestTimeout: durationpb.New(s.c.cfg.RequestTimeout),
		UserAgent: &v2.UA{
			Language: v2.Language_GOLANG,
			Version:  Version,
			Platform: runtime.GOOS + "/" + runtime.GOARCH,
			Hostname: hostname(),
		},
	}
	switch s.cfg.Type {
	case Producer:
		pub := &v2.Publishing{}
		for _, t := range s.cfg.Topics {
			pub.Topics = append(pub.Topics, s.c.resource(t))
		}
		st.PubSub = &v2.Settings_Publishing{Publishing: pub}
	default:
		sub := &v2.Subscription{
			Group:              s.c.resource(s.cfg.Group),
			LongPollingTimeout: durationpb.New(s.cfg.LongPollingTimeout),
		}
		for _, e := range s.cfg.Subscriptions {
			sub.Subscriptions = append(sub.Subscriptions, &v2.SubscriptionEntry{
				Topic:      s.c.resource(e.Topic),
				Expression: e.Filter.proto(),
			})
		}
		st.PubSub = &v2.Settings_Subscription{Subscription: sub}
	}
	return &v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: st}}
}

// run keeps the Telemetry stream open and does the periodic work until ctx ends.
func (s *Session) run(ctx context.Context) {
	defer close(s.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.periodic(ctx)
	}()
	bo := backoff.New(100*time.Millisecond, telemetryBackoffMax)
	for ctx.Err() == nil {
		healthy, err := s.stream(ctx)
		if ctx.Err() != nil {
			break
		}
		if s.fallBack(err) {
			continue
		}
		if healthy {
			bo.Reset()
		}
		s.mu.Lock()
		s.lastErr = err
		neverUp := s.settings == nil
		s.mu.Unlock()
		if neverUp && permanent(err) {
			// The broker refused the handshake (unknown group, bad
			// credentials): fail OpenSession now instead of retrying.
			s.c.log.Warn("rocketmq: telemetry handshake refused; not reopening", "group", s.cfg.Group, "err", err)
			s.firstOnce.Do(func() { close(s.firstSettings) })
			break
		}
		s.c.log.Warn("rocketmq: telemetry stream broke; reopening", "group", s.cfg.Group, "err", err)
		if !backoff.Sleep(ctx, bo.Next()) {
			break
		}
	}
	wg.Wait()
}

// telemetryBackoffMax caps the wait between attempts to re-open a broken
// Telemetry stream: a session is back (and, for lite consumers, resubscribed)
// at most this long after its proxy serves again.
const telemetryBackoffMax = 5 * time.Second

// fallBack switches a LiteSimpleConsumer session to LITE_PUSH_CONSUMER when the
// proxy rejected the lite simple type (RocketMQ 5.5.0 knows only the push type;
// both receive through ReceiveMessage). It reports whether it switched.
func (s *Session) fallBack(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wireType != v2.ClientType_LITE_SIMPLE_CONSUMER || err == nil ||
		status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "not consumer") {
		return false
	}
	s.wireType = v2.ClientType_LITE_PUSH_CONSUMER
	// Routine on every 5.5.0 proxy (and rmqfake, which answers like it): said
	// once per process, at debug.
	if fallbackLogged.CompareAndSwap(false, true) {
		s.c.log.Debug("rocketmq: proxy does not know LITE_SIMPLE_CONSUMER; announcing LITE_PUSH_CONSUMER (said once)", "group", s.cfg.Group)
	}
	return true
}

// fallbackLogged is set once the fallback to LITE_PUSH_CONSUMER was logged.
var fallbackLogged atomic.Bool

// WireType returns the client type this session announces to the broker: the
// configured type, except that LiteSimpleConsumer becomes LITE_PUSH_CONSUMER on
// a proxy that predates LITE_SIMPLE_CONSUMER.
func (s *Session) WireType() v2.ClientType {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wireType
}

// stream runs one Telemetry stream until it fails or ctx ends. healthy reports
// whether the broker answered the settings on this stream.
func (s *Session) stream(ctx context.Context) (healthy bool, err error) {
	sctx, cancel := context.WithCancel(s.c.sign(ctx))
	defer cancel()
	st, err := s.c.stub.Telemetry(sctx)
	if err != nil {
		return false, s.c.wrap("Telemetry", err)
	}
	if err := st.Send(s.settingsCommand()); err != nil {
		return false, s.c.wrap("Telemetry", err)
	}
	for {
		cmd, err := st.Recv()
		if err != nil {
			return healthy, s.c.wrap("Telemetry", err)
		}
		if cmd.GetSettings() != nil {
			healthy = true
		}
		if err := s.handle(st, cmd); err != nil {
			return healthy, err
		}
	}
}

func (s *Session) handle(st grpc.BidiStreamingClient[v2.TelemetryCommand, v2.TelemetryCommand], cmd *v2.TelemetryCommand) error {
	if err := checkStatus("Telemetry", cmd.GetStatus()); cmd.GetStatus() != nil && err != nil {
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		return err
	}
	switch x := cmd.GetCommand().(type) {
	case *v2.TelemetryCommand_Settings:
		s.mu.Lock()
		again := s.settings != nil
		s.settings = x.Settings
		s.lastErr = nil
		s.mu.Unlock()
		s.firstOnce.Do(func() { close(s.firstSettings) })
		if again && s.cfg.LiteWildcard {
			// A re-opened stream (after a proxy or broker restart, or a
			// network cut): the broker may have lost this client's lite
			// subscription, so send it now rather than on the next tick.
			// OpenSession syncs after the first settings itself.
			select {
			case s.resync <- struct{}{}:
			default:
			}
		}
	case *v2.TelemetryCommand_NotifyUnsubscribeLiteCommand:
		lt := x.NotifyUnsubscribeLiteCommand.GetLiteTopic()
		s.mu.Lock()
		for _, set := range s.exact {
			delete(set, lt)
		}
		s.mu.Unlock()
		s.c.log.Info("rocketmq: broker unsubscribed a lite topic", "group", s.cfg.Group, "lite_topic", lt)
	case *v2.TelemetryCommand_PrintThreadStackTraceCommand:
		buf := make([]byte, 64<<10)
		buf = buf[:runtime.Stack(buf, true)]
		trace := string(buf)
		return st.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_ThreadStackTrace{
			ThreadStackTrace: &v2.ThreadStackTrace{Nonce: x.PrintThreadStackTraceCommand.GetNonce(), ThreadStackTrace: &trace},
		}})
	case *v2.TelemetryCommand_VerifyMessageCommand:
		return st.Send(&v2.TelemetryCommand{
			Status: &v2.Status{Code: v2.Code_NOT_IMPLEMENTED, Message: "rmqflow does not verify messages"},
			Command: &v2.TelemetryCommand_VerifyMessageResult{
				VerifyMessageResult: &v2.VerifyMessageResult{Nonce: x.VerifyMessageCommand.GetNonce()},
			},
		})
	default:
		// RecoverOrphanedTransaction, ReconnectEndpoints: nothing rmqflow uses.
	}
	return nil
}

// periodic sends heartbeats and lite subscription syncs: every
// LiteSyncInterval, and at once after the stream reconnected (retried with
// backoff until one succeeds).
func (s *Session) periodic(ctx context.Context) {
	hb := time.NewTicker(s.c.cfg.HeartbeatInterval)
	defer hb.Stop()
	var lite <-chan time.Time
	if s.cfg.LiteWildcard {
		t := time.NewTicker(s.c.cfg.LiteSyncInterval)
		defer t.Stop()
		lite = t.C
	}
	retryBo := backoff.New(200*time.Millisecond, telemetryBackoffMax)
	var retry <-chan time.Time
	doSync := func(why string) {
		err := s.syncAll(ctx)
		switch {
		case err == nil:
			retry = nil
			retryBo.Reset()
		case ctx.Err() != nil:
		default:
			s.c.log.Warn("rocketmq: lite subscription sync failed", "group", s.cfg.Group, "when", why, "err", err)
			if why != "periodic" {
				retry = time.After(retryBo.Next())
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			if err := s.c.Heartbeat(ctx, s.cfg.Group, ClientType(s.WireType())); err != nil && ctx.Err() == nil {
				s.c.log.Warn("rocketmq: heartbeat failed", "group", s.cfg.Group, "err", err)
			}
		case <-lite:
			doSync("periodic")
		case <-s.resync:
			retryBo.Reset()
			doSync("reconnect")
		case <-retry:
			doSync("reconnect retry")
		}
	}
}

// syncAll sends COMPLETE_ADD with the exact lite topics of every main topic.
func (s *Session) syncAll(ctx context.Context) error {
	var errs []error
	for _, sub := range s.cfg.Subscriptions {
		s.mu.Lock()
		set := make([]string, 0, len(s.exact[sub.Topic]))
		for lt := range s.exact[sub.Topic] {
			set = append(set, lt)
		}
		s.mu.Unlock()
		err := s.c.SyncLiteSubscription(ctx, LiteSyncRequest{
			Action: LiteCompleteAdd, Topic: sub.Topic, Group: s.cfg.Group, LiteTopics: set,
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Rejoin takes this wildcard lite session out of its group's subscription of
// mainTopic and puts it back (COMPLETE_REMOVE, then COMPLETE_ADD with no lite
// topics). RocketMQ 5.5.0 looks for a wildcard group's lite backlog (its full
// dispatch) when a client joins the group, and otherwise only when a message
// finds members of which none takes it; a client can be left with nothing to
// receive although a backlog is there (docs/broker-semantics.md, scenario
// v). A re-join makes the broker look again, 5 to 15 s later.
//
// The COMPLETE_ADD is sent whatever became of the COMPLETE_REMOVE (a
// timed-out one may have been applied), unless ctx has ended (the caller gave
// up) or the session closed. Whenever the COMPLETE_ADD was not sent or
// failed, or the COMPLETE_REMOVE failed (it may yet be applied after the
// ADD), the session syncs its subscription again at once and with backoff
// until a sync succeeds, as after a reconnect. Only for a LiteWildcard
// session with no exact lite topics of mainTopic (a COMPLETE_REMOVE would
// drop them); it excludes SubscribeLite and UnsubscribeLite while it runs,
// and Close waits for it (its calls end when the session closes).
func (s *Session) Rejoin(ctx context.Context, mainTopic string) error {
	if !s.cfg.LiteWildcard {
		return &ConfigError{Option: "SessionConfig.LiteWildcard", Reason: "Rejoin is for wildcard lite sessions"}
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.mu.Lock()
	exact := len(s.exact[mainTopic])
	s.mu.Unlock()
	if exact > 0 {
		return &ConfigError{Option: "Rejoin", Reason: fmt.Sprintf("the session has %d exact lite topics of %s, which a re-join would drop", exact, mainTopic)}
	}
	ctx, end, err := s.subCtx(ctx)
	if err != nil {
		return err
	}
	defer end()
	resync := func() {
		select {
		case s.resync <- struct{}{}:
		default:
		}
	}
	req := LiteSyncRequest{Action: LiteCompleteRemove, Topic: mainTopic, Group: s.cfg.Group}
	rerr := s.c.SyncLiteSubscription(ctx, req)
	if err := ctx.Err(); err != nil {
		resync()
		return fmt.Errorf("rocketmq: re-join %s: COMPLETE_ADD not sent (the session's own sync follows): %w", mainTopic, err)
	}
	req.Action = LiteCompleteAdd
	aerr := s.c.SyncLiteSubscription(ctx, req)
	if aerr != nil {
		resync()
		return fmt.Errorf("rocketmq: re-join %s: COMPLETE_ADD (a sync with backoff follows): %w", mainTopic, aerr)
	}
	if rerr != nil {
		resync()
		return fmt.Errorf("rocketmq: re-join %s: COMPLETE_REMOVE (COMPLETE_ADD sent, and a sync follows): %w", mainTopic, rerr)
	}
	return nil
}

// subCtx is ctx, also ended by the session's end, for a change of the
// subscription (under subMu): Close waits for the one in progress, and its
// call ends with the session instead of running to RequestTimeout. After
// Close it is ErrClosed: nothing may be subscribed after the
// NotifyClientTermination.
func (s *Session) subCtx(ctx context.Context) (context.Context, func(), error) {
	if s.life.Err() != nil {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// closedDuring is err, also ErrClosed when the session closed during the
// call (both wrapped: errors.Is finds either).
func (s *Session) closedDuring(what string, err error) error {
	if err != nil && s.life.Err() != nil {
		return fmt.Errorf("rocketmq: %s: the session closed: %w (%w)", what, ErrClosed, err)
	}
	return err
}

// SubscribeLite adds one exact lite topic of mainTopic (PARTIAL_ADD) and keeps
// it in the periodic COMPLETE_ADD. offset is optional. It ends with the
// session (ErrClosed after Close).
func (s *Session) SubscribeLite(ctx context.Context, mainTopic, liteTopic string, offset *OffsetOption) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	ctx, end, err := s.subCtx(ctx)
	if err != nil {
		return err
	}
	defer end()
	err = s.c.SyncLiteSubscription(ctx, LiteSyncRequest{
		Action: LitePartialAdd, Topic: mainTopic, Group: s.cfg.Group, LiteTopics: []string{liteTopic}, Offset: offset,
	})
	if err != nil {
		return s.closedDuring("PARTIAL_ADD of "+liteTopic, err)
	}
	s.mu.Lock()
	if s.exact[mainTopic] == nil {
		s.exact[mainTopic] = map[string]struct{}{}
	}
	s.exact[mainTopic][liteTopic] = struct{}{}
	s.mu.Unlock()
	return nil
}

// UnsubscribeLite removes one exact lite topic (PARTIAL_REMOVE). It ends
// with the session (ErrClosed after Close: the termination took the
// session's lite topics with it).
func (s *Session) UnsubscribeLite(ctx context.Context, mainTopic, liteTopic string) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	ctx, end, err := s.subCtx(ctx)
	if err != nil {
		return err
	}
	defer end()
	err = s.c.SyncLiteSubscription(ctx, LiteSyncRequest{
		Action: LitePartialRemove, Topic: mainTopic, Group: s.cfg.Group, LiteTopics: []string{liteTopic},
	})
	if err != nil {
		return s.closedDuring("PARTIAL_REMOVE of "+liteTopic, err)
	}
	s.mu.Lock()
	delete(s.exact[mainTopic], liteTopic)
	s.mu.Unlock()
	return nil
}

// permanent reports whether a Telemetry failure will recur unchanged: a
// status the broker sent, or a gRPC refusal.
func permanent(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return !IsRetriable(err)
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}
