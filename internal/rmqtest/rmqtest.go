// Package rmqtest holds helpers shared by rmqflow's tests: where the real
// broker is, the fixture names scripts/rocketmq/fixtures.txt creates, unique
// names per run, and a goroutine-leak check.
package rmqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvEndpoint names the environment variable holding the real broker's gRPC
// endpoint. `make test` sets it after scripts/rocketmq.sh up.
const EnvEndpoint = "RMQFLOW_ENDPOINT"

// EnvAuthEndpoint names the environment variable holding the gRPC endpoint
// of the real broker's second proxy, the one with authentication and ACL 2.0
// on (conformance scenario t); scripts/with-broker.sh sets it.
const EnvAuthEndpoint = "RMQFLOW_AUTH_ENDPOINT"

// EnvBrokerAddr names the environment variable holding the real broker's own
// remoting address (its listenPort, not the proxy's), for admin requests
// such as triggerLiteDispatch (conformance scenario aa); scripts/with-broker.sh
// sets it. Without it BrokerAddr uses 127.0.0.1 and RMQ_BROKER_PORT, or
// scripts/rocketmq.sh's default port, 18911.
const EnvBrokerAddr = "RMQFLOW_BROKER_ADDR"

// BrokerAddr returns the real broker's remoting address (EnvBrokerAddr).
func BrokerAddr() string {
	if a := os.Getenv(EnvBrokerAddr); a != "" {
		return a
	}
	if p := os.Getenv("RMQ_BROKER_PORT"); p != "" {
		return "127.0.0.1:" + p
	}
	return "127.0.0.1:18911"
}

// EnvSkipBroker, set to 1, skips real-broker tests for local iteration. CI never
// sets it; a skip is printed loudly.
const EnvSkipBroker = "RMQFLOW_SKIP_REAL_BROKER"

var skipOnce sync.Once

// Endpoint returns the real broker's endpoint. Without one the test fails,
// unless RMQFLOW_SKIP_REAL_BROKER=1, when it is skipped with a loud notice.
func Endpoint(t testing.TB) string {
	t.Helper()
	if ep := os.Getenv(EnvEndpoint); ep != "" {
		return ep
	}
	if os.Getenv(EnvSkipBroker) == "1" {
		skipOnce.Do(func() {
			fmt.Fprintln(os.Stderr, "\n!!!!!!!! RMQFLOW_SKIP_REAL_BROKER=1: tests against the real RocketMQ broker are SKIPPED !!!!!!!!")
		})
		t.Skip("SKIPPED: real-broker test (RMQFLOW_SKIP_REAL_BROKER=1)")
	}
	t.Fatalf("no real broker: %s is not set. Run `make test` (it starts RocketMQ), or `make rocketmq-up` and export %s=127.0.0.1:18081; set %s=1 only to skip these tests locally",
		EnvEndpoint, EnvEndpoint, EnvSkipBroker)
	return ""
}

// LiteTopic and LiteGroup name the per-scenario LITE main topic and its
// wildcard group (fixtures.txt): scenario is "a".."k", "client" or "bench".
func LiteTopic(scenario string) string { return "rmqflow-lite-" + scenario }

// LiteGroup is the wildcard group bound to LiteTopic(scenario).
func LiteGroup(scenario string) string { return "rmqflow-lite-" + scenario + "-g" }

// NormalTopic and NormalGroup name the per-scenario normal topic and group.
func NormalTopic(scenario string) string { return "rmqflow-normal-" + scenario }

// NormalGroup is the group of NormalTopic(scenario).
func NormalGroup(scenario string) string { return "rmqflow-normal-" + scenario + "-g" }

// ExactLiteTopic and ExactLiteGroup are a LITE main topic with a non-wildcard
// group, for PARTIAL_ADD / PARTIAL_REMOVE.
const (
	ExactLiteTopic = "rmqflow-lite-x"
	ExactLiteGroup = "rmqflow-lite-x-g"
)

// Unique returns prefix plus a random suffix that is a legal lite topic name
// ([A-Za-z0-9_-], short), so that runs on one broker never see each other.
func Unique(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Context returns a context cancelled at the end of the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// CheckGoroutines records the goroutines running now and, at cleanup, fails
// the test if new rmqflow or gRPC goroutines are still running (they get up to
// 5 s to wind down; the check returns as soon as they have). Register it
// before the clients it checks so that it runs after their Close.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := goroutineIDs()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		var leaked []string
		for {
			leaked = leaked[:0]
			for id, stack := range goroutineStacks() {
				if _, ok := before[id]; ok || ignorable(stack) {
					continue
				}
				leaked = append(leaked, stack)
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
			time.Sleep(20 * time.Millisecond) // polling for goroutines to exit; there is no event to await
		}
		if len(leaked) > 0 {
			t.Errorf("%d goroutine(s) leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

// ignorable keeps the check to goroutines of rmqflow and gRPC: the testing
// package's own goroutines come and go. Run leak-checked tests without
// t.Parallel so that other tests' goroutines are not counted.
func ignorable(stack string) bool {
	return !strings.Contains(stack, "rmqflow") && !strings.Contains(stack, "google.golang.org/grpc")
}

func goroutineIDs() map[string]struct{} {
	out := map[string]struct{}{}
	for id := range goroutineStacks() {
		out[id] = struct{}{}
	}
	return out
}

func goroutineStacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		line, _, _ := strings.Cut(g, "\n")
		// "goroutine 12 [running]:"
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "goroutine" {
			out[f[1]] = g
		}
	}
	return out
}
