package conformance

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Scenario t's topics and group (fixtures.txt) and its users, with the
// secrets of scripts/rocketmq/users.txt.
const (
	AuthTopicT = "rmqflow-auth-t"
	AuthTopicU = "rmqflow-auth-u"
	AuthGroupT = "rmqflow-auth-g"
	// AuthLiteT is a LITE main topic with an exact lite group.
	AuthLiteT      = "rmqflow-auth-lite"
	AuthLiteGroupT = "rmqflow-auth-lite-g"
)

var authUsers = map[string]string{
	"rmqflow-pub":  "pub-secret",  // Pub on rmqflow-auth-t
	"rmqflow-sub":  "sub-secret",  // Sub on rmqflow-auth-t and rmqflow-auth-g
	"rmqflow-grp":  "grp-secret",  // Sub on rmqflow-auth-g and rmqflow-auth-u
	"rmqflow-pfx":  "pfx-secret",  // Pub on rmqflow-auth-*, denied on rmqflow-auth-u
	"rmqflow-ip":   "ip-secret",   // Pub on rmqflow-auth-t from 10.9.9.9 only
	"rmqflow-any":  "any-secret",  // Pub,Sub on *, Pub denied on Topic:*, All on rmqflow-auth-t
	"rmqflow-root": "root-secret", // super user
	"rmqflow-off":  "off-secret",  // disabled
}

// AuthAndACL (t): a proxy with authentication and authorization on (the
// real target's second proxy, RMQFLOW_AUTH_ENDPOINT; an rmqfake with the
// users and ACLs of scripts/rocketmq/users.txt). Every refusal is
// UNAUTHORIZED (40100) with the proxy's text, in the response (gRPC OK):
//   - the signature, on raw SendMessage headers: none "username cannot be
//     null." (before the client id is looked at); no x-mq-date-time
//     "datetime is null."; one word "authentication header is incorrect.";
//     a part without '=' "authentication keyValues length is incorrect,
//     actual length=1."; Credential=// "authentication credential length is
//     incorrect, actual length=0."; no Signature or a wrong secret "check
//     signature failed."; a Signature not hex "create authentication context
//     error."; an unknown user "User:nobody is not found."; a disabled one
//     "User:rmqflow-off is disabled.". Accepted: a signed date of 2000 or
//     one that is no date (no window), any scheme word, upper-case hex, no
//     SignedHeaders. Past both checks, no client id is CLIENT_ID_REQUIRED.
//     A blank topic (a send, a producer's settings) is "topic is null.".
//   - the ACL: "User:<u> has no permission to access <Topic|Group>:<name>
//     from 127.0.0.1, <why>", why being "no matched policies." or, when the
//     best matching entry denies, "the decision is deny.". Send: Pub on the
//     topic (a lite message's main topic); receive, ack, dead-lettering:
//     Sub on the group, then the topic; ChangeInvisibleDuration, a
//     consumer's heartbeat, NotifyClientTermination with a group: the group
//     only; a producer's heartbeat: nothing; QueryRoute: the best entry
//     matching Pub or Sub; SyncLiteSubscription: the group first. The best
//     entry: a literal name over a prefix over Topic:* over *; an entry for
//     another source address does not match; a later entry for the same
//     resource replaces the earlier; a super user needs none.
//   - Telemetry: settings the user may not have (or unsigned) are answered
//     with one command carrying the refusal, then the stream ends.
func AuthAndACL(t *testing.T, e *Env) {
	if e.Target.AuthEndpoint == "" {
		t.Fatalf("no auth endpoint: the target has no proxy with authentication on (the real broker's is RMQFLOW_AUTH_ENDPOINT, which scripts/with-broker.sh exports after scripts/rocketmq.sh up)")
	}
	run := rmqtest.Unique("t")
	const from = " from 127.0.0.1, "
	noPerm := func(user, resource, why string) string {
		return "User:" + user + " has no permission to access " + resource + from + why
	}

	// Authentication, on SendMessage with raw headers.
	anon := e.authClient(t, "", "")
	now := time.Now().UTC().Format("20060102T150405Z")
	sign := func(secret, date string) string {
		h := hmac.New(sha1.New, []byte(secret))
		h.Write([]byte(date))
		return hex.EncodeToString(h.Sum(nil))
	}
	authz := func(scheme, ak, sig string) string {
		return scheme + " Credential=" + ak + "//Rocketmq, SignedHeaders=x-mq-date-time, Signature=" + sig
	}
	pubSig := sign(authUsers["rmqflow-pub"], now)
	for _, c := range []struct {
		name, date, authz string
		want              string // "" for OK
		noID              bool   // no x-mq-client-id
		topic             string // AuthTopicT if empty
	}{
		{name: "unsigned", date: now, want: "username cannot be null."},
		{name: "unsigned, no client id", date: now, want: "username cannot be null.", noID: true},
		{name: "no date", authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", pubSig), want: "datetime is null."},
		{name: "one word", date: now, authz: "MQv2-HMAC-SHA1", want: "authentication header is incorrect."},
		{name: "part without =", date: now, authz: "MQv2-HMAC-SHA1 Credential=rmqflow-pub//Rocketmq, Signature", want: "authentication keyValues length is incorrect, actual length=1."},
		{name: "empty credential", date: now, authz: "MQv2-HMAC-SHA1 Credential=//, Signature=" + pubSig, want: "authentication credential length is incorrect, actual length=0."},
		{name: "no signature", date: now, authz: "MQv2-HMAC-SHA1 Credential=rmqflow-pub//Rocketmq, SignedHeaders=x-mq-date-time", want: "check signature failed."},
		{name: "upper-case hex, no SignedHeaders", date: now, authz: "MQv2-HMAC-SHA1 Credential=rmqflow-pub, Signature=" + strings.ToUpper(pubSig)},
		{name: "unknown access key", date: now, authz: authz("MQv2-HMAC-SHA1", "nobody", sign("x", now)), want: "User:nobody is not found."},
		{name: "wrong secret", date: now, authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", sign("not-the-secret", now)), want: "check signature failed."},
		{name: "signature not hex", date: now, authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", "xyz"), want: "create authentication context error."},
		{name: "disabled user", date: now, authz: authz("MQv2-HMAC-SHA1", "rmqflow-off", sign(authUsers["rmqflow-off"], now)), want: "User:rmqflow-off is disabled."},
		{name: "date of 2000", date: "20000101T000000Z", authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", sign(authUsers["rmqflow-pub"], "20000101T000000Z"))},
		{name: "not a date", date: "whenever", authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", sign(authUsers["rmqflow-pub"], "whenever"))},
		{name: "other scheme word", date: now, authz: authz("Whatever", "rmqflow-pub", pubSig)},
		// A blank topic is null to the ACL check, before any entry.
		{name: "blank topic", date: now, authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", pubSig), topic: " ", want: "topic is null."},
		// Authorization runs before the client id is looked at.
		{name: "denied, no client id", date: now, authz: authz("MQv2-HMAC-SHA1", "rmqflow-pub", pubSig), noID: true, topic: AuthTopicU,
			want: noPerm("rmqflow-pub", "Topic:"+AuthTopicU, "no matched policies.")},
	} {
		id, topic := anon.ID(), AuthTopicT
		if c.noID {
			id = ""
		}
		if c.topic != "" {
			topic = c.topic
		}
		st := rawSend(t, anon, id, c.date, c.authz, topic, run)
		wantStatus(t, c.name+": SendMessage", st, c.want)
	}
	wantStatus(t, "unsigned Telemetry settings", telemetryRefused(t, anon, AuthTopicT), "username cannot be null.")
	// Past authentication and authorization, the client id is required.
	if st := rawSend(t, anon, "", now, authz("MQv2-HMAC-SHA1", "rmqflow-pub", pubSig), AuthTopicT, run); st.GetCode() != v2.Code_CLIENT_ID_REQUIRED || st.GetMessage() != "client id cannot be empty" {
		t.Errorf("allowed, no client id: SendMessage: %v %q, want CLIENT_ID_REQUIRED %q", st.GetCode(), st.GetMessage(), "client id cannot be empty")
	}

	// rmqflow-pub: Pub on rmqflow-auth-t only.
	pub := e.authClient(t, "rmqflow-pub", authUsers["rmqflow-pub"])
	openSession(t, pub, client.SessionConfig{Type: client.Producer, Topics: []string{AuthTopicT}})
	if _, err := pub.QueryRoute(rmqtest.Context(t, 10*time.Second), AuthTopicT); err != nil {
		t.Errorf("rmqflow-pub QueryRoute %s: %v", AuthTopicT, err)
	}
	wantErr(t, "rmqflow-pub QueryRoute "+AuthTopicU, queryRoute(t, pub, AuthTopicU), noPerm("rmqflow-pub", "Topic:"+AuthTopicU, "no matched policies."))
	wantErr(t, "rmqflow-pub send to "+AuthTopicT, send(t, pub, AuthTopicT, run, "m1"), "")
	wantErr(t, "rmqflow-pub send to "+AuthTopicU, send(t, pub, AuthTopicU, run, "x"), noPerm("rmqflow-pub", "Topic:"+AuthTopicU, "no matched policies."))
	noGroup := noPerm("rmqflow-pub", "Group:"+AuthGroupT, "no matched policies.")
	wantStatus(t, "rmqflow-pub receive", receive(t, pub, AuthTopicT), noGroup)
	wantErr(t, "rmqflow-pub consumer heartbeat", pub.Heartbeat(rmqtest.Context(t, 10*time.Second), AuthGroupT, client.SimpleConsumer), noGroup)
	wantErr(t, "rmqflow-pub producer heartbeat", pub.Heartbeat(rmqtest.Context(t, 10*time.Second), "", client.Producer), "")
	wantStatus(t, "rmqflow-pub Telemetry settings publishing "+AuthTopicU, telemetryRefused(t, pub, AuthTopicU), noPerm("rmqflow-pub", "Topic:"+AuthTopicU, "no matched policies."))
	wantStatus(t, "rmqflow-pub Telemetry settings publishing a blank topic", telemetryRefused(t, pub, ""), "topic is null.")

	// rmqflow-sub: Sub on rmqflow-auth-t and rmqflow-auth-g.
	sub := e.authClient(t, "rmqflow-sub", authUsers["rmqflow-sub"])
	openSession(t, sub, client.SessionConfig{Type: client.SimpleConsumer, Group: AuthGroupT, Subscriptions: []client.Subscription{{Topic: AuthTopicT}}})
	req := client.ReceiveRequest{Group: AuthGroupT, Topic: AuthTopicT, BatchSize: 1, InvisibleDuration: 30 * time.Second, LongPollingTimeout: poll}
	got := Collect(rmqtest.Context(t, 30*time.Second), t, sub, req, OfRun(run), 1)
	if len(got) != 1 {
		t.Fatalf("rmqflow-sub received %d messages of the run, want 1", len(got))
	}
	m := got[0]
	_, err := changeInvisible(t, pub, m, m.ReceiptHandle)
	wantErr(t, "rmqflow-pub ChangeInvisibleDuration", err, noGroup)
	wantErr(t, "rmqflow-pub ack", AckOne(t, pub, AuthGroupT, m), noGroup)
	// ChangeInvisibleDuration checks the group only (5.5.0), an ack the
	// topic too.
	grp := e.authClient(t, "rmqflow-grp", authUsers["rmqflow-grp"])
	// (ChangeInvisibleDuration needs a session that registered the client
	// with the proxy: a consumer's of rmqflow-auth-u, which it may read.)
	openSession(t, grp, client.SessionConfig{Type: client.SimpleConsumer, Group: AuthGroupT, Subscriptions: []client.Subscription{{Topic: AuthTopicU}}})
	h, err := changeInvisible(t, grp, m, m.ReceiptHandle)
	if err != nil {
		t.Fatalf("rmqflow-grp ChangeInvisibleDuration: %v", err)
	}
	wantErr(t, "rmqflow-grp ack", AckHandle(t, grp, AuthGroupT, m, h), noPerm("rmqflow-grp", "Topic:"+AuthTopicT, "no matched policies."))
	h, err = changeInvisible(t, sub, m, h)
	if err != nil {
		t.Fatalf("rmqflow-sub ChangeInvisibleDuration: %v", err)
	}
	if err := AckHandle(t, sub, AuthGroupT, m, h); err != nil {
		t.Errorf("rmqflow-sub ack: %v", err)
	}
	if _, err := sub.QueryRoute(rmqtest.Context(t, 10*time.Second), AuthTopicT); err != nil {
		t.Errorf("rmqflow-sub QueryRoute %s (Sub suffices): %v", AuthTopicT, err)
	}
	wantErr(t, "rmqflow-pub ForwardMessageToDeadLetterQueue", pub.ForwardToDeadLetterQueue(rmqtest.Context(t, 10*time.Second), client.DeadLetterRequest{
		Group: AuthGroupT, Topic: m.Topic, MessageID: m.MessageID, ReceiptHandle: h, DeliveryAttempt: 1, MaxDeliveryAttempts: 16}), noGroup)
	wantErr(t, "rmqflow-pub NotifyClientTermination", pub.NotifyClientTermination(rmqtest.Context(t, 10*time.Second), AuthGroupT), noGroup)
	wantErr(t, "rmqflow-pub NotifyClientTermination without a group", pub.NotifyClientTermination(rmqtest.Context(t, 10*time.Second), ""), "")
	wantStatus(t, "rmqflow-sub receive from "+AuthTopicU, receive(t, sub, AuthTopicU), noPerm("rmqflow-sub", "Topic:"+AuthTopicU, "no matched policies."))
	wantErr(t, "rmqflow-sub send to "+AuthTopicT, send(t, sub, AuthTopicT, run, "x"), noPerm("rmqflow-sub", "Topic:"+AuthTopicT, "no matched policies."))

	// rmqflow-pfx: a literal Deny beats a prefix Allow.
	pfx := e.authClient(t, "rmqflow-pfx", authUsers["rmqflow-pfx"])
	wantErr(t, "rmqflow-pfx send to "+AuthTopicT, send(t, pfx, AuthTopicT, run, "m2"), "")
	wantErr(t, "rmqflow-pfx send to "+AuthTopicU, send(t, pfx, AuthTopicU, run, "x"), noPerm("rmqflow-pfx", "Topic:"+AuthTopicU, "the decision is deny."))

	// Lite topics: the resource is the main topic, never the lite topic.
	lite := run + "-l"
	wantErr(t, "rmqflow-pub send to a lite topic of "+AuthLiteT, sendLite(t, pub, lite, run), noPerm("rmqflow-pub", "Topic:"+AuthLiteT, "no matched policies."))
	wantErr(t, "rmqflow-pfx send to a lite topic of "+AuthLiteT, sendLite(t, pfx, lite, run), "")
	wantErr(t, "rmqflow-sub SyncLiteSubscription", syncLite(t, sub, lite), noPerm("rmqflow-sub", "Group:"+AuthLiteGroupT, "no matched policies."))

	// rmqflow-any: a literal entry over Topic:* over *.
	anyc := e.authClient(t, "rmqflow-any", authUsers["rmqflow-any"])
	wantErr(t, "rmqflow-any send to "+AuthTopicT, send(t, anyc, AuthTopicT, run, "m3"), "")
	wantErr(t, "rmqflow-any send to "+AuthTopicU, send(t, anyc, AuthTopicU, run, "x"), noPerm("rmqflow-any", "Topic:"+AuthTopicU, "the decision is deny."))
	// Pub or Sub: the best entry matching either decides, a Deny though
	// another entry allows Sub.
	wantErr(t, "rmqflow-any QueryRoute "+AuthTopicU, queryRoute(t, anyc, AuthTopicU), noPerm("rmqflow-any", "Topic:"+AuthTopicU, "the decision is deny."))
	wantErr(t, "rmqflow-any SyncLiteSubscription", syncLite(t, anyc, lite), "")

	// rmqflow-ip: its entry for rmqflow-auth-t is for another source address.
	ip := e.authClient(t, "rmqflow-ip", authUsers["rmqflow-ip"])
	wantErr(t, "rmqflow-ip send to "+AuthTopicT, send(t, ip, AuthTopicT, run, "x"), noPerm("rmqflow-ip", "Topic:"+AuthTopicT, "no matched policies."))
	// Its later entry for rmqflow-auth-u (Allow from 127.0.0.0/8) replaced
	// the Deny before it.
	wantErr(t, "rmqflow-ip send to "+AuthTopicU+" (allowed from 127.0.0.0/8)", send(t, ip, AuthTopicU, run, "x"), "")

	// rmqflow-root: a super user may do anything.
	root := e.authClient(t, "rmqflow-root", authUsers["rmqflow-root"])
	wantErr(t, "rmqflow-root send to "+AuthTopicU, send(t, root, AuthTopicU, run, "x"), "")
	// rmqflow-any may read rmqflow-auth-u (Sub through *), now that it has
	// messages.
	openSession(t, anyc, client.SessionConfig{Type: client.SimpleConsumer, Group: AuthGroupT, Subscriptions: []client.Subscription{{Topic: AuthTopicT}}})
	wantStatus(t, "rmqflow-any receive from "+AuthTopicU, receive(t, anyc, AuthTopicU), "")

	// What the others sent got through: the super user receives the rest of
	// the run's messages on rmqflow-auth-t (rmqflow-sub took one), the raw
	// ones and rmqflow-pfx's among them.
	openSession(t, root, client.SessionConfig{Type: client.SimpleConsumer, Group: AuthGroupT, Subscriptions: []client.Subscription{{Topic: AuthTopicT}}})
	// Seven messages of the run reached rmqflow-auth-t: four raw sends, m1,
	// m2 and m3; rmqflow-sub took one.
	rest := Collect(rmqtest.Context(t, 30*time.Second), t, root, req, OfRun(run), 6)
	if len(rest) != 6 {
		t.Errorf("rmqflow-root received %d messages of the run, want 6", len(rest))
	}
	bodies := map[string]bool{}
	for _, r := range rest {
		bodies[string(r.Body)] = true
		if err := AckOne(t, root, AuthGroupT, r); err != nil {
			t.Errorf("rmqflow-root ack: %v", err)
		}
	}
	for _, b := range []string{"raw", "m2", "m3"} {
		if !bodies[b] {
			t.Errorf("rmqflow-root did not receive %q of the run (got %v)", b, bodies)
		}
	}
}

// authClient is a client of the target's auth endpoint signing as ak (none
// for "").
func (e *Env) authClient(t *testing.T, ak, secret string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: e.Target.AuthEndpoint, Credentials: client.Credentials{AccessKey: ak, AccessSecret: secret}})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func openSession(t *testing.T, c *client.Client, cfg client.SessionConfig) {
	t.Helper()
	if _, err := c.OpenSession(rmqtest.Context(t, 10*time.Second), cfg); err != nil {
		t.Fatalf("%s session: %v", cfg.Type, err)
	}
}

// rawSend sends one message to topic with exactly these date and
// authorization headers and returns the response's status.
func rawSend(t *testing.T, c *client.Client, id, date, authz, topic, run string) *v2.Status {
	t.Helper()
	md := metadata.Pairs("x-mq-language", "GO", "x-mq-protocol", "v2", "x-mq-client-version", client.Version)
	if id != "" {
		md.Set("x-mq-client-id", id)
	}
	if date != "" {
		md.Set("x-mq-date-time", date)
	}
	if authz != "" {
		md.Set("authorization", authz)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	resp, err := v2.NewMessagingServiceClient(c.Conn()).SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{{
		Topic: &v2.Resource{Name: topic},
		SystemProperties: &v2.SystemProperties{
			Keys: []string{run}, MessageId: client.NewMessageID(), BornTimestamp: timestamppb.Now(), BornHost: "t",
			BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL,
		},
		Body: []byte("raw"),
	}}})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	st := resp.GetStatus()
	if st.GetCode() == v2.Code_OK && len(resp.GetEntries()) == 1 {
		st = resp.GetEntries()[0].GetStatus()
	}
	return st
}

func send(t *testing.T, c *client.Client, topic, run, body string) error {
	t.Helper()
	res, err := c.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: topic, Keys: []string{run}, Body: []byte(body)})
	if err == nil {
		err = res[0].Err
	}
	return err
}

func sendLite(t *testing.T, c *client.Client, lite, run string) error {
	t.Helper()
	res, err := c.Send(rmqtest.Context(t, 10*time.Second), &client.Message{Topic: AuthLiteT, LiteTopic: lite, Keys: []string{run}, Body: []byte("l")})
	if err == nil {
		err = res[0].Err
	}
	return err
}

func syncLite(t *testing.T, c *client.Client, lite string) error {
	t.Helper()
	return c.SyncLiteSubscription(rmqtest.Context(t, 10*time.Second), client.LiteSyncRequest{
		Action: client.LitePartialAdd, Topic: AuthLiteT, Group: AuthLiteGroupT, LiteTopics: []string{lite}})
}

func queryRoute(t *testing.T, c *client.Client, topic string) error {
	t.Helper()
	_, err := c.QueryRoute(rmqtest.Context(t, 10*time.Second), topic)
	return err
}

// receive is one ReceiveMessage of topic through AuthGroupT (without the
// QueryRoute the client package's Receive makes first); it returns the
// status, MESSAGE_NOT_FOUND turned into OK.
func receive(t *testing.T, c *client.Client, topic string) *v2.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.OutgoingContext(context.Background()), 20*time.Second)
	defer cancel()
	rs, err := v2.NewMessagingServiceClient(c.Conn()).ReceiveMessage(ctx, &v2.ReceiveMessageRequest{
		Group:            &v2.Resource{Name: AuthGroupT},
		MessageQueue:     &v2.MessageQueue{Topic: &v2.Resource{Name: topic}},
		FilterExpression: &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"},
		BatchSize:        1, InvisibleDuration: durationpb.New(MinInvisible), LongPollingTimeout: durationpb.New(poll),
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	var st *v2.Status
	for {
		r, err := rs.Recv()
		if err != nil {
			break
		}
		if x, ok := r.GetContent().(*v2.ReceiveMessageResponse_Status); ok && st == nil {
			st = x.Status
		}
	}
	if st.GetCode() == v2.Code_MESSAGE_NOT_FOUND {
		st = &v2.Status{Code: v2.Code_OK}
	}
	return st
}

func changeInvisible(t *testing.T, c *client.Client, m *client.ReceivedMessage, handle string) (string, error) {
	t.Helper()
	return c.ChangeInvisibleDuration(rmqtest.Context(t, 10*time.Second), client.ChangeInvisibleRequest{Group: AuthGroupT, Topic: m.Topic,
		MessageID: m.MessageID, ReceiptHandle: handle, InvisibleDuration: 20 * time.Second})
}

// telemetryRefused opens a Telemetry stream for c and sends a producer's
// settings publishing topic. It returns the status of the one command the
// proxy answers with, and fails unless the stream then ends cleanly.
func telemetryRefused(t *testing.T, c *client.Client, topic string) *v2.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.OutgoingContext(context.Background()), 10*time.Second)
	defer cancel()
	tel, err := v2.NewMessagingServiceClient(c.Conn()).Telemetry(ctx)
	if err != nil {
		t.Fatalf("Telemetry: %v", err)
	}
	typ := v2.ClientType_PRODUCER
	if err := tel.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{
		ClientType:     &typ,
		AccessPoint:    &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: "127.0.0.1", Port: 8081}}},
		RequestTimeout: durationpb.New(3 * time.Second),
		UserAgent:      &v2.UA{Language: v2.Language_GOLANG, Version: "5.1.4", Platform: "linux", Hostname: "t"},
		PubSub:         &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: []*v2.Resource{{Name: topic}}}},
	}}}); err != nil {
		t.Fatalf("Telemetry send: %v", err)
	}
	cmd, err := tel.Recv()
	if err != nil {
		t.Fatalf("Telemetry: no answer to the settings: %v", err)
	}
	if _, err := tel.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Telemetry after the refusal: %v, want the stream ended (EOF)", err)
	}
	return cmd.GetStatus()
}

// wantStatus checks a response status: OK for want "", else UNAUTHORIZED
// with message want.
func wantStatus(t *testing.T, what string, st *v2.Status, want string) {
	t.Helper()
	if want == "" {
		if st.GetCode() != v2.Code_OK {
			t.Errorf("%s: %v %q, want OK", what, st.GetCode(), st.GetMessage())
		}
		return
	}
	if st.GetCode() != v2.Code_UNAUTHORIZED || st.GetMessage() != want {
		t.Errorf("%s: %v %q, want UNAUTHORIZED %q", what, st.GetCode(), st.GetMessage(), want)
	}
}

// wantErr is wantStatus for an error of the client package.
func wantErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		wantStatus(t, what, &v2.Status{Code: v2.Code_OK}, want)
		return
	}
	var se *client.StatusError
	if !errors.As(err, &se) {
		t.Errorf("%s: %v, want a status", what, err)
		return
	}
	wantStatus(t, what, &v2.Status{Code: v2.Code(se.Code), Message: se.Message}, want)
}
