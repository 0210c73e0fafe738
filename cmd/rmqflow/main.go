// Command rmqflow is rmqflow's command-line tool:
//
//	rmqflow demo [flags]           fair per-lite-topic throttling, shown on the emulator
//	rmqflow produce [flags]        send messages
//	rmqflow consume [flags]        print messages; ack, defer or leave them
//	rmqflow bench [flags]          rmqflow against the official clients, ratios
//	rmqflow broker [flags]         run rmqfake, the embedded RocketMQ 5 emulator
//	rmqflow lite-dispatch [flags]  make a broker offer a lite group's backlog now
//	rmqflow version                print the version
//	rmqflow help [command]         show help
//
// Run "rmqflow help broker" for the broker's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// command is one subcommand. Later issues add demo, produce, consume and
// bench here.
type command struct {
	name    string
	summary string
	// run runs the command with its arguments and returns the exit code.
	run func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"demo", "show fair per-lite-topic throttling on the embedded emulator (or a real broker)", runDemo},
		{"produce", "send messages from flags, a file or stdin", runProduce},
		{"consume", "print messages from a source; ack, defer or leave them", runConsume},
		{"bench", "measure rmqflow against the official clients on one broker (in a checkout)", runBench},
		{"broker", "run rmqfake, the embedded RocketMQ 5 emulator, as a standalone server", runBroker},
		{"lite-dispatch", "make a broker offer a lite group's backlog to its consumers now (its remoting port)", runLiteDispatch},
		{"version", "print the version", runVersion},
		{"help", "show help for rmqflow or one of its commands", runHelp},
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run dispatches to a subcommand and returns the exit code: 0 on success, 1
// on failure, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	if name == "-h" || name == "-help" || name == "--help" {
		name = "help"
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "rmqflow: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "rmqflow is a toolkit for RocketMQ 5 lite topics and the Pop model.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w, "  rmqflow <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "rmqflow help <command>" for a command's flags.`)
}

const helpUsage = `Usage: rmqflow help [command]

Without a command, lists the commands; with one, prints its flags, examples,
environment and exit codes (as "rmqflow <command> -help" does).

Examples:
  rmqflow help
  rmqflow help consume

Exit codes: 0 done, 2 unknown command.
`

func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stdout)
		return 0
	case len(args) > 1:
		fmt.Fprint(stderr, helpUsage)
		return 2
	case args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		fmt.Fprint(stdout, helpUsage)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run([]string{"-help"}, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "rmqflow help: unknown command %q\n", args[0])
	return 2
}

const versionUsage = `Usage: rmqflow version [-json]

Prints rmqflow's version (the module version, "(devel)" for a build from a
work tree), the Go version and the platform; with -json as
{"version","go","os","arch"}.

Examples:
  rmqflow version
  rmqflow version -json

Exit codes: 0 done, 2 usage error.
`

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	asJSON := fs.Bool("json", false, "print a JSON line")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, versionUsage)
		return 0
	case err != nil:
		return 2
	case fs.NArg() > 0:
		fmt.Fprint(stderr, versionUsage)
		return 2
	}
	if *asJSON {
		jsonLine(stdout, map[string]string{"version": version(), "go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH})
		return 0
	}
	fmt.Fprintf(stdout, "rmqflow %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// version is the main module's version as the Go toolchain recorded it
// ("(devel)" for a build from a work tree).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
