package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// -users FILE turns on the signature and ACL checks with the file's users
// and entries.
func TestBrokerUsersFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(path, []byte("user w w-secret\nacl w Topic:orders Pub allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := brokerWith(t, "-topic", "orders:normal", "-topic", "other:normal", "-users", path)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(ak, sk, topic string) error {
		c, err := client.New(client.Config{Endpoints: s.Addr(), RequestTimeout: 2 * time.Second,
			Credentials: client.Credentials{AccessKey: ak, AccessSecret: sk}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		_, err = c.Send(ctx, &client.Message{Topic: topic, Body: []byte("x")})
		return err
	}
	if err := send("w", "w-secret", "orders"); err != nil {
		t.Errorf("w sends to orders: %v", err)
	}
	for _, c := range []struct{ ak, topic, want string }{
		{"", "orders", "username cannot be null."},
		{"w", "other", "User:w has no permission to access Topic:other from 127.0.0.1, no matched policies."},
	} {
		var se *client.StatusError
		sk := ""
		if c.ak != "" {
			sk = c.ak + "-secret"
		}
		if err := send(c.ak, sk, c.topic); !errors.As(err, &se) || se.Code != client.CodeUnauthorized || se.Message != c.want {
			t.Errorf("%q sends to %s: %v, want UNAUTHORIZED %q", c.ak, c.topic, err, c.want)
		}
	}

	fs, f := brokerFlagSet(&bytes.Buffer{})
	if err := fs.Parse([]string{"-users", filepath.Join(t.TempDir(), "missing.txt")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.options(); err == nil {
		t.Error("-users naming a missing file: no error")
	}
	// A file with no user line would give a broker that checks nothing,
	// under a flag that promises signed requests.
	empty := filepath.Join(t.TempDir(), "empty.txt")
	if err := os.WriteFile(empty, []byte("# none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, f = brokerFlagSet(&bytes.Buffer{})
	if err := fs.Parse([]string{"-users", empty}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.options(); err == nil || !strings.Contains(err.Error(), "no user") {
		t.Errorf("-users naming a file without a user line: %v, want an error", err)
	}
}
