package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rmqflow/rmqflow/brokeradmin"
)

const liteDispatchUsage = `Usage: rmqflow lite-dispatch -broker HOST:PORT -group GROUP [flags]

Asks a RocketMQ broker (5.5.0 or later) to offer a lite group's backlog to its
consumers now: the admin request triggerLiteDispatch (remoting request
200079), sent to the broker's own remoting port (listenPort in broker.conf,
10911 by default), not to the proxy. A wildcard consumer that joined a group
with a backlog otherwise waits 5 s plus up to one broker scan (10 s by
default) for its first message. Without -client-id the whole group is
dispatched: for a wildcard group the broker walks every lite consume queue it
has (16 to 37 ms over 1,200,000 lite topics on 5.5.0). With -client-id only
that client's own lite topics are, and a client of a wildcard group has none
on 5.5.0: the request then does nothing. It returns once the broker has run
the dispatch.

The request is not signed: a broker with authentication on
(authenticationEnabled=true in broker.conf) refuses it with NO_PERMISSION
(exit 5). rmqflow's SourceConfig.LiteDispatchKick and rmqflow consume
-lite-dispatch-broker send it by themselves when a consumer joins.

Flags:
`

var liteDispatchExamples = []example{
	{"-broker 127.0.0.1:10911 -group chat-workers", "dispatch the backlog of wildcard group chat-workers now"},
	{"-broker 10.0.0.5:10911 -group orders-g -client-id host@1234#1 -json", "one client of an exact lite group, the answer as JSON"},
}

const liteDispatchFooter = `Environment: RMQFLOW_BROKER_ADDR stands in for -broker.

Exit codes: 0 done, 1 failure (such as a group that is not a lite group), 2
usage error, 3 broker unreachable or no answer within -timeout, 4 unknown
group, 5 no permission (a broker with authentication on).
`

func runLiteDispatch(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lite-dispatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	broker := fs.String("broker", os.Getenv("RMQFLOW_BROKER_ADDR"), "the broker's remoting `host:port` (its listenPort, not the proxy's; required)")
	group := fs.String("group", "", "lite consumer `group` (required)")
	clientID := fs.String("client-id", "", "dispatch for this client `id` of the group alone")
	timeout := fs.Duration("timeout", brokeradmin.DefaultTimeout, "deadline of the request (connect, send, answer)")
	asJSON := fs.Bool("json", false, `print the outcome as a JSON line ({"broker","group","client_id","ok","code","remark","error","millis"})`)
	if done, code := parseFlags(fs, args, stdout, liteDispatchUsage, liteDispatchExamples, liteDispatchFooter); done {
		return code
	}
	if *broker == "" || *group == "" {
		fmt.Fprintln(stderr, "rmqflow lite-dispatch: -broker (or RMQFLOW_BROKER_ADDR) and -group are required")
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "rmqflow lite-dispatch: -timeout %v: want a positive duration\n", *timeout)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	t0 := time.Now()
	err := brokeradmin.TriggerLiteDispatch(ctx, *broker, *group, *clientID)
	took := time.Since(t0)
	code := exitOK
	var be *brokeradmin.Error
	switch {
	case err == nil:
	case errors.Is(err, brokeradmin.ErrGroupNotFound):
		code = exitNotFound
	case errors.Is(err, brokeradmin.ErrNoPermission):
		code = exitAuth
	case errors.As(err, &be):
		code = exitFailure
	default:
		code = exitUnreachable // no answer: refused, timed out, cut
	}
	if *asJSON {
		out := map[string]any{"broker": *broker, "group": *group, "client_id": *clientID, "ok": err == nil, "millis": took.Milliseconds()}
		if errors.As(err, &be) {
			out["code"], out["remark"] = int(be.Code), be.Remark
		}
		if err != nil {
			out["error"] = err.Error()
		}
		jsonLine(stdout, out)
		return code
	}
	if err != nil {
		fmt.Fprintf(stderr, "rmqflow lite-dispatch: %v\n", err)
		return code
	}
	fmt.Fprintf(stdout, "dispatched lite group %s at %s in %v\n", *group, *broker, took.Round(time.Millisecond))
	return exitOK
}
