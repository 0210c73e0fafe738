package rmqfake_test

import (
	"errors"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestACL: with Normal users, requests are checked against their ACL entries
// as the 5.5.0 proxy checks them (notes/research/auth-acl.md): sends need Pub
// on the topic, receives Sub on the group and then on the topic; the most
// specific matching entry decides (a literal name over a prefix); a later
// entry for the same resource replaces the earlier, as mqadmin createAcl
// does on 5.5.0 (conformance t); an entry limited to other source addresses
// does not match; a super user is never checked; a disabled user is refused. Every refusal is
// UNAUTHORIZED with the proxy's text.
func TestACL(t *testing.T) {
	t.Parallel()
	s, _ := start(t,
		rmqfake.Credentials("admin", "admin-secret"), // a super user: sets things up
		rmqfake.User("pub", "pub-secret"),
		rmqfake.User("sub", "sub-secret"),
		rmqfake.User("pfx", "pfx-secret"),
		rmqfake.User("ip", "ip-secret"),
		rmqfake.User("tie", "tie-secret"),
		rmqfake.User("boss", "boss-secret", rmqfake.SuperUser()),
		rmqfake.User("off", "off-secret", rmqfake.DisabledUser()),
		rmqfake.User("any", "any-secret"),
		rmqfake.WithACL(
			rmqfake.ACLEntry{User: "pub", Resource: "Topic:" + normalTopic, Actions: []string{"Pub"}},
			rmqfake.ACLEntry{User: "sub", Resource: "Group:" + normalGroup, Actions: []string{"Sub"}},
			rmqfake.ACLEntry{User: "sub", Resource: "Topic:" + normalTopic, Actions: []string{"sub"}},
			rmqfake.ACLEntry{User: "pfx", Resource: "Topic:t-*", Actions: []string{"Pub"}},
			rmqfake.ACLEntry{User: "pfx", Resource: "Topic:" + normalTopic, Actions: []string{"Pub"}, Deny: true},
			rmqfake.ACLEntry{User: "ip", Resource: "*", Actions: []string{"All"}, SourceIPs: []string{"10.0.0.0/8"}},
			rmqfake.ACLEntry{User: "tie", Resource: "Topic:" + liteTopic, Actions: []string{"Pub"}, Deny: true},
			rmqfake.ACLEntry{User: "tie", Resource: "Topic:" + liteTopic, Actions: []string{"Pub"}},
			rmqfake.ACLEntry{User: "tie", Resource: "Topic:" + normalTopic, Actions: []string{"Pub"}},
			rmqfake.ACLEntry{User: "tie", Resource: "Topic:" + normalTopic, Actions: []string{"Sub"}},
			rmqfake.ACLEntry{User: "any", Resource: "*", Actions: []string{"All"}},
		))
	as := func(user string) *client.Client {
		return newClient(t, s, client.Config{Credentials: client.Credentials{AccessKey: user, AccessSecret: user + "-secret"},
			RequestTimeout: 2 * time.Second})
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		var se *client.StatusError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want it allowed", what, err)
		case want != "" && (!errors.As(err, &se) || se.Code != client.CodeUnauthorized || se.Message != want):
			t.Errorf("%s: %v, want UNAUTHORIZED %q", what, err, want)
		}
	}
	sendTo := func(c *client.Client, topic, lite string) error {
		_, err := c.Send(ctxT(t), &client.Message{Topic: topic, LiteTopic: lite, Body: []byte("x")})
		return err
	}
	const from = " from 127.0.0.1, "

	refused("pub sends", sendTo(as("pub"), normalTopic, ""), "")
	refused("sub sends", sendTo(as("sub"), normalTopic, ""), "User:sub has no permission to access Topic:"+normalTopic+from+"no matched policies.")
	refused("pfx sends to the topic its literal entry denies", sendTo(as("pfx"), normalTopic, ""), "User:pfx has no permission to access Topic:"+normalTopic+from+"the decision is deny.")
	refused("pfx sends a lite message (the resource is the main topic)", sendTo(as("pfx"), liteTopic, "any-lite"), "")
	refused("ip sends from an address its entry does not list", sendTo(as("ip"), normalTopic, ""), "User:ip has no permission to access Topic:"+normalTopic+from+"no matched policies.")
	refused("tie: the later Allow replaced the Deny", sendTo(as("tie"), liteTopic, "x"), "")
	refused("tie: the later Sub replaced the Pub", sendTo(as("tie"), normalTopic, ""), "User:tie has no permission to access Topic:"+normalTopic+from+"no matched policies.")
	refused("a super user", sendTo(as("boss"), liteTopic, "x"), "")
	refused("a disabled user", sendTo(as("off"), normalTopic, ""), "User:off is disabled.")

	// Receives: Sub on the group first, then on the topic.
	req := normalReq(time.Minute)
	_, err := as("pub").Receive(ctxT(t), req)
	refused("pub receives", err, "User:pub has no permission to access Group:"+normalGroup+from+"no matched policies.")
	reader := as("sub")
	if _, err := reader.OpenSession(ctxT(t), client.SessionConfig{Type: client.SimpleConsumer, Group: normalGroup,
		Subscriptions: []client.Subscription{{Topic: normalTopic}}}); err != nil {
		t.Fatalf("sub's consumer session (Sub on its group and topic): %v", err)
	}
	got := receiveNow(t, reader, req)
	if len(got) != 1 {
		t.Fatalf("sub received %d messages, want the one pub sent", len(got))
	}
	// ChangeInvisibleDuration checks the group alone (5.5.0); ack checks both.
	_, err = reader.ChangeInvisibleDuration(ctxT(t), client.ChangeInvisibleRequest{Group: normalGroup, Topic: "t-any",
		MessageID: got[0].MessageID, ReceiptHandle: got[0].ReceiptHandle, InvisibleDuration: time.Minute})
	var se *client.StatusError
	if errors.As(err, &se) && se.Code == client.CodeUnauthorized {
		t.Errorf("ChangeInvisibleDuration naming a topic sub may not read: %v, want no ACL refusal (5.5.0 checks the group only)", err)
	}
	_, err = as("pub").Ack(ctxT(t), normalGroup, normalTopic, []client.AckEntry{entry(got[0])})
	refused("pub acks", err, "User:pub has no permission to access Group:"+normalGroup+from+"no matched policies.")

	// A route needs Pub or Sub on the topic; a session's settings, Pub on
	// each topic it publishes.
	if _, err := as("sub").QueryRoute(ctxT(t), normalTopic); err != nil {
		t.Errorf("sub's route of a topic it may read: %v", err)
	}
	_, err = as("pub").OpenSession(ctxT(t), client.SessionConfig{Type: client.Producer, Topics: []string{liteTopic}})
	refused("pub's producer session for a topic it may not write", err, "User:pub has no permission to access Topic:"+liteTopic+from+"no matched policies.")

	// A blank topic or group is refused as the proxy refuses it, before any
	// entry is looked at: even for a user allowed everything.
	anyone := as("any")
	raw := v2.NewMessagingServiceClient(anyone.Conn())
	blank := func(what string, st *v2.Status, err error, want string) {
		t.Helper()
		if err != nil || st.GetCode() != v2.Code_UNAUTHORIZED || st.GetMessage() != want {
			t.Errorf("%s: %v %v, want UNAUTHORIZED %q", what, st, err, want)
		}
	}
	sr, err := raw.SendMessage(anyone.OutgoingContext(ctxT(t)), &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: &v2.Resource{Name: " "},
		SystemProperties: &v2.SystemProperties{MessageId: "01", BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL}, Body: []byte("x")}}})
	blank("a send to a blank topic", sr.GetStatus(), err, "topic is null.")
	rr, err := raw.RecallMessage(anyone.OutgoingContext(ctxT(t)), &v2.RecallMessageRequest{Topic: &v2.Resource{}, RecallHandle: "h"})
	blank("a recall on a blank topic", rr.GetStatus(), err, "topic is null.")
	er, err := raw.EndTransaction(anyone.OutgoingContext(ctxT(t)), &v2.EndTransactionRequest{Topic: &v2.Resource{}, MessageId: "m", TransactionId: "x"})
	blank("an end of transaction on a blank topic", er.GetStatus(), err, "topic is null.")
	for what, c := range map[string]struct {
		st   *v2.Settings
		want string
	}{
		"publishing a blank topic":       {&v2.Settings{ClientType: v2.ClientType_PRODUCER.Enum(), PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: []*v2.Resource{{Name: ""}}}}}, "topic is null."},
		"subscribing with a blank group": {consumerSettings(v2.ClientType_SIMPLE_CONSUMER, "", normalTopic), "group is null."},
		"subscribing to a blank topic":   {consumerSettings(v2.ClientType_SIMPLE_CONSUMER, normalGroup, ""), "topic is null."},
	} {
		tc, err := telemetry(t, anyone, anyone.OutgoingContext(ctxT(t)), c.st)
		blank("settings "+what, tc.GetStatus(), err, c.want)
	}
}
