// Package quickstart runs the quickstart command blocks of README.md,
// docs/*.md, integrations/*/README.md and bench/README.md as they are
// written, on the embedded emulator (rmqflow broker).
//
// A ```sh block is run when an HTML comment names it right above it:
//
//	<!-- quickstart NAME [wait=ADDR,ADDR] [vary=TOKEN,TOKEN] [timeout=DURATION] -->
//
// goes on in a later block of the same file (prose and skipped blocks
// between, no other run block), marked
//
//	<!-- quickstart NAME part=N -->
//
// (N = 2, 3, ...; the parts run in one shell, with part 1's attributes),
// and is left out with a reason:
//
//	<!-- quickstart-skip: REASON -->
//
// (README's `<!-- external-module -->` block is TestExternalModule's.) Every
// ```sh block of those files carries one of the markers (TestQuickstartInventory).
//
// A block runs in one sh, from the repository root, with HOME a fresh
// directory and no RMQFLOW_* variables (make test sets RMQFLOW_ENDPOINT to the
// real broker), command by command: a command is a line, or several when a
// line ends with `\` or a quote is still open. The lines are written to the
// shell as they are; between two commands the harness only redirects the
// output to a file per command, reads the exit status, and waits for the
// shell to go on. A command must exit 0. Comment lines right after a command
// (no blank line between) are the output the document shows: each must match a
// line the command printed, in order (other lines may come between); `...`
// in them matches any text, and each vary TOKEN any run of non-space
// characters (a port chosen at run time, a duration). A command ending in `&`
// runs on in the background: it is ready once its shown output has appeared
// and, for the i-th background command, the i-th wait ADDR accepts
// connections. When the block ends (or fails, or its timeout passes, 90 s by
// default) its whole process group is stopped (SIGTERM, then SIGKILL).
//
// Blocks that wait on the same address run one after the other; the others
// in parallel. A wait address already in use when a block starts fails it
// (another process would answer in its place).
//
// `go run` and `go build -o FILE` of the repository's own commands
// (./cmd/rmqflow, ./cmd/rmqflow-connect, ./examples/litework,
// ./cmd/rmqflow-sql -tags core), resolved from the line's directory and -C, are
// answered by a `go` first on PATH with a binary built once per test run
// (under -race when the test is, so that the build cache the later steps of
// make test use is shared): a go run links a binary again at every call,
// seconds each. Any other go command goes to the real go. The same binaries
// are on PATH under their own names for lines that call them so.
//
// Cost (2 cores, -race, 2026-12-03): the blocks on 127.0.0.1:8081 run one
// after the other, about 60 s in all (sql-worked 21 s: two 10-second windows;
// readme-cli 15 s: the emulator's 5-to-15-second lite backlog dispatch, as the
// README says; beam-prism 13 s; benthos-throttle 6 s; rmqfake-standalone 3 s),
// about 80 s since ekuiper-readme (the same rule as sql-worked, 18 s under
// load) came on 2026-12-04,
// the demo's 30 s beside them; the builds are the ones the later steps of make
// test make anyway (same flags, shared cache), but for linking each binary.
//
// A fresh module cache does not matter here: no block installs or runs a
// module from outside the repository.
package quickstart
