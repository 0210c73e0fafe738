package main

import (
	"math"
	"strings"
	"testing"
)

// A `go tool pprof -top` listing as it prints one (header, then flat, flat%,
// sum%, cum, cum%, function).
const pprofTop = `File: rmqfake.test
Type: cpu
Duration: 12.11s, Total samples = 10s (82.57%)
Showing nodes accounting for 10s, 100% of 10s total
      flat  flat%   sum%        cum   cum%
     2.50s 25.00% 25.00%      2.50s 25.00%  internal/runtime/syscall.Syscall6
     2s 20.00% 45.00%      3s 30.00%  runtime.scanobject
     1.50s 15.00% 60.00%      1.50s 15.00%  google.golang.org/grpc/internal/transport.(*http2Client).reader
     900ms  9.00% 69.00%      1.10s 11.00%  golang.org/x/net/http2.(*Framer).ReadFrame
     100ms  1.00% 70.00%      100ms  1.00%  runtime.netpoll
     1s 10.00% 80.00%      1s 10.00%  google.golang.org/protobuf/internal/impl.(*MessageInfo).marshal
     500ms  5.00% 85.00%      600ms  6.00%  github.com/rmqflow/rmqflow/rmqfake.(*Server).ReceiveMessage
     500ms  5.00% 90.00%      700ms  7.00%  github.com/rmqflow/rmqflow.(*Source).emit
     400ms  4.00% 94.00%      2s 20.00%  runtime.mallocgc
     300ms  3.00% 97.00%      300ms  3.00%  sync/atomic.(*Pointer[google.golang.org/grpc/internal/transport.x]).Load
     200ms  2.00% 99.00%      4s 40.00%  runtime.gcBgMarkWorker
     100ms  1.00%   100%      2s 20.00%  github.com/rmqflow/rmqflow/rmqfake_test.benchmarkPipeline.func2
`

// TestProfileShares: the CPU of a profile is grouped by the package of the
// function on CPU (a type argument naming gRPC does not make sync/atomic
// gRPC), and the garbage collector's and allocation's cumulative shares are
// read from their roots.
func TestProfileShares(t *testing.T) {
	flat, gc, alloc, total := profileShares(pprofTop)
	if total.Seconds() != 10 {
		t.Fatalf("total %v, want 10s", total)
	}
	want := map[string]float64{"system calls and netpoll": 0.26, "Go runtime": 0.26, "gRPC": 0.15, "HTTP/2": 0.09,
		"protobuf": 0.10, "rmqfake": 0.05, "rmqflow": 0.05, "the benchmark's own code": 0.01, "other": 0.03}
	for g, w := range want {
		if math.Abs(flat[g]-w) > 1e-9 {
			t.Errorf("%s: %.3f, want %.3f", g, flat[g], w)
		}
	}
	if math.Abs(gc-0.4) > 1e-9 || math.Abs(alloc-0.2) > 1e-9 {
		t.Errorf("gc %.3f alloc %.3f, want 0.4 and 0.2", gc, alloc)
	}
	line := profileLine("BenchmarkX (./rmqfake)", pprofTop, 40)
	for _, w := range []string{"Profile BenchmarkX (./rmqfake): 10s of CPU samples, 40.0 µs per message", "gRPC 15% (6.0 µs)", "background marking 40%"} {
		if !strings.Contains(line, w) {
			t.Errorf("line %q lacks %q", line, w)
		}
	}
	if got := profileLine("B", "nothing", math.NaN()); !strings.Contains(got, "no samples") {
		t.Errorf("an empty profile reads %q", got)
	}
}
