// Package rmqkuiper is a RocketMQ 5 source and sink for LF Edge eKuiper,
// built on rmqflow, and the rmqflow-sql server (cmd/rmqflow-sql) that
// compiles them into eKuiper.
//
// The source `rocketmq` receives with Pop and never acks. Each row carries
// its message's metadata (meta(rocketmq_lite_topic), meta(rocketmq_handle),
// ...) and a sequence number, rocketmq_seq, in the order the source
// ingested it. A rule's messages are acked from its sink side: the sink
// `rocketmq` (which writes to RocketMQ) and the sink `rocketmq_ack` (which
// only acks, or wraps another sink and acks after it) ack, once a write
// succeeded, every message of the rule up to the highest rocketmq_seq it
// wrote — the rows a WHERE clause dropped before it and the rows folded into
// a window's result included. A row whose write failed is released at once
// and delivered again. See docs/ekuiper.md.
package rmqkuiper
