// Package rmqio is an Apache Beam Go SDK IO for Apache RocketMQ 5 over gRPC,
// built on rmqflow: Read receives with Pop and never acks (each element
// carries its receipt handle), Ack acks the handles where the work finishes,
// Throttle holds hot lite topics back with rmqflow's fair-share policy, Retry
// gives the messages whose work failed back to the broker with a backoff —
// and, once a message's own returns reach its safety valve, moves it to its
// group's dead-letter queue (acked only if asked) — and Write produces
// through an rmqflow Sink and acks the messages a record was made from once
// it is stored.
//
// Delivery is at-least-once: a message is acked only by Ack (or by Write,
// for the messages a stored record was made from), behind a Reshuffle, after
// the bundle that worked it was committed; a message whose bundle fails, or
// whose ack comes after its invisibility ended, is delivered again. Read is
// an unbounded splittable DoFn that checkpoints itself and refuses dynamic
// splits, so it runs on Prism (the default runner of beamx.Run), on the
// portable Flink runner and on Dataflow. See docs/beam.md.
package rmqio
