// Package client is a RocketMQ 5 gRPC client for the Pop consumption model and
// lite topics, driving the official generated stubs
// (github.com/apache/rocketmq-clients/golang/v5/protocol/v2) directly.
//
// # Identity and sessions
//
// A [Client] is one connection to a proxy access point under one client id. The
// broker keeps one role per client id, so a Client opens at most one [Session]:
// a Telemetry stream announcing the role (producer, simple consumer, lite
// consumer), with periodic heartbeats and, for wildcard lite consumers, the
// periodic COMPLETE_ADD that keeps the subscription alive. Receiving needs a
// session; acking does not (see docs/broker-semantics.md, scenario j).
//
// # Calls
//
// [Client.Receive] long-polls once (an empty poll is an empty result),
// [Client.Ack] acks many entries in one RPC with one result per entry,
// [Client.ChangeInvisibleDuration] returns the new receipt handle,
// [Client.Send] sends messages, [Client.SyncLiteSubscription] manages lite
// subscriptions. Every call takes a context; when it has no earlier deadline,
// Config.RequestTimeout bounds unary calls and the long-polling window plus
// RequestTimeout bounds a receive.
//
// # Errors
//
// A non-OK status from the broker is a *[StatusError] carrying the RocketMQ
// [Code]; test for codes with errors.Is and the sentinels (ErrInvalidReceiptHandle,
// ErrIllegalLiteTopic, ...). Transport failures wrap the gRPC error, so
// status.FromError still works. [IsRetriable] tells which are worth a retry.
// Credentials never appear in errors or logs.
package client
