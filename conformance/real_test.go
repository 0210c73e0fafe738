package conformance_test

import (
	"os"
	"testing"

	"github.com/rmqflow/rmqflow/conformance"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestRealBroker runs every scenario against the real RocketMQ broker that
// `make test` starts (RMQFLOW_ENDPOINT, and RMQFLOW_AUTH_ENDPOINT for its
// proxy with authentication and ACLs on).
func TestRealBroker(t *testing.T) {
	conformance.Run(t, conformance.Target{Name: "rocketmq", Endpoint: rmqtest.Endpoint(t), AuthEndpoint: os.Getenv(rmqtest.EnvAuthEndpoint)})
}
