package conformance_test

import (
	"context"
	"os"
	"testing"

	"github.com/rmqflow/rmqflow/brokeradmin"
	"github.com/rmqflow/rmqflow/conformance"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestRealBroker runs every scenario against the real RocketMQ broker that
// `make test` starts (RMQFLOW_ENDPOINT, RMQFLOW_AUTH_ENDPOINT for its proxy
// with authentication and ACLs on, and RMQFLOW_BROKER_ADDR for the broker's
// own remoting port, which admin requests go to).
func TestRealBroker(t *testing.T) {
	addr := rmqtest.BrokerAddr()
	conformance.Run(t, conformance.Target{
		Name: "rocketmq", Endpoint: rmqtest.Endpoint(t), AuthEndpoint: os.Getenv(rmqtest.EnvAuthEndpoint),
		LiteDispatch: func(ctx context.Context, group, clientID string) error {
			return brokeradmin.TriggerLiteDispatch(ctx, addr, group, clientID)
		},
	})
}
