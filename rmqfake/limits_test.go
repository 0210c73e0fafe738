package rmqfake_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestQueueCountBound: a topic has at most MaxQueues queues, from
// CreateTopic and from fixtures alike. `queues=10000000` used to be accepted,
// and one QueryRoute of that topic built a 3.9 GB answer.
func TestQueueCountBound(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	must(t, s.CreateTopic("t-max-queues", rmqfake.TopicNormal, rmqfake.Queues(rmqfake.MaxQueues)))
	for _, n := range []int{rmqfake.MaxQueues + 1, 10000000} {
		err := s.CreateTopic("t-too-many", rmqfake.TopicNormal, rmqfake.Queues(n))
		if err == nil || !strings.Contains(err.Error(), "1024") {
			t.Errorf("CreateTopic with %d queues: %v, want an error naming the bound", n, err)
		}
	}
	if _, ok := s.Stats().Topics["t-too-many"]; ok {
		t.Error("the refused topic was created")
	}
	if _, err := rmqfake.ParseFixture("topic a normal queues=1024"); err != nil {
		t.Errorf("queues=1024: %v", err)
	}
	for _, line := range []string{"topic a normal queues=1025", "topic a normal queues=10000000", "topic a normal queues=99999999999999999999"} {
		if _, err := rmqfake.ParseFixture(line); err == nil || !strings.Contains(err.Error(), "1024") {
			t.Errorf("%q: %v, want an error naming the bound", line, err)
		}
	}
	if err := s.ApplyFixtures([]rmqfake.Fixture{{Name: "t-fx", Type: rmqfake.TopicNormal, Queues: 5000}}); err == nil {
		t.Error("ApplyFixtures with 5000 queues: no error")
	}
}

// storeFull asserts that err is the broker's answer for a store that refuses
// a message: the proxy maps the broker's SERVICE_NOT_AVAILABLE to
// INTERNAL_SERVER_ERROR with the broker's remark.
func storeFull(t *testing.T, what string, err error) {
	t.Helper()
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != client.CodeInternalServerError || !strings.Contains(se.Message, "the broker's disk is full") {
		t.Errorf("%s: %v, want INTERNAL_SERVER_ERROR \"service not available now ... the broker's disk is full ...\"", what, err)
	}
}

// TestMaxStoredBytes: past MaxStoredBytes a send is refused whole, with the
// broker's answer for a full store; nothing of a refused batch is stored,
// and acked messages make room again. Without the limit, 480 MiB sent into a
// topic nobody consumed were all kept.
func TestMaxStoredBytes(t *testing.T) {
	t.Parallel()
	body := make([]byte, 1000)
	// Room for three 1000-byte messages (with their ids and overhead), not four.
	limit := int64(3 * (len(body) + rmqfake.MessageOverhead + 100))
	s, clk := start(t, rmqfake.MaxStoredBytes(limit))
	must(t, s.CreateTopic("t-delay", rmqfake.TopicDelay))
	p := producer(t, s)
	for i := 0; i < 3; i++ {
		send(t, p, &client.Message{Topic: normalTopic, Body: body})
	}
	st := s.Stats()
	if st.StoredBytes < int64(3*(len(body)+rmqfake.MessageOverhead)) || st.StoredBytes > limit {
		t.Errorf("StoredBytes %d with three 1000-byte messages (limit %d)", st.StoredBytes, limit)
	}
	_, err := p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a fourth message", err)
	// A batch is stored whole or not at all.
	_, err = p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: []byte("a")}, &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a batch past the limit", err)
	// Delayed and lite messages count too.
	_, err = p.Send(ctxT(t), &client.Message{Topic: "t-delay", DeliveryTime: clk.Now().Add(time.Hour), Body: body})
	storeFull(t, "a delayed message", err)
	_, err = p.Send(ctxT(t), &client.Message{Topic: liteTopic, LiteTopic: "full", Body: body})
	storeFull(t, "a lite message", err)
	if st := s.Stats(); st.Topics[normalTopic].Stored != 3 || st.Topics["t-delay"].Stored != 0 || st.Topics[liteTopic].Stored != 0 {
		t.Fatalf("after the refused sends: stored %d normal, %d delayed, %d lite; want 3, 0, 0",
			st.Topics[normalTopic].Stored, st.Topics["t-delay"].Stored, st.Topics[liteTopic].Stored)
	}

	// Acking frees room.
	c := normalConsumer(t, s)
	ackAll(t, c, normalGroup, normalTopic, receiveNow(t, c, normalReq(time.Minute)))
	if st := s.Stats(); st.Topics[normalTopic].Stored != 0 || st.StoredBytes != 0 {
		t.Fatalf("after acking everything: stored %d, %d bytes", st.Topics[normalTopic].Stored, st.StoredBytes)
	}
	send(t, p, &client.Message{Topic: "t-delay", DeliveryTime: clk.Now().Add(time.Hour), Body: body})
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "full", Body: body})
	send(t, p, &client.Message{Topic: normalTopic, Body: body})
	_, err = p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a fourth message again", err)
	// A delayed message that falls due stays counted, once.
	clk.Advance(time.Hour)
	if st := s.Stats(); st.Topics["t-delay"].Stored != 1 || st.Topics["t-delay"].Scheduled != 0 || st.StoredBytes > limit {
		t.Errorf("after the delay: %+v, %d bytes", st.Topics["t-delay"], st.StoredBytes)
	}
	_, err = p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a fourth message after the delay", err)

	// Without the option the default is 1 GiB; a negative limit turns it off.
	if rmqfake.DefaultMaxStoredBytes != 1<<30 {
		t.Errorf("DefaultMaxStoredBytes %d", rmqfake.DefaultMaxStoredBytes)
	}
	u, _ := start(t, rmqfake.MaxStoredBytes(-1))
	up := producer(t, u)
	for i := 0; i < 5; i++ {
		send(t, up, &client.Message{Topic: normalTopic, Body: body})
	}
}

// TestMaxLiteTopics: a message that would create a lite topic past
// MaxLiteTopics is refused with the broker's LMQ quota answer; lite topics
// already there take messages, and an idle lite topic (all acked) is freed
// and makes room. Subscribing to lite topics creates none (100,000 lite
// topics subscribed to used to be kept, 148 MiB, for good).
func TestMaxLiteTopics(t *testing.T) {
	t.Parallel()
	s, _ := start(t, rmqfake.MaxLiteTopics(3))
	p := producer(t, s)
	for _, lt := range []string{"a", "b", "c", "a"} {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: lt, Body: []byte(lt)})
	}
	quota := func(what string, err error) {
		t.Helper()
		var se *client.StatusError
		if !errors.As(err, &se) || se.Code != client.CodeLiteTopicQuotaExceeded || se.Message != "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume queue num exceeded." {
			t.Errorf("%s: %v, want LITE_TOPIC_QUOTA_EXCEEDED \"[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume queue num exceeded.\"", what, err)
		}
	}
	_, err := p.Send(ctxT(t), &client.Message{Topic: liteTopic, LiteTopic: "d", Body: []byte("d")})
	quota("a fourth lite topic", err)
	if lt := s.Stats().Topics[liteTopic].LiteTopics; len(lt) != 3 || lt["a"].Stored != 2 {
		t.Fatalf("lite topics %v, want a (2 messages), b, c", lt)
	}

	// Subscriptions create no lite topics.
	c := newClient(t, s, client.Config{})
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("sub-%d", i)
	}
	must(t, c.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: liteTopic, Group: exactGroup, LiteTopics: names}))
	maxPolicy := client.OffsetMax
	must(t, c.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: liteTopic, Group: exactGroup,
		LiteTopics: []string{"sub-x"}, Offset: &client.OffsetOption{Policy: &maxPolicy}}))
	if lt := s.Stats().Topics[liteTopic].LiteTopics; len(lt) != 3 {
		t.Fatalf("after subscribing to 1001 lite topics: %d lite topics held, want 3", len(lt))
	}
	_, err = p.Send(ctxT(t), &client.Message{Topic: liteTopic, LiteTopic: "sub-1", Body: []byte("s")})
	quota("a subscribed lite topic past the quota", err)

	// Consuming a lite topic to the end frees it, and makes room.
	lc := liteConsumer(t, s)
	var got []*client.ReceivedMessage
	for len(got) < 4 {
		got = append(got, receiveNow(t, lc, liteReq(time.Minute))...)
	}
	ackAll(t, lc, liteGroup, liteTopic, got)
	if lt := s.Stats().Topics[liteTopic].LiteTopics; len(lt) != 0 {
		t.Fatalf("after acking everything: lite topics %v still held", lt)
	}
	for _, lt := range []string{"d", "e", "sub-1"} {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: lt, Body: []byte(lt)})
	}
	_, err = p.Send(ctxT(t), &client.Message{Topic: liteTopic, LiteTopic: "f", Body: []byte("f")})
	quota("a fourth lite topic again", err)
	if rmqfake.DefaultMaxLiteTopics != 1_000_000 {
		t.Errorf("DefaultMaxLiteTopics %d", rmqfake.DefaultMaxLiteTopics)
	}
}

// TestMaxAutoGroups: auto-create makes at most MaxAutoGroups groups, on
// first use by a session or by a receive; past it the group is not found,
// with the limit named. CreateGroup is not limited. Auto-created groups
// used to be unbounded.
func TestMaxAutoGroups(t *testing.T) {
	t.Parallel()
	s := rmqfake.NewForTest(t, rmqfake.AutoCreate(), rmqfake.MaxAutoGroups(2))
	must(t, s.CreateGroup("made"))
	sub := func(g string) client.SessionConfig {
		return client.SessionConfig{Type: client.SimpleConsumer, Group: g, Subscriptions: []client.Subscription{{Topic: "t-auto"}}}
	}
	c := session(t, s, sub("auto-1"))
	session(t, s, sub("auto-2"))
	late := newClient(t, s, client.Config{RequestTimeout: time.Second})
	if _, err := late.OpenSession(ctxT(t), sub("auto-3")); err == nil || !strings.Contains(err.Error(), "MaxAutoGroups") {
		t.Errorf("a session of a third auto-created group: %v, want group not found, naming MaxAutoGroups", err)
	}
	_, err := c.Receive(ctxT(t), client.ReceiveRequest{Group: "auto-4", Topic: "t-auto", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if codeOf(err) != client.CodeConsumerGroupNotFound {
		t.Errorf("a receive naming a fourth group: %v, want CONSUMER_GROUP_NOT_FOUND", err)
	}
	must(t, s.CreateGroup("made-later"))
	st := s.Stats()
	for _, g := range []string{"made", "auto-1", "auto-2", "made-later"} {
		if _, ok := st.Groups[g]; !ok {
			t.Errorf("group %s missing", g)
		}
	}
	if len(st.Groups) != 4 {
		t.Errorf("%d groups, want 4", len(st.Groups))
	}
	if rmqfake.DefaultMaxAutoGroups != 10_000 {
		t.Errorf("DefaultMaxAutoGroups %d", rmqfake.DefaultMaxAutoGroups)
	}
}

// TestSessionExpiry: the settings of a client whose Telemetry stream ended
// without NotifyClientTermination expire SessionExpiry (120 s) after its
// last settings or heartbeat on the server's clock, as the proxy drops a
// client whose channel saw no heartbeat for 120 s; a heartbeat keeps them;
// a client with an open stream keeps them. They used to stay for good.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	s, clk := start(t)
	live := normalConsumer(t, s)
	c := newClient(t, s, client.Config{})
	sctx, cancel := context.WithCancel(c.OutgoingContext(ctxT(t)))
	defer cancel()
	if _, err := telemetry(t, c, sctx, consumerSettings(v2.ClientType_SIMPLE_CONSUMER, normalGroup, normalTopic)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Sessions != 2 || st.Streams != 2 {
		t.Fatalf("%d sessions, %d streams; want 2 and 2", st.Sessions, st.Streams)
	}
	cancel() // the client goes away without a word
	must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Streams == 1 }))
	if n := s.Stats().Sessions; n != 2 {
		t.Fatalf("right after the stream ended: %d sessions, want 2 (the proxy keeps them until they expire)", n)
	}
	clk.Advance(100 * time.Second)
	stub := v2.NewMessagingServiceClient(c.Conn())
	hctx := c.OutgoingContext(ctxT(t))
	hb, err := stub.Heartbeat(hctx, &v2.HeartbeatRequest{ClientType: v2.ClientType_SIMPLE_CONSUMER, Group: &v2.Resource{Name: normalGroup}})
	if err != nil || hb.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("heartbeat at 100 s: %v %v", hb.GetStatus(), err)
	}
	clk.Advance(119 * time.Second)
	if n := s.Stats().Sessions; n != 2 {
		t.Fatalf("119 s after a heartbeat: %d sessions, want 2", n)
	}
	clk.Advance(time.Second)
	if n := s.Stats().Sessions; n != 1 {
		t.Fatalf("120 s after the last heartbeat: %d sessions, want 1", n)
	}
	hb, err = stub.Heartbeat(hctx, &v2.HeartbeatRequest{ClientType: v2.ClientType_SIMPLE_CONSUMER, Group: &v2.Resource{Name: normalGroup}})
	if err != nil || hb.GetStatus().GetCode() != v2.Code_UNRECOGNIZED_CLIENT_TYPE {
		t.Errorf("heartbeat after expiry: %v %v, want UNRECOGNIZED_CLIENT_TYPE", hb.GetStatus(), err)
	}

	// The client with an open stream keeps its session however far the
	// clock moves, and still receives.
	clk.Advance(time.Hour)
	if st := s.Stats(); st.Sessions != 1 || st.Timers != 0 {
		t.Fatalf("an hour later: %d sessions, %d timers; want 1 and 0", st.Sessions, st.Timers)
	}
	send(t, producer(t, s), &client.Message{Topic: normalTopic, Body: []byte("x")})
	receiveNow(t, live, normalReq(time.Minute))
	if rmqfake.DefaultSessionExpiry != 120*time.Second {
		t.Errorf("DefaultSessionExpiry %v", rmqfake.DefaultSessionExpiry)
	}
}

// An expired lite consumer loses its lite subscription, as when it leaves.
func TestSessionExpiryDropsLiteSubscription(t *testing.T) {
	t.Parallel()
	s, clk := start(t, rmqfake.SessionExpiry(time.Minute))
	c := newClient(t, s, client.Config{})
	stream := liteConsumerWithX(t, c)
	if n := s.Stats().LiteSubscriptions; n != 1 {
		t.Fatalf("%d lite subscriptions, want 1", n)
	}
	// The stream ends without NotifyClientTermination (and without the
	// cancellation on which the proxy drops a lite subscription at once).
	must(t, stream.CloseSend())
	must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Streams == 0 }))
	clk.Advance(59 * time.Second)
	if st := s.Stats(); st.Sessions != 1 || st.LiteSubscriptions != 1 {
		t.Fatalf("before expiry: %d sessions, %d lite subscriptions; want 1 and 1", st.Sessions, st.LiteSubscriptions)
	}
	clk.Advance(time.Second)
	if st := s.Stats(); st.Sessions != 0 || st.LiteSubscriptions != 0 {
		t.Errorf("after expiry: %d sessions, %d lite subscriptions; want 0 and 0", st.Sessions, st.LiteSubscriptions)
	}
}

// TestMaxLiteSubscriptions: lite subscriptions are counted across requests
// and clients, as the 5.5.0 broker counts (client, lite topic) pairs against
// maxLiteSubscriptionCount: a PARTIAL_ADD when the count has reached the
// limit is refused with LITE_SUBSCRIPTION_QUOTA_EXCEEDED; so is a
// COMPLETE_ADD that would grow it. Only each request's size was checked
// before (one client held 46,000 lite topics in 20 requests).
func TestMaxLiteSubscriptions(t *testing.T) {
	t.Parallel()
	s, _ := start(t, rmqfake.MaxLiteSubscriptions(5))
	sync := func(c *client.Client, action client.LiteAction, names ...string) error {
		return c.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: action, Topic: liteTopic, Group: exactGroup, LiteTopics: names})
	}
	quota := func(what string, err error) {
		t.Helper()
		var se *client.StatusError
		if !errors.As(err, &se) || se.Code != client.CodeLiteSubscriptionQuotaExceeded ||
			se.Message != "org.apache.rocketmq.broker.lite.LiteQuotaException: lite subscription quota exceeded 5" {
			t.Errorf("%s: %v, want LITE_SUBSCRIPTION_QUOTA_EXCEEDED \"org.apache.rocketmq.broker.lite.LiteQuotaException: lite subscription quota exceeded 5\"", what, err)
		}
	}
	c1, c2 := newClient(t, s, client.Config{}), newClient(t, s, client.Config{})
	must(t, sync(c1, client.LitePartialAdd, "a", "b", "c"))
	must(t, sync(c2, client.LitePartialAdd, "d", "e", "f")) // checked before adding: 3 < 5
	quota("c2 past the limit", sync(c2, client.LitePartialAdd, "g"))
	quota("c1 past the limit", sync(c1, client.LitePartialAdd, "g"))
	quota("c1 growing by COMPLETE_ADD", sync(c1, client.LiteCompleteAdd, "w", "x", "y", "z"))
	must(t, sync(c1, client.LiteCompleteAdd, "x", "y", "z")) // same size
	if n := s.Stats().LiteSubscriptions; n != 6 {
		t.Fatalf("%d lite subscriptions, want 6", n)
	}
	must(t, sync(c1, client.LitePartialRemove, "x", "y"))
	must(t, sync(c1, client.LitePartialAdd, "g", "h"))
	quota("c2 past the limit again", sync(c2, client.LitePartialAdd, "i"))
	must(t, sync(c2, client.LiteCompleteRemove))
	must(t, sync(c2, client.LitePartialAdd, "i"))
	if n := s.Stats().LiteSubscriptions; n != 4 {
		t.Fatalf("%d lite subscriptions, want 4 (c1: z g h, c2: i)", n)
	}
	// The per-request check of the proxy is unchanged: quota + 300 names.
	many := make([]string, 2301)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	if err := sync(newClient(t, s, client.Config{}), client.LitePartialAdd, many...); !errors.Is(err, client.ErrLiteSubscriptionQuotaExceeded) {
		t.Errorf("2301 names in one request: %v", err)
	}
	if rmqfake.DefaultMaxLiteSubscriptions != 100_000 {
		t.Errorf("DefaultMaxLiteSubscriptions %d", rmqfake.DefaultMaxLiteSubscriptions)
	}
}

// TestMaxAutoTopics: auto-create makes at most MaxAutoTopics topics (on a
// send, a QueryRoute or a lite subscription); past it a new topic is
// unknown, with the limit named. CreateTopic is not limited. Auto-created
// topics used to be unbounded.
func TestMaxAutoTopics(t *testing.T) {
	t.Parallel()
	s := rmqfake.NewForTest(t, rmqfake.AutoCreate(), rmqfake.MaxAutoTopics(2))
	must(t, s.CreateTopic("made", rmqfake.TopicNormal))
	p := producer(t, s)
	send(t, p, &client.Message{Topic: "auto-1", Body: []byte("x")})
	if _, err := p.QueryRoute(ctxT(t), "auto-2"); err != nil {
		t.Fatalf("route of a second auto-created topic: %v", err)
	}
	_, err := p.Send(ctxT(t), &client.Message{Topic: "auto-3", Body: []byte("x")})
	if codeOf(err) != client.CodeMessagePropertyConflict || !strings.Contains(err.Error(), "MaxAutoTopics") {
		t.Errorf("a send to a third auto-created topic: %v, want the answer for an unknown topic, naming MaxAutoTopics", err)
	}
	_, err = p.QueryRoute(ctxT(t), "auto-4")
	if codeOf(err) != client.CodeTopicNotFound || !strings.Contains(err.Error(), "MaxAutoTopics") {
		t.Errorf("a route of a fourth: %v, want TOPIC_NOT_FOUND naming MaxAutoTopics", err)
	}
	send(t, p, &client.Message{Topic: "auto-1", Body: []byte("y")})
	must(t, s.CreateTopic("made-later", rmqfake.TopicNormal))
	st := s.Stats()
	if len(st.Topics) != 4 {
		t.Errorf("%d topics, want made, auto-1, auto-2, made-later", len(st.Topics))
	}
	if rmqfake.DefaultMaxAutoTopics != 10_000 {
		t.Errorf("DefaultMaxAutoTopics %d", rmqfake.DefaultMaxAutoTopics)
	}
}

// A Restart cuts every stream but forgets the sessions itself: no expiry is
// left pending.
func TestRestartLeavesNoExpiry(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	normalConsumer(t, s)
	must(t, s.Restart())
	if st := s.Stats(); st.Sessions != 0 || st.Timers != 0 {
		t.Errorf("after Restart: %d sessions, %d timers; want 0 and 0", st.Sessions, st.Timers)
	}
}

// TestTelemetryUnregisteredStreamSpeaksForNoOne: a Telemetry stream that
// names a client's id but never had a settings command accepted (here: sends
// nothing, then is cancelled) does not drop that client's lite subscription.
// Anyone may open a stream naming any id; before, cancelling one offlined the
// client it named.
func TestTelemetryUnregisteredStreamSpeaksForNoOne(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := newClient(t, s, client.Config{ClientID: "victim"})
	liteConsumerWithX(t, c) // its stream stays open until the test ends
	must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Streams == 1 && st.LiteSubscriptions == 1 }))

	forger := newClient(t, s, client.Config{ClientID: "victim"})
	fctx, cancel := context.WithCancel(ctxT(t))
	forged, err := v2.NewMessagingServiceClient(forger.Conn()).Telemetry(forger.OutgoingContext(fctx))
	must(t, err)
	must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Streams == 2 })) // open on the server
	cancel()
	// Once the server's handler of the forged stream returned, its cancel
	// was seen (and, before the fix, the victim offlined).
	must(t, s.WaitFor(ctxT(t), func(st rmqfake.Stats) bool { return st.Streams == 1 }))
	_, _ = forged.Recv()
	if st := s.Stats(); st.LiteSubscriptions != 1 || st.Sessions != 1 {
		t.Fatalf("after a stranger's stream naming the client was cancelled: %d lite subscriptions, %d sessions; want 1 and 1", st.LiteSubscriptions, st.Sessions)
	}
}

// liteConsumerWithX opens c's Telemetry stream as a lite push consumer of
// exactGroup (its settings answered) and subscribes it to lite topic "x" of
// liteTopic; the stream is the client's presence.
func liteConsumerWithX(t *testing.T, c *client.Client) v2.MessagingService_TelemetryClient {
	t.Helper()
	stream, err := v2.NewMessagingServiceClient(c.Conn()).Telemetry(c.OutgoingContext(ctxT(t)))
	must(t, err)
	must(t, stream.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: consumerSettings(v2.ClientType_LITE_PUSH_CONSUMER, exactGroup, liteTopic)}}))
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	must(t, c.SyncLiteSubscription(ctxT(t), client.LiteSyncRequest{Action: client.LitePartialAdd, Topic: liteTopic, Group: exactGroup, LiteTopics: []string{"x"}}))
	return stream
}
