package conformance_test

import (
	"testing"

	"github.com/rmqflow/rmqflow/conformance"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestFake runs every scenario against rmqfake, the embedded emulator, with
// the fixtures the real broker gets (scripts/rocketmq/fixtures.txt), its
// broker.conf TTL settings and the real clock: the scenarios are the same,
// unchanged.
func TestFake(t *testing.T) {
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(),
		// broker.conf's TTL settings of the real target (scenario u).
		rmqfake.MinLiteTTL(conformance.MinLiteTTL), rmqfake.LiteTTLCheckInterval(conformance.LiteTTLCheckInterval))
	conformance.Run(t, conformance.Target{Name: "rmqfake", Endpoint: s.Addr()})
}
