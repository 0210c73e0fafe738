// Command rmqflow-connect is Benthos with RocketMQ 5: Benthos's own CLI with
// its core components and rmqflow's rocketmq input, rocketmq output and
// rocketmq_ack processor.
//
//	rmqflow-connect run config.yaml
//	rmqflow-connect lint config.yaml
//	rmqflow-connect list inputs
package main

import (
	"context"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/rmqflow/rmqflow/integrations/benthos"
)

func main() {
	service.RunCLI(context.Background(),
		service.CLIOptSetBinaryName("rmqflow-connect"),
		service.CLIOptSetProductName("rmqflow-connect"),
		service.CLIOptSetDocumentationURL("https://github.com/rmqflow/rmqflow/blob/main/docs/benthos.md"),
	)
}
