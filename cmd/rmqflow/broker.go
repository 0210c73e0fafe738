package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// brokerExamples are shown by "rmqflow broker -help"; a test runs each
// through the flag parser.
var brokerExamples = []struct{ args, what string }{
	{"-auto-create", "serve on 127.0.0.1:8081 and create topics and groups as clients use them"},
	{"-topic agents:lite -group agents-g:bind=agents:wildcard:retry=3",
		"a LITE main topic and a wildcard lite group with 3 retries"},
	{"-topic orders:queues=8 -group billing -group audit:retry=0",
		"a normal topic with 8 queues and two groups"},
	{"-topic rooms:lite:ttl=60 -group rooms-g:bind=rooms:exclusive -topic payments:transaction",
		"lite topics deleted an hour after their last message, an exclusive lite group (one client per lite topic), a transaction topic"},
	{"-listen 127.0.0.1:0 -fixtures scripts/rocketmq/fixtures.txt",
		"a free port and the project's test fixtures"},
	{"-access-key ak -secret-key sk -auto-create", "require requests signed with ak/sk"},
	{"-auto-create -ca-out /tmp/rmqfake.pem", "write the TLS certificate for clients' -ca (rmqflow consume -ca /tmp/rmqfake.pem ...)"},
}

const brokerUsage = `Usage: rmqflow broker [flags]

Runs rmqfake, an in-process emulator of a RocketMQ 5 proxy and broker
(apache.rocketmq.v2.MessagingService over gRPC, plaintext and TLS on one
port), until SIGINT or SIGTERM. It keeps everything in memory. On start it
prints "rmqfake listening on <host:port>" (with -json: {"listening":"host:port",
"topics":N,"groups":N,"auto_create":bool,"ca_out":path}); point clients there.
On a signal it prints "rmqfake stopped" ({"stopped":true}) and exits 0.

TLS uses a self-signed certificate valid for 127.0.0.1, ::1 and localhost;
-ca-out FILE writes it (PEM) before the listening line, for the clients' -ca
FILE (rmqflow produce/consume/demo -ca FILE, or tls.Config.RootCAs).

Lite dispatch follows RocketMQ 5.5.0 unless -fast-lite-dispatch: a lite
backlog reaches a newly subscribed wildcard consumer after 5 to 15 s; each
wildcard client is handed at most 100 lite topics to pop at a time (the
group's event-cap, else -max-client-event-count), and the lite topics that
found every client's set full wait for a full dispatch (-lite-full-dispatch-delay
after, on the -lite-event-check-interval scan: 10 to 20 s).

A topic SPEC is NAME[:TYPE][:queues=N][:ttl=MINUTES], TYPE one of normal
(the default), lite, fifo, delay or transaction, N from 1 to 1024 (default
4); ttl (a lite topic's lite.topic.expiration, -1 to 43200; default -1,
never) deletes a lite topic once its last message is that old (and at least
15 min old; the scan runs every 2 min). A group SPEC is
NAME[:retry=N][:bind=TOPIC][:wildcard][:exclusive][:fifo][:event-cap=N]: retry is the
redeliveries before the group's DLQ (%DLQ%NAME; default 16), bind makes it a
lite group of a LITE main topic, wildcard lets it receive every lite topic
of that main topic, exclusive lets one client at a time hold a lite topic (a
PARTIAL_ADD takes it from the others, who are sent NotifyUnsubscribeLite),
fifo consumes each queue in order, event-cap (lite.sub.client.max.event.cnt,
10 or more) is how many lite topics each client of a wildcard group is
handed to pop at a time.

Flags:
`

const brokerFooter = `
Environment: RMQFLOW_NAMESPACE, RMQFLOW_ACCESS_KEY and RMQFLOW_SECRET_KEY stand
in for -namespace, -access-key and -secret-key, so that a shell set up for the
clients runs a broker they can use. RMQFLOW_ENDPOINT is not read: it often
names another broker, and -listen would then fail on a port in use.
Exit codes: 0 stopped by SIGINT/SIGTERM, 1 failure (such as -listen on a port
in use, or an unwritable -ca-out), 2 usage error; never 3, 4 or 5 (those are
the clients' codes).
`

type brokerFlags struct {
	listen       string
	topics       specList
	groups       specList
	fixtures     string
	users        string
	autoCreate   bool
	fastDispatch bool
	accessKey    string
	secretKey    string
	namespace    string
	caOut        string
	json         bool
	verbose      bool
	// limits (docs/rmqfake.md, Limits)
	maxStoredBytes int64
	maxLiteTopics  int
	maxAutoGroups  int
	maxAutoTopics  int
	sessionExpiry  time.Duration
	maxLiteSubs    int
	// lite dispatch (docs/rmqfake.md, Lite dispatch)
	maxClientEvents int
	liteEventCheck  time.Duration
	liteFullDelay   time.Duration
}

type specList []string

func (l *specList) String() string     { return strings.Join(*l, " ") }
func (l *specList) Set(v string) error { *l = append(*l, v); return nil }

func brokerFlagSet(out io.Writer) (*flag.FlagSet, *brokerFlags) {
	f := &brokerFlags{}
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8081", "`address` to serve on; port 0 picks a free port")
	fs.Var(&f.topics, "topic", "create a topic from `SPEC` (repeatable)")
	fs.Var(&f.groups, "group", "create a consumer group from `SPEC` (repeatable)")
	fs.StringVar(&f.fixtures, "fixtures", "", "create the topics and groups listed in `FILE` (the format of scripts/rocketmq/fixtures.txt)")
	fs.StringVar(&f.users, "users", "", "require signed requests and check ACL 2.0 with the users and ACL entries listed in `FILE` (the format of scripts/rocketmq/users.txt)")
	fs.BoolVar(&f.autoCreate, "auto-create", false, "create unknown topics on first send, route or receive, and unknown groups on first use (lite consumers get a wildcard group bound to their topic); for development")
	fs.BoolVar(&f.fastDispatch, "fast-lite-dispatch", false, "deliver a lite backlog to a wildcard consumer as soon as it subscribes (the real broker takes 5 to 15 s)")
	fs.StringVar(&f.accessKey, "access-key", os.Getenv("RMQFLOW_ACCESS_KEY"), "require requests signed with this access `key` (needs -secret-key)")
	f.secretKey = os.Getenv("RMQFLOW_SECRET_KEY")
	fs.Var(secretFlag{&f.secretKey}, "secret-key", "the `secret` of -access-key (never printed; default $RMQFLOW_SECRET_KEY)")
	fs.StringVar(&f.namespace, "namespace", os.Getenv("RMQFLOW_NAMESPACE"), "create the -topic and -group resources in this `namespace`")
	fs.StringVar(&f.caOut, "ca-out", "", "write the TLS certificate (PEM) to `file`, for the clients' -ca")
	fs.Int64Var(&f.maxStoredBytes, "max-stored-bytes", rmqfake.DefaultMaxStoredBytes, "refuse sends past this many stored `bytes` (bodies, ids, properties and 256 per message), as a broker with a full disk does; 0: no limit")
	fs.IntVar(&f.maxLiteTopics, "max-lite-topics", rmqfake.DefaultMaxLiteTopics, "refuse a message that would create one lite topic more than `N` (LITE_TOPIC_QUOTA_EXCEEDED); idle lite topics are freed; 0: no limit")
	fs.IntVar(&f.maxAutoGroups, "max-auto-groups", rmqfake.DefaultMaxAutoGroups, "with -auto-create, make at most `N` groups (past it a new group is not found); 0: no limit")
	fs.IntVar(&f.maxAutoTopics, "max-auto-topics", rmqfake.DefaultMaxAutoTopics, "with -auto-create, make at most `N` topics (past it a new topic is unknown); 0: no limit")
	fs.DurationVar(&f.sessionExpiry, "session-expiry", rmqfake.DefaultSessionExpiry, "forget a client whose Telemetry stream ended this `long` after it was last heard from (the proxy's channel expiry); 0: never")
	fs.IntVar(&f.maxLiteSubs, "max-lite-subscriptions", rmqfake.DefaultMaxLiteSubscriptions, "refuse PARTIAL_ADD once the clients hold `N` lite subscriptions in all (the broker's maxLiteSubscriptionCount; LITE_SUBSCRIPTION_QUOTA_EXCEEDED); 0: no limit")
	fs.IntVar(&f.maxClientEvents, "max-client-event-count", rmqfake.DefaultMaxClientEventCount, "a wildcard client's event set holds at most `N` lite topics when its group has no event-cap (the broker's maxClientEventCount); 0: no cap")
	fs.DurationVar(&f.liteEventCheck, "lite-event-check-interval", rmqfake.DefaultLiteEventCheckInterval, "run the lite event scan, which runs the full dispatches that are due, this `often` (the broker's liteEventCheckInterval)")
	fs.DurationVar(&f.liteFullDelay, "lite-full-dispatch-delay", rmqfake.DefaultLiteFullDispatchDelay, "schedule a wildcard group's full dispatch this `long` after an event none of its clients could take (the broker's liteEventFullDispatchDelayTimeForWildcardGroup)")
	fs.BoolVar(&f.json, "json", false, "the listening and stopped lines as JSON")
	fs.BoolVar(&f.verbose, "v", false, "log the server's errors to stderr")
	return fs, f
}

// brokerHelp writes the broker's help: the text above, the flag set's own
// flag list, and the examples.
func brokerHelp(w io.Writer) {
	fs, _ := brokerFlagSet(w)
	fmt.Fprint(w, brokerUsage)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nExamples:")
	for _, e := range brokerExamples {
		fmt.Fprintf(w, "  rmqflow broker %s\n      %s\n", e.args, e.what)
	}
	fmt.Fprint(w, brokerFooter)
}

// options turns the flags into server options.
func (f *brokerFlags) options() ([]rmqfake.Option, error) {
	if (f.accessKey == "") != (f.secretKey == "") {
		return nil, errors.New("-access-key and -secret-key go together")
	}
	var opts []rmqfake.Option
	opts = append(opts, rmqfake.Addr(f.listen), rmqfake.MaxStoredBytes(f.maxStoredBytes),
		rmqfake.MaxLiteTopics(f.maxLiteTopics), rmqfake.MaxAutoGroups(f.maxAutoGroups),
		rmqfake.MaxAutoTopics(f.maxAutoTopics),
		rmqfake.SessionExpiry(f.sessionExpiry), rmqfake.MaxLiteSubscriptions(f.maxLiteSubs),
		rmqfake.MaxClientEventCount(f.maxClientEvents), rmqfake.LiteEventCheckInterval(f.liteEventCheck),
		rmqfake.LiteFullDispatchDelay(f.liteFullDelay))
	if f.autoCreate {
		opts = append(opts, rmqfake.AutoCreate())
	}
	if f.fastDispatch {
		opts = append(opts, rmqfake.FastLiteDispatch())
	}
	if f.accessKey != "" {
		opts = append(opts, rmqfake.Credentials(f.accessKey, f.secretKey))
	}
	if f.fixtures != "" {
		fx, err := rmqfake.LoadFixtures(f.fixtures)
		if err != nil {
			return nil, err
		}
		opts = append(opts, rmqfake.WithFixtures(fx...))
	}
	if f.users != "" {
		uo, err := rmqfake.LoadUsers(f.users)
		if err != nil {
			return nil, err
		}
		opts = append(opts, uo...)
	}
	return opts, nil
}

// resources parses the -topic and -group specs.
func (f *brokerFlags) resources() ([]rmqfake.Fixture, error) {
	var out []rmqfake.Fixture
	parse := func(kind, spec string) error {
		name, rest, _ := strings.Cut(spec, ":")
		// The spec becomes a fixtures line: a blank NAME or a space would
		// shift its words (":lite" would create a topic named "lite").
		if name == "" {
			return fmt.Errorf("-%s %q: the NAME is empty", kind, spec)
		}
		if strings.IndexFunc(spec, unicode.IsSpace) >= 0 {
			return fmt.Errorf("-%s %q: a SPEC has no spaces", kind, spec)
		}
		fx, err := rmqfake.ParseFixture(kind + " " + name + " " + strings.ReplaceAll(rest, ":", " "))
		if err != nil {
			return fmt.Errorf("-%s %s: %w", kind, spec, err)
		}
		out = append(out, fx)
		return nil
	}
	for _, s := range f.topics {
		if err := parse("topic", s); err != nil {
			return nil, err
		}
	}
	for _, s := range f.groups {
		if err := parse("group", s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func runBroker(args []string, stdout, stderr io.Writer) int {
	fs, f := brokerFlagSet(stderr)
	fs.Usage = func() {} // -help prints the help on stdout, an error the hint below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			brokerHelp(stdout)
			return 0
		}
		fmt.Fprintln(stderr, `Run "rmqflow help broker" for the flags and examples.`)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rmqflow broker: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	opts, err := f.options()
	if err != nil {
		fmt.Fprintln(stderr, "rmqflow broker:", err)
		return 2
	}
	res, err := f.resources()
	if err != nil {
		fmt.Fprintln(stderr, "rmqflow broker:", err)
		return 2
	}
	if f.verbose {
		opts = append(opts, rmqfake.Logger(slog.New(slog.NewTextHandler(stderr, nil))))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := rmqfake.New(opts...)
	if err != nil {
		fmt.Fprintln(stderr, "rmqflow broker:", err)
		return 1
	}
	defer s.Stop()
	if err := create(s, res, f.namespace); err != nil {
		fmt.Fprintln(stderr, "rmqflow broker:", err)
		return 1
	}
	if f.caOut != "" {
		pemBytes, err := s.CertificatePEM()
		if err == nil {
			err = os.WriteFile(f.caOut, pemBytes, 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "rmqflow broker: -ca-out:", err)
			return 1
		}
	}
	st := s.Stats()
	if f.json {
		line := map[string]any{"listening": s.Addr(), "topics": len(st.Topics), "groups": len(st.Groups), "auto_create": f.autoCreate}
		if f.caOut != "" {
			line["ca_out"] = f.caOut
		}
		jsonLine(stdout, line)
	} else {
		fmt.Fprintf(stdout, "rmqfake listening on %s (%d topics, %d groups%s)\n", s.Addr(), len(st.Topics), len(st.Groups),
			map[bool]string{true: ", auto-create", false: ""}[f.autoCreate])
	}
	<-ctx.Done()
	s.Stop()
	if f.json {
		jsonLine(stdout, map[string]any{"stopped": true})
	} else {
		fmt.Fprintln(stdout, "rmqfake stopped")
	}
	return 0
}

// create makes the -topic and -group resources, in namespace ns, as a
// fixtures file's lines (rmqfake.ApplyFixtures).
func create(s *rmqfake.Server, res []rmqfake.Fixture, ns string) error {
	return s.ApplyFixtures(res, rmqfake.InNamespace(ns))
}
