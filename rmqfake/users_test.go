package rmqfake_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestParseUsers: the users file (scripts/rocketmq/users.txt's format) gives
// users and ACL entries; a bad line is an error naming it.
func TestParseUsers(t *testing.T) {
	t.Parallel()
	opts, err := rmqfake.ParseUsers(strings.NewReader(`
# comment
user w w-secret
acl w Topic:` + normalTopic + `,Topic:t-x-* Pub allow   # two resources
acl w Topic:t-x-y Pub deny
user r r-secret
acl r Topic:` + normalTopic + ` Sub allow ip=10.0.0.0/8
user boss boss-secret super
user off off-secret disabled
`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := start(t, opts...)
	as := func(user string) *client.Client {
		return newClient(t, s, client.Config{Credentials: client.Credentials{AccessKey: user, AccessSecret: user + "-secret"},
			RequestTimeout: 2 * time.Second})
	}
	send := func(user, topic string) string {
		_, err := as(user).Send(ctxT(t), &client.Message{Topic: topic, Body: []byte("x")})
		var se *client.StatusError
		if errors.As(err, &se) {
			return se.Message
		}
		if err != nil {
			return err.Error()
		}
		return "OK"
	}
	const from = " from 127.0.0.1, "
	for _, c := range []struct{ user, topic, want string }{
		{"w", normalTopic, "OK"},
		{"w", "t-x-y", "User:w has no permission to access Topic:t-x-y" + from + "the decision is deny."},
		{"r", normalTopic, "User:r has no permission to access Topic:" + normalTopic + from + "no matched policies."},
		{"boss", normalTopic, "OK"},
		{"off", normalTopic, "User:off is disabled."},
	} {
		if got := send(c.user, c.topic); got != c.want {
			t.Errorf("%s sends to %s: %q, want %q", c.user, c.topic, got, c.want)
		}
	}

	for _, bad := range []string{
		"user w",                      // no password
		"user w s admin",              // unknown option
		"acl w Topic:x Pub allow",     // no such user above
		"user w s\nacl w Topic:x Pub", // no decision
		"user w s\nacl w Topic:x Pub ok",
		"user w s\nacl w Topic:x Pub allow 10.0.0.1", // not ip=
		"user w s\nacl w Queue:x Pub allow",          // not a resource type
		"user w s\nacl w Topic:x Send allow",         // not an action
		"group g",
		"user w s\nacl w Topic:x Pub allow ip=10.0.0.1 ip=10.0.0.2", // ip= twice: the first was dropped
		"# no user line: a server given this file checked nothing",
		"",
	} {
		if _, err := rmqfake.ParseUsers(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseUsers(%q): no error", bad)
		}
	}
	// Errors name the line, and never quote what follows a user's name: a
	// password with a space in it would show its second half.
	for bad, want := range map[string]string{
		"user w s\nuser bob hunter2 tail":      "line 2",
		"user w s\n\nacl w Topic:x Pubb allow": "line 3",
	} {
		_, err := rmqfake.ParseUsers(strings.NewReader(bad))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "tail") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseUsers(%q) = %v, want an error naming %s and no password", bad, err, want)
		}
	}
}

// TestProjectUsers: scripts/rocketmq/users.txt loads (conformance scenario t
// runs on it).
func TestProjectUsers(t *testing.T) {
	t.Parallel()
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.WithProjectUsers())
	c := newClient(t, s, client.Config{Credentials: client.Credentials{AccessKey: "rmqflow-root", AccessSecret: "root-secret"}})
	if _, err := c.Send(ctxT(t), &client.Message{Topic: "rmqflow-auth-u", Body: []byte("x")}); err != nil {
		t.Errorf("the super user of users.txt sends: %v", err)
	}
}
