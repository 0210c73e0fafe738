package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPeerOptions: "program/variant+name=value" in -peers is the variant with
// the option: a peer of its own beside the plain variant (its own name, so
// its own cells, and its own group and log file names), passed to the peer
// program as --name=value; an option the variant does not take, a bad value
// or an option given twice is refused.
func TestPeerOptions(t *testing.T) {
	c, err := parseConfig([]string{"-emulator", "-peers", "rmqflow/loop,rmqflow/runner,rmqflow/runner+max-held=1024"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range c.peers {
		names = append(names, p.Name())
	}
	if want := []string{"rmqflow/loop", "rmqflow/runner", "rmqflow/runner+max-held=1024"}; !slices.Equal(names, want) {
		t.Fatalf("peers %q, want %q", names, want)
	}
	plain, ab := c.peers[1], c.peers[2]
	if ab.Program != "rmqflow" || ab.Variant != "runner" || !slices.Equal(ab.flags(), []string{"--max-held=1024"}) || len(plain.flags()) != 0 {
		t.Errorf("A/B peer %+v (flags %q), plain %+v (flags %q)", ab, ab.flags(), plain, plain.flags())
	}
	if plain.slug() != "rmqflow-runner" || ab.slug() != "rmqflow-runner-max-held-1024" {
		t.Errorf("slugs %q, %q: the two must not share a group", plain.slug(), ab.slug())
	}
	if ab.Label != "rmqflow Runner, --max-held=1024" || !ab.supports("lite") || !ab.supports("normal") {
		t.Errorf("A/B peer %+v", ab)
	}
	if r1, r2 := (&run{Peer: plain}), (&run{Peer: ab}); r1.Key() == r2.Key() {
		t.Errorf("the A/B peer shares the plain variant's cell %q", r1.Key())
	}
	for entry, want := range map[string]string{
		"rmqflow/runner+fetch=2":                    "takes the options max-held=…, kick=…",
		"rmqflow/loop+max-held=1024":                "rmqflow/loop takes the options kick=…",
		"raw/raw+kick=on":                           "raw/raw takes no options",
		"rmqflow/loop+kick=yes":                     "option kick takes on",
		"rmqflow/loop+kick=on":                      "which rmqfake has not",
		"rmqflow/runner+max-held=":                  "wants a value",
		"rmqflow/runner+max-held=1.5":               "wants a value",
		"rmqflow/runner+max-held=1+max-held=2":      "given twice",
		"rmqflow/nope+max-held=1":                   "unknown",
		"rmqflow+max-held=1":                        "unknown",
		"rmqflow/runner-pipelined+max-held=1024,x":  "unknown",
		"rmqflow/runner-pipelined+max-held=1024+xx": "takes the options",
	} {
		if _, err := parseConfig([]string{"-emulator", "-peers", entry}, io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-peers %s: %v, want an error saying %q", entry, err, want)
		}
	}

	// The option reaches the peer's command line (written first in its log).
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1):", err)
	}
	r := &run{Peer: ab, Mode: "lite", ID: "r1", Topic: "t", Group: "g", LiteTopics: 2, LogPath: filepath.Join(t.TempDir(), "peer.log")}
	sp, err := startPeer(context.Background(), []string{bin}, r, "127.0.0.1:1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sp.wait(r)
	log, err := os.ReadFile(r.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(log), "\n")
	if !strings.Contains(line, " --max-held=1024 ") || !strings.Contains(line, " --variant=runner ") {
		t.Errorf("peer command line %q, want --max-held=1024 and --variant=runner", line)
	}
}

// TestKickPeer: kick=on is a real-broker option: with -emulator or without
// the broker's remoting address it is refused; otherwise the peer is started
// with --lite-dispatch-broker=<-broker-addr> (not --kick=on), and the report
// names it.
func TestKickPeer(t *testing.T) {
	if _, err := parseConfig([]string{"-endpoint", "127.0.0.1:1", "-broker-addr", "", "-peers", "rmqflow/loop+kick=on"}, io.Discard); err == nil || !strings.Contains(err.Error(), "give -broker-addr") {
		t.Errorf("kick=on without a broker address: %v", err)
	}
	c, err := parseConfig([]string{"-endpoint", "127.0.0.1:1", "-broker-addr", "127.0.0.1:2", "-peers", "rmqflow/loop,rmqflow/loop+kick=on"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	kick := c.peers[1]
	if !kick.kicks() || c.peers[0].kicks() || len(kick.flags()) != 0 || kick.Label != "rmqflow Source + AckAsync, LiteDispatchKick" || c.brokerAddr != "127.0.0.1:2" {
		t.Fatalf("kick peer %+v (flags %q), broker %q", kick, kick.flags(), c.brokerAddr)
	}
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1):", err)
	}
	r := &run{Peer: kick, Mode: "lite", ID: "r1", Topic: "t", Group: "g", LiteTopics: 2, LogPath: filepath.Join(t.TempDir(), "peer.log")}
	sp, err := startPeer(context.Background(), []string{bin}, r, "127.0.0.1:1", c.brokerAddr, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sp.wait(r)
	log, err := os.ReadFile(r.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(log), "\n")
	if !strings.Contains(line, " --lite-dispatch-broker=127.0.0.1:2 ") || strings.Contains(line, "--kick") {
		t.Errorf("peer command line %q, want --lite-dispatch-broker=127.0.0.1:2 and no --kick", line)
	}
}

// TestABPeerGoesWhereItsVariantGoes: a scenario that lists the variants it
// runs (topics: rmqflow/loop, ...) runs their A/B peers too.
func TestABPeerGoesWhereItsVariantGoes(t *testing.T) {
	c, err := parseConfig([]string{"-emulator", "-peers", "rmqflow/loop,rmqflow/runner+max-held=1024,raw/raw"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: c}
	var names []string
	for _, p := range b.peersFor("lite", "rmqflow/runner", "raw/raw") {
		names = append(names, p.Name())
	}
	if want := []string{"rmqflow/runner+max-held=1024", "raw/raw"}; !slices.Equal(names, want) {
		t.Errorf("peers for runner and raw: %q, want %q", names, want)
	}
}
