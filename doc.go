// Package rmqflow consumes and produces Apache RocketMQ 5 messages through the
// gRPC Pop model, built for one LITE main topic with a great many lite topics
// (one per tenant, session or conversation). It is the Go counterpart of the
// Flink connector flink-connector-rocketmq-grpc, engine-agnostic so that a
// plain Go service uses it directly.
//
// # Receiving
//
// A [Source] long-polls ReceiveMessage under one consumer identity per bound
// main topic and keeps what it fetched in a bounded queue, with a share per
// bound topic; a full share stops that topic's receiving. It never acks:
// every [AckableMessage] carries a [ReceiptHandle] (credential-free,
// serializable) that whoever finishes the work acks with — an [Acker] in this
// process, or an [AckPool] in any process. Messages that wait in the queue
// are renewed, so each one Next returns has at least half of its
// InvisibleDuration left. A receive failure that retrying cannot fix, or an
// outage longer than MaxOutage, ends the source with a [ReceiveError].
//
// # Acking
//
// An [AckPool] is process-wide and reference-counted (each [AcquireAckPool]
// call is a holder with its own Release); it routes each handle to an ack
// client by its endpoints and namespace, only to the endpoints it was
// configured for ([ErrEndpointNotAllowed]), and coalesces acks into
// multi-entry AckMessage RPCs, giving each caller its own entry's result.
// Every call returns by its context's deadline: [ErrAckNotSent] when nothing
// went out, [ErrAckOutcomeUnknown] when the answer did not come in time. An
// expired handle (client.ErrInvalidReceiptHandle) means the message will be
// delivered again: count it, do not stop. To stop without losing acks, let
// the work in flight ack, then Close the source (see README.md).
//
// # Throttling
//
// A [Throttle] applies a [ThrottlePolicy] — [FairShare], [LiteTopicRateLimit]
// or your own — to ack or defer each message, with safety valves that stop
// deferring a message for ever: a message whose own deferrals reach a valve
// goes to its group's dead-letter queue on the broker, never acked unless
// [ThrottleConfig].OnValve is [ValveAck]. Deferring a lite message pauses its whole lite
// topic on the broker, which hands the fetch budget to the others.
//
// # Leases
//
// With [LeaseConfig] enabled, emitted messages keep being renewed (like the
// Pub/Sub client's lease extension) until they are acked, changed, released
// or left through any [Acker] or method of the source's pool, or handed off by
// encoding their handle; acks use the newest receipt handle.
//
// # Running
//
// A [Runner] is the loop of a plain Go service: bounded concurrency, one
// message of a lite topic at a time and in order even across deferrals (a
// lite topic's later messages wait behind one that was deferred or failed),
// a [Decision] per handler result (only [Ack] acks; [Defer] with a duration
// of zero or less releases), errors and panics deferred with backoff until a
// safety valve hands the message to a [DeadLetterFunc] (such as
// [DeadLetterToSink]) or, without one, to the group's dead-letter queue on
// the broker — a message is judged by its own failures, never dropped by
// default — and a graceful
// shutdown that releases or finishes what was fetched. A [Sink] produces.
//
// What the broker really does, and therefore why these pieces behave as they
// do, is in docs/broker-semantics.md; the design is in docs/grpc-connector.md.
package rmqflow
