package conformance_test

import (
	"context"
	"testing"

	"github.com/rmqflow/rmqflow/conformance"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestFake runs every scenario against rmqfake, the embedded emulator, with
// the fixtures the real broker gets (scripts/rocketmq/fixtures.txt), its
// broker.conf TTL settings and the real clock: the scenarios are the same,
// unchanged. As on the real target, the auth endpoint is a second server with
// the users and ACLs of scripts/rocketmq/users.txt.
func TestFake(t *testing.T) {
	// broker.conf's TTL settings of the real target (scenario u).
	ttl := []rmqfake.Option{rmqfake.MinLiteTTL(conformance.MinLiteTTL), rmqfake.LiteTTLCheckInterval(conformance.LiteTTLCheckInterval)}
	s := rmqfake.NewForTest(t, append(ttl, rmqfake.WithProjectFixtures())...)
	auth := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.WithProjectUsers())
	conformance.Run(t, conformance.Target{Name: "rmqfake", Endpoint: s.Addr(), AuthEndpoint: auth.Addr(),
		LiteDispatch: func(_ context.Context, group, clientID string) error { return s.TriggerLiteDispatch(group, clientID) }})
}
