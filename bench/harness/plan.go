package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// peer is one benchmark peer program and one of its variants (bench/README.md).
type peer struct {
	Program string   // rmqflow, raw, official, java
	Variant string   // the program's --variant
	Modes   []string // the modes it can read
	Label   string   // the row label in the report
	// Push marks the official clients' push consumers, which rmqfake does
	// not serve yet (its QueryAssignment answers UNIMPLEMENTED): they are
	// left out of emulator runs.
	Push bool
	// Options are the "name=value" options of a -peers entry
	// ("rmqflow/runner+max-held=1024"), in the order given: each is passed
	// to the peer as --name=value, and the peer so configured is a peer of
	// its own (its own name, cells and group).
	Options []string
}

// Name is "program/variant", then "+name=value" for each option.
func (p peer) Name() string {
	n := p.Program + "/" + p.Variant
	for _, o := range p.Options {
		n += "+" + o
	}
	return n
}

// slug is the peer's name as it goes into group names and log file names:
// "program-variant", then "-name-value" for each option.
func (p peer) slug() string {
	n := p.Program + "-" + p.Variant
	for _, o := range p.Options {
		n += "-" + strings.Replace(o, "=", "-", 1)
	}
	return n
}

// flags are the peer's options as its command-line flags.
func (p peer) flags() []string {
	var out []string
	for _, o := range p.Options {
		if o == "kick=on" {
			continue // startPeer passes --lite-dispatch-broker
		}
		out = append(out, "--"+o)
	}
	return out
}

// labels are the options as the report names them.
func (p peer) labels() []string {
	var out []string
	for _, o := range p.Options {
		if o == "kick=on" {
			out = append(out, "LiteDispatchKick")
			continue
		}
		out = append(out, "--"+o)
	}
	return out
}

func (p peer) supports(mode string) bool { return slices.Contains(p.Modes, mode) }

var (
	both   = []string{"lite", "normal"}
	lite   = []string{"lite"}
	normal = []string{"normal"}
)

// allPeers is every peer the harness knows, in report order.
var allPeers = []peer{
	{"rmqflow", "loop", both, "rmqflow Source + AckAsync", false, nil},
	{"rmqflow", "runner", both, "rmqflow Runner", false, nil},
	{"rmqflow", "runner-pipelined", both, "rmqflow Runner, PipelineAcks", false, nil},
	{"rmqflow", "runner-throttle", lite, "rmqflow Runner + fair-share throttle", false, nil},
	{"raw", "raw", both, "raw protocol loop (ceiling)", false, nil},
	{"official", "simple", normal, "official Go SimpleConsumer, parallel acks", false, nil},
	{"official", "simple-plain", normal, "official Go SimpleConsumer, example loop", false, nil},
	{"official", "push", normal, "official Go PushConsumer", true, nil},
	{"official", "lite-push", lite, "official Go LitePushConsumer", true, nil},
	{"java", "simple", normal, "official Java SimpleConsumer, async", false, nil},
	{"java", "push", normal, "official Java PushConsumer", true, nil},
	{"java", "lite-push", lite, "official Java LitePushConsumer", true, nil},
}

// peerOptions are the options each peer takes in a -peers entry
// ("program/variant+name=value"): the names of its flags that an A/B
// comparison may set (bench/README.md, "Options").
// kick=on makes the peer's Source call SourceConfig.LiteDispatchKick with
// the broker's remoting address (-broker-addr): real broker, lite mode.
var peerOptions = map[string][]string{
	"rmqflow/loop":             {"kick"},
	"rmqflow/runner":           {"max-held", "kick"},
	"rmqflow/runner-pipelined": {"max-held", "kick"},
	"rmqflow/runner-throttle":  {"max-held", "kick"},
}

// kicks reports whether p was given kick=on.
func (p peer) kicks() bool { return slices.Contains(p.Options, "kick=on") }

func findPeer(name string) (peer, bool) {
	for _, p := range allPeers {
		if p.Name() == name {
			return p, true
		}
	}
	return peer{}, false
}

// findPeers resolves a -peers entry: "program/variant", a program name for
// all its variants, or "program/variant+name=value[+name=value…]": the
// variant with options (peerOptions says which it takes; a value is letters,
// digits, '-' and '_', since it goes into the peer's group name). It returns
// nil for an unknown peer, and an error for an option it does not take.
func findPeers(entry string) ([]peer, error) {
	name, opts, hasOpts := strings.Cut(entry, "+")
	if !hasOpts {
		if p, ok := findPeer(name); ok {
			return []peer{p}, nil
		}
		var out []peer
		for _, p := range allPeers {
			if p.Program == name && !strings.Contains(name, "/") {
				out = append(out, p)
			}
		}
		return out, nil
	}
	p, ok := findPeer(name)
	if !ok {
		return nil, nil
	}
	takes := peerOptions[name]
	seen := map[string]bool{}
	for _, o := range strings.Split(opts, "+") {
		k, v, _ := strings.Cut(o, "=")
		switch {
		case !slices.Contains(takes, k):
			if len(takes) == 0 {
				return nil, fmt.Errorf("-peers: %q: %s takes no options", entry, name)
			}
			return nil, fmt.Errorf("-peers: %q: %s takes the options %s=…, not %q", entry, name, strings.Join(takes, "=…, "), o)
		case seen[k]:
			return nil, fmt.Errorf("-peers: %q: option %s given twice", entry, k)
		case v == "" || strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "":
			return nil, fmt.Errorf("-peers: %q: option %s wants a value of letters, digits, '-' and '_'", entry, k)
		case k == "kick" && v != "on":
			return nil, fmt.Errorf("-peers: %q: option kick takes on", entry)
		}
		seen[k] = true
		p.Options = append(p.Options, k+"="+v)
	}
	p.Label += ", " + strings.Join(p.labels(), " ")
	return []peer{p}, nil
}

// Scenarios (issue 9 §4).
const (
	scDrain   = "drain"   // (a) drain a backlog at the default concurrency
	scSweep   = "sweep"   // (a) the same at concurrency 1, 4, 16, 64
	scOpen    = "open"    // (b) open-loop offered load at 50% and 90% of capacity
	scHot     = "hot"     // (c) one hot lite topic at 10× the rate of 99 cold ones
	scTopics  = "topics"  // (d) 100 / 10,000 / 100,000 lite topics
	scHandler = "handler" // (e) a 5 ms handler
	scRenewal = "renewal" // (f) messages held longer than the invisible duration
	scEmu     = "emulator"
)

var allScenarios = []string{scDrain, scSweep, scOpen, scHot, scTopics, scHandler, scRenewal, scEmu}

// run is one peer run: one child process on a topic and group of its own.
type run struct {
	Scenario     string
	Peer         peer
	Mode         string
	Concurrency  int
	Rep          int
	LiteTopics   int
	Messages     int // the peer stops at this many distinct acks
	Warmup       int // untimed acks before the window
	Window       time.Duration
	HandlerDelay time.Duration
	Invisible    time.Duration
	Offered      float64       // open loop: messages/s offered; 0 = drain a backlog
	Shape        string        // open loop: "even" or "hot" (hot tenant) or "cold" (the hot shape without the hot topic)
	Backlog      *backlog      // drain: the backlog it reads (shared by the runs of a batch)
	Pos          int           // drain: its place in the batch's random order (1 = first on the backlog)
	Lag          time.Duration // open loop: the producer's worst lag behind its schedule
	Produced     float64       // drain: the rate (msgs/s) its backlog was produced at; 0 = not recorded
	LoadError    string
	Profile      string // the broker's lite dispatch profile it ran under (-lite-profiles)
	// Filled is how many lite topics its backlog put a message in (on
	// rmqfake: counted there); Heap and BacklogHeap are, on rmqfake, the
	// heap in use after its backlog was produced and how much it grew by.
	Filled            int
	Heap, BacklogHeap int64

	ID, Topic, Group string // unique per run

	Result     result
	Broker     float64       // broker+proxy CPU seconds over the window above BrokerBase (-1: not measured)
	BrokerBase float64       // the broker's CPU rate (CPU s/s) when it settled before the run
	Settle     time.Duration // how long the harness waited for it to settle
	LogPath    string
}

// Key names the cell of the report the run counts in (reps aggregate).
func (r *run) Key() string {
	return fmt.Sprintf("%s|%s|%s|c%d|k%d|o%.0f|%s|h%s|p%s", r.Scenario, r.Peer.Name(), r.Mode, r.Concurrency, r.LiteTopics, r.Offered, r.Shape, r.HandlerDelay, r.Profile)
}

// backlog is a pre-produced backlog that one or more drain runs read, each on
// its own consumer group (on the real broker every group reads a whole
// topic; lite groups bind the main topic).
type backlog struct {
	Topic      string
	Mode       string
	RunID      string
	Messages   int
	LiteTopics int
	Produced   bool
	// Filled, Heap, BacklogHeap: what drainStep measured once it was
	// produced (run).
	Filled            int
	Heap, BacklogHeap int64
}

// shuffled returns the peers in a random order (interleaving reps).
func shuffled(rng *rand.Rand, ps []peer) []peer {
	out := slices.Clone(ps)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
