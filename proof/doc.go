// Package proof holds rmqflow's whole-system proofs, run as their own test
// target (build tag "proof"; scripts/test.sh runs them after the main suite,
// `make crash` runs them bigger):
//
//   - the crash suite: a child process consuming a lite main topic with the
//     Runner is SIGKILLed ten times mid-stream, then a clean run finishes the
//     stream; nothing is lost, duplicates stay within the in-flight window of
//     each crash, and every child run handles each lite topic in order. Once
//     through the standalone emulator (rmqflow broker), once on the real
//     broker with a proxy restart mid-stream;
//   - the multi-process group: four processes of one wildcard group share a
//     stream; each message is handled by exactly one of them and each lite
//     topic stays in order across them;
//   - the proxy restart: a lite consumer keeps receiving after the proxy alone
//     restarts (its lite subscription is sent again when its session
//     reconnects).
//
// The tests restart the real broker's proxy, which disturbs every other test
// using it for about 15 s: that is why they are not part of `go test ./...`.
// The child program is proof/internal/child; the ledger that checks what the
// children handled is in this package (ledger.go) and has unit tests of its
// own that run with the main suite.
package proof
