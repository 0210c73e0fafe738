package rmqkuiper

import "github.com/lf-edge/ekuiper/v2/pkg/modules"

// Register adds the source "rocketmq" and the sinks "rocketmq" and
// "rocketmq_ack" to eKuiper's built-in modules. The rmqflow-sql server calls
// it (through RegisterWith, which also says how the source reaches eKuiper's
// REST API) before starting eKuiper; a custom eKuiper binary can too.
func Register() {
	modules.RegisterSource("rocketmq", NewSource)
	modules.RegisterSink("rocketmq", NewSink)
	modules.RegisterSink("rocketmq_ack", NewAckSink)
}
