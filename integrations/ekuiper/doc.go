// Package rmqkuiper is a RocketMQ 5 source and sinks for LF Edge eKuiper
// (v2.4.0), built on rmqflow, and the rmqflow-sql server (cmd/rmqflow-sql)
// that compiles them into eKuiper.
//
// The source "rocketmq" receives with Pop and, in its default ack-mode
// "sink", does not ack by itself. Each row carries its message's metadata
// (meta(rocketmq_lite_topic), meta(rocketmq_message_id), ...) and a sequence
// number, rocketmq_seq, in the order the source ingested it. The rule's
// acking sinks settle the messages: the sink "rocketmq" (which writes to
// RocketMQ) and the sink "rocketmq_ack" (which only acks, or wraps another
// sink and acks after it) report, once a call succeeded, the highest
// rocketmq_seq it delivered; every message of the rule that all acking sinks
// passed is acked — the rows a WHERE clause dropped before it and the rows
// folded into a window's result included. A failed call leaves the messages
// up to its rows to come back when their invisibility ends. When the source
// is idle, the rule's own metrics tell it whether pending rows were dropped
// (idle.go). Before a rule runs, the source checks over eKuiper's REST API
// that eKuiper can neither drop nor reorder its rows (rulecheck.go).
//
// See docs/sql.md for the options, the semantics per rule shape and the
// tests.
package rmqkuiper
