// Package rmqwatermill is a Watermill Pub/Sub (github.com/ThreeDotsLabs/watermill)
// for Apache RocketMQ 5 over gRPC, built on rmqflow.
//
// A Watermill topic is a lite topic of one LITE main topic (ModeLite: one per
// tenant, session or conversation) or a RocketMQ topic (ModeSimple). The
// Publisher sends through rmqflow sinks; the Subscriber receives with Pop
// through an rmqflow source and runner: Ack acks the message, Nack defers it
// on the broker (it comes back after a backoff), and nothing is acked before
// the handler says so. See docs/watermill.md.
package rmqwatermill
