// Package rmqfake is an in-process emulator of a RocketMQ 5 proxy and broker,
// in the spirit of franz-go's kfake and Pub/Sub's pstest: a real gRPC server
// on 127.0.0.1 that speaks apache.rocketmq.v2.MessagingService, so that any
// RocketMQ 5 gRPC client (rmqflow's client, the official Go client) runs
// against it unchanged, with no Java and no broker to start.
//
// # What it emulates
//
// Topics are normal, FIFO, delay or LITE (a main topic whose messages each
// name a lite topic, an ordered queue of its own). Consumers receive with the
// Pop model: ReceiveMessage long-polls a batch (at most 32) that stays
// invisible to the group for its invisible duration (10 s .. 12 h); each
// message carries a self-contained receipt handle that any client of the
// group can pass to AckMessage (many entries, one result each) or
// ChangeInvisibleDuration (which returns a new handle). Unacked messages come
// back by themselves; after a group's RetryMax redeliveries they go to its
// DLQ, %DLQ%<group>. Lite groups bind one main topic and receive either every
// lite topic (wildcard, after a COMPLETE_ADD) or the ones a client added
// (PARTIAL_ADD, with an optional starting offset). Namespaces, tag filters and
// signed requests (access key and secret) are supported.
//
// Behaviour follows what RocketMQ 5.5.0 really does, quirks included, as
// pinned by the conformance suite (github.com/rmqflow/rmqflow/conformance) and
// written down in docs/broker-semantics.md: the old handle still acks after
// ChangeInvisibleDuration until its own invisibility ends, a lite topic delivers one batch at a time, a
// deferred lite head that returns with its successors has delivery attempt 1,
// a lite message past its retries comes back from the DLQ, a batch of lite
// messages in one SendMessage is never delivered, a client must send
// Telemetry settings before it receives, LITE_SIMPLE_CONSUMER is refused so
// that clients fall back to LITE_PUSH_CONSUMER, and so on. docs/rmqfake.md
// lists where rmqfake deliberately differs (it keeps nothing on disk, for
// one).
//
// # Using it in tests
//
//	s := rmqfake.NewForTest(t) // stopped when the test ends
//	s.CreateTopic("agents", rmqfake.TopicLite)
//	s.CreateGroup("agents-g", rmqfake.LiteBind("agents"), rmqfake.Wildcard())
//	c, _ := client.New(client.Config{Endpoints: s.Addr()})
//
// [WithProjectFixtures] creates the fixtures of scripts/rocketmq/fixtures.txt
// so that a test can run against rmqfake as against the real broker `make
// test` starts; [AutoCreate] creates topics and groups on first use instead.
//
// # Time
//
// Every timer (invisibility, redelivery, delayed messages, long polling,
// injected latency) follows the server's [Clock]. With a [ManualClock] a test
// lets 30 minutes of invisibility pass in a microsecond with Advance; use
// [Server.WaitForPollers] or [Server.WaitFor] to know a long poll is parked
// before advancing past its window.
//
// # Inspection and faults
//
// [Server.Stats] reports backlog, in-flight, acked and dead-lettered counts
// per topic, lite topic and group. [Server.Intercept] observes, fails, delays,
// answers or loses the response of (handles, then fails) any call,
// [Server.SetFault] adds latency and random errors per method,
// [Server.BreakReceiveStreams] cuts receive streams half-way, and
// [Server.Restart] emulates a broker restart that keeps stored messages.
//
// The command "rmqflow broker" serves the emulator standalone.
package rmqfake
