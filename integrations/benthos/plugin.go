// Package rmqbenthos brings RocketMQ 5 (through rmqflow) to Benthos v4: a
// `rocketmq` input, a `rocketmq` output and a `rocketmq_ack` processor.
//
// Importing the package registers the three components in Benthos's global
// environment; Register adds them to another one. The rmqflow-connect binary
// (cmd/rmqflow-connect) is Benthos's own CLI with its core components and
// these. docs/benthos.md in the rmqflow repository describes the delivery
// semantics and every option.
package rmqbenthos

import (
	"github.com/redpanda-data/benthos/v4/public/service"
)

func init() {
	if err := Register(service.GlobalEnvironment()); err != nil {
		panic(err)
	}
}

// Register adds the rocketmq input, the rocketmq output and the
// rocketmq_ack processor to env.
func Register(env *service.Environment) error {
	if err := env.RegisterBatchInput("rocketmq", inputSpec(), newInput); err != nil {
		return err
	}
	if err := env.RegisterBatchOutput("rocketmq", outputSpec(), newOutput); err != nil {
		return err
	}
	return env.RegisterBatchProcessor("rocketmq_ack", ackSpec(), newAckProcessor)
}
