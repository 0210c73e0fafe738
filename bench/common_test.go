// Package bench holds the benchmark peers (peer/, java/) that the harness
// (harness/, `rmqflow bench`) runs on one broker, and the tests that check
// them and measure memory. It is its own module so that the official clients' dependencies stay
// out of the core module. Its tests skip unless RMQFLOW_BENCH=1:
//
//	RMQFLOW_ENDPOINT=127.0.0.1:18081 RMQFLOW_BENCH=1 go test -run 'TestPeers|TestRSS' -v ./...
//
// `make bench` runs `rmqflow bench` and TestRSS10kInFlight against a broker it
// starts.
package bench

import (
	"os"
	"testing"

	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

const bodySize = 1024

func endpoint(t testing.TB) string {
	if os.Getenv("RMQFLOW_BENCH") != "1" {
		t.Skip("peer tests: set RMQFLOW_BENCH=1 and RMQFLOW_ENDPOINT (make bench sets them for TestRSS10kInFlight only; run TestPeers by hand, bench/README.md)")
	}
	return rmqtest.Endpoint(t)
}

func isRun(keys []string, run string) bool { return len(keys) == 1 && keys[0] == run }
