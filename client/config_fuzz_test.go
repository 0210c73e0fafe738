package client

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParseEndpoints: ParseEndpoints never panics; an error is a
// *ConfigError naming Endpoints; what parses has at least one address, each
// with a host and a port in 1..65535, and String renders what parses back to
// the same addresses.
func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:8081", "a:1;b:2", "  a:1 ;  b:2  ", "a:1;;b:2;", "[::1]:8081", "[fe80::1%eth0]:8081",
		"rocketmq.example.com:1", "a:+1", "a:0001", "", ";", "a:0", "a:70000", "::1:8081", "[]:8081",
		"\u00a0:1", "a\u0085:1", "a :1;b:2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		eps, err := ParseEndpoints(s)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Option != "Endpoints" {
				t.Fatalf("ParseEndpoints(%q): %v, want a ConfigError for Endpoints", s, err)
			}
			return
		}
		if len(eps) == 0 {
			t.Fatalf("ParseEndpoints(%q) gave no address and no error", s)
		}
		for _, a := range eps {
			if a.Host == "" || a.Port < 1 || a.Port > 65535 {
				t.Fatalf("ParseEndpoints(%q) gave %#v", s, a)
			}
		}
		again, err := ParseEndpoints(eps.String())
		if err != nil || !reflect.DeepEqual(again, eps) {
			t.Fatalf("ParseEndpoints(%q) = %#v renders as %q, which parses to %#v, %v", s, eps, eps.String(), again, err)
		}
		_ = eps.proto()
	})
}
