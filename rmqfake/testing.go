package rmqfake

import "testing"

// NewForTest starts a server for a test and stops it when the test ends. It
// fails the test if the server cannot start.
func NewForTest(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := New(opts...)
	if err != nil {
		t.Fatalf("rmqfake: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
