package rmqtest

import (
	"os"
	"runtime/pprof"
	"sync"
	"testing"
)

// EnvTimedCPUProfile names the environment variable holding the file that
// TimedCPUProfile writes: the bench harness sets it to profile where a
// benchmark's CPU per message goes (bench/harness/profile.go), without the
// benchmark's untimed setup, which go test's -cpuprofile would include.
const EnvTimedCPUProfile = "RMQFLOW_TIMED_CPUPROFILE"

// TimedCPUProfile starts a CPU profile into $RMQFLOW_TIMED_CPUPROFILE, if
// set, and returns the function that stops it: call it where the benchmark
// starts its clock, and stop where it stops it. Each call writes the file
// anew, so with -benchtime Nx it holds the N-message run (the last). Without
// the variable it does nothing.
func TimedCPUProfile(tb testing.TB) (stop func()) {
	path := os.Getenv(EnvTimedCPUProfile)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		tb.Fatalf("CPU profile: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				tb.Error(err)
			}
		})
	}
	tb.Cleanup(stop) // also when the benchmark fails before its stop
	return stop
}
