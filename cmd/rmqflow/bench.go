package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

const benchUsage = `Usage: rmqflow bench [harness flags]

Runs the benchmark harness of an rmqflow checkout (bench/harness, its own Go
module so that the official clients stay out of rmqflow's): rmqflow's Source
loop and Runner, a raw protocol loop (the ceiling) and the official Go and
Java clients' consumers, each at its strongest, against one broker in one run,
on topics and groups of their own, several repetitions in a random order, with
the broker's own CPU sampled over each timed window. It must run in a
checkout (it builds the peers with go and Maven). Every flag is the
harness's; "rmqflow bench -help" lists them. make bench runs the whole set on
a broker it starts and writes docs/benchmarks.md.

Examples:
  rmqflow bench -quick -endpoint 127.0.0.1:18081
        a 2-minute smoke run (drain only, one repetition, 3 s windows)
  rmqflow bench -emulator -quick -peers rmqflow/loop,rmqflow/runner,raw/raw
        the Go peers on an in-process rmqfake
  rmqflow bench -endpoint 127.0.0.1:18081 -report docs/benchmarks.md
        every scenario; the report and its charts

Exit codes: 0 done; 1 a run failed, or no checkout was found; 2 a bad flag
(or the harness crashed).
`

// runBench builds the harness of the checkout's bench module (into
// .cache/bin, so that its own exit code comes through: `go run` would turn a
// usage error's 2 into 1), runs it with the arguments as given, and returns
// its exit code.
func runBench(args []string, stdout, stderr io.Writer) int {
	help := false
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, benchUsage)
			help = true
			break
		}
	}
	repo, err := findRepo("")
	if err != nil {
		if help {
			// The help was asked for and given; the harness's own flags
			// need the checkout.
			fmt.Fprintln(stdout, "(run it inside an rmqflow checkout to list the harness's flags)")
			return exitOK
		}
		return fail(stderr, "bench", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin := filepath.Join(repo, ".cache", "bin", "rmqflow-bench-harness")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./harness")
	build.Dir = filepath.Join(repo, "bench")
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		return fail(stderr, "bench", fmt.Errorf("building the harness: %w", err))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Join(repo, "bench")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode()
	default:
		return fail(stderr, "bench", err)
	}
}

// findRepo walks up from dir (or the working directory) to the checkout.
func findRepo(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bench", "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("not in an rmqflow checkout (no bench/go.mod above " + dir + ")")
		}
	}
}
