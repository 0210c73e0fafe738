package client_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestSystemPropertiesAreRefused pins RefusedPropertyNames to the broker:
// every name is refused as a user property with ILLEGAL_MESSAGE_PROPERTY_KEY,
// on the real broker and on rmqfake; a plain name, and INNER_MULTI_DISPATCH
// (which the broker sets on lite messages but does not refuse), are accepted.
func TestSystemPropertiesAreRefused(t *testing.T) {
	for _, target := range []string{"rmqfake", "real"} {
		t.Run(target, func(t *testing.T) {
			topic := "rmqflow-normal-b"
			var ep string
			if target == "real" {
				ep = rmqtest.Endpoint(t)
			} else {
				s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures())
				ep = s.Addr()
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := client.New(client.Config{Endpoints: ep})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			if _, err := c.OpenSession(ctx, client.SessionConfig{Type: client.Producer, Topics: []string{topic}}); err != nil {
				t.Fatal(err)
			}
			send := func(k string) error {
				_, err := c.Send(ctx, &client.Message{Topic: topic, Body: []byte("x"), Properties: map[string]string{k: "v"}})
				return err
			}
			var accepted []string
			for _, k := range client.RefusedPropertyNames() {
				var se *client.StatusError
				if err := send(k); !errors.As(err, &se) || se.Code != client.CodeIllegalMessagePropertyKey {
					accepted = append(accepted, k+" ("+errString(err)+")")
				}
			}
			sort.Strings(accepted)
			if len(accepted) > 0 {
				t.Errorf("%d names of RefusedPropertyNames the broker takes as user properties: %v", len(accepted), accepted)
			}
			for _, k := range []string{"tenant", "INNER_MULTI_DISPATCH"} {
				if err := send(k); err != nil {
					t.Errorf("property %s: %v", k, err)
				}
			}
			for _, k := range []string{"INNER_MULTI_DISPATCH", "LITE_TOPIC", "__STARTDELIVERTIME", "KEYS"} {
				if !client.IsSystemProperty(k) {
					t.Errorf("IsSystemProperty(%s) = false", k)
				}
			}
			if client.IsSystemProperty("tenant") {
				t.Error("IsSystemProperty(tenant) = true")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}
