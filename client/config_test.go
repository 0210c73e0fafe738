package client

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseEndpointsGood(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Endpoints
		str  string
	}{
		{"127.0.0.1:8081", Endpoints{{"127.0.0.1", 8081}}, "127.0.0.1:8081"},
		{"a:1;b:2", Endpoints{{"a", 1}, {"b", 2}}, "a:1;b:2"},
		{"  a:1 ;  b:2  ", Endpoints{{"a", 1}, {"b", 2}}, "a:1;b:2"},
		{"a:1;;b:2;", Endpoints{{"a", 1}, {"b", 2}}, "a:1;b:2"},
		{"[::1]:8081", Endpoints{{"::1", 8081}}, "[::1]:8081"},
		{"[::1]:8081;10.0.0.1:65535", Endpoints{{"::1", 8081}, {"10.0.0.1", 65535}}, "[::1]:8081;10.0.0.1:65535"},
		{"rocketmq.example.com:1", Endpoints{{"rocketmq.example.com", 1}}, "rocketmq.example.com:1"},
	} {
		got, err := ParseEndpoints(tc.in)
		if err != nil {
			t.Errorf("ParseEndpoints(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseEndpoints(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		if got.String() != tc.str {
			t.Errorf("ParseEndpoints(%q).String() = %q, want %q", tc.in, got.String(), tc.str)
		}
		// String renders what ParseEndpoints reads back.
		again, err := ParseEndpoints(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("round trip of %q: %v, %v", got.String(), again, err)
		}
	}
}

func TestParseEndpointsBad(t *testing.T) {
	for _, in := range []string{
		"", "   ", ";", " ; ; ",
		"localhost", "127.0.0.1", // missing port
		"localhost:", "a:1;b", // empty / missing port in the second
		"a:0", "a:70000", "a:-1", "a:http",
		":8081", "[]:8081", // empty host
		"::1:8081", // IPv6 without brackets
	} {
		got, err := ParseEndpoints(in)
		if err == nil {
			t.Errorf("ParseEndpoints(%q) = %v, want an error", in, got)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Option != "Endpoints" {
			t.Errorf("ParseEndpoints(%q): %v (%T), want a *ConfigError with Option Endpoints", in, err, err)
			continue
		}
		if ce.Reason == "" || !strings.Contains(err.Error(), "Endpoints") {
			t.Errorf("ParseEndpoints(%q): error %q names no option or reason", in, err)
		}
	}
}

func TestEndpointsProtoScheme(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:1;10.0.0.2:2": "IPv4",
		"[::1]:1":                "IPv6",
		"localhost:1;10.0.0.1:2": "DOMAIN_NAME",
	} {
		eps, err := ParseEndpoints(in)
		if err != nil {
			t.Fatal(err)
		}
		p := eps.proto()
		if p.GetScheme().String() != want || len(p.GetAddresses()) != len(eps) {
			t.Errorf("%q: scheme %v with %d addresses, want %s with %d", in, p.GetScheme(), len(p.GetAddresses()), want, len(eps))
		}
		for i, a := range p.GetAddresses() {
			if a.GetHost() != eps[i].Host || int(a.GetPort()) != eps[i].Port {
				t.Errorf("%q: address %d is %v, want %v", in, i, a, eps[i])
			}
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ok := "127.0.0.1:8081"
	for _, tc := range []struct {
		cfg    Config
		option string
	}{
		{Config{}, "Endpoints"},
		{Config{Endpoints: "nohost"}, "Endpoints"},
		{Config{Endpoints: "h:99999"}, "Endpoints"},
		{Config{Endpoints: ok, RequestTimeout: -time.Second}, "RequestTimeout"},
		{Config{Endpoints: ok, HeartbeatInterval: -1}, "HeartbeatInterval"},
		{Config{Endpoints: ok, LiteSyncInterval: -1}, "LiteSyncInterval"},
		{Config{Endpoints: ok, Credentials: Credentials{AccessSecret: "only-a-secret"}}, "Credentials"},
	} {
		c, err := New(tc.cfg)
		if err == nil {
			_ = c.Close(t.Context())
			t.Errorf("New(%+v) succeeded, want an error naming %s", tc.cfg, tc.option)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Option != tc.option || !strings.Contains(err.Error(), tc.option) {
			t.Errorf("New(%+v): %v, want a *ConfigError naming %s", tc.cfg, err, tc.option)
		}
		if strings.Contains(err.Error(), "only-a-secret") {
			t.Errorf("config error leaks the secret: %v", err)
		}
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	c := newTestClient(t, Config{Endpoints: " 127.0.0.1:1 ; localhost:2 ", Namespace: "ns"})
	if c.RequestTimeout() != DefaultRequestTimeout {
		t.Errorf("RequestTimeout %v, want %v", c.RequestTimeout(), DefaultRequestTimeout)
	}
	if c.cfg.HeartbeatInterval != DefaultHeartbeatInterval || c.cfg.LiteSyncInterval != DefaultLiteSyncInterval {
		t.Errorf("intervals %v/%v, want defaults", c.cfg.HeartbeatInterval, c.cfg.LiteSyncInterval)
	}
	if c.Endpoints().String() != "127.0.0.1:1;localhost:2" || c.Namespace() != "ns" {
		t.Errorf("endpoints %q namespace %q", c.Endpoints(), c.Namespace())
	}
	if c.ID() == "" || strings.Count(c.ID(), "@") != 3 {
		t.Errorf("generated client id %q, want host@pid@n@random", c.ID())
	}
	other := newTestClient(t, Config{Endpoints: "127.0.0.1:1"})
	if other.ID() == c.ID() {
		t.Errorf("two clients share id %q", c.ID())
	}
	fixed := newTestClient(t, Config{Endpoints: "127.0.0.1:1", ClientID: "my-id", RequestTimeout: 42 * time.Millisecond})
	if fixed.ID() != "my-id" || fixed.RequestTimeout() != 42*time.Millisecond {
		t.Errorf("configured id/timeout not kept: %q %v", fixed.ID(), fixed.RequestTimeout())
	}
}

const testSecret = "sEcReT-9f8e7d6c5b4a"

func TestCredentialsFormattingHidesSecret(t *testing.T) {
	creds := Credentials{AccessKey: "AK-123", AccessSecret: testSecret, SecurityToken: "sts-token-xyz"}
	cfg := Config{Endpoints: "127.0.0.1:1", Credentials: creds}
	secretOnly := Credentials{AccessSecret: testSecret}
	checks := map[string]string{
		"String":           creds.String(),
		"GoString":         creds.GoString(),
		"%v":               fmt.Sprintf("%v", creds),
		"%+v":              fmt.Sprintf("%+v", creds),
		"%#v":              fmt.Sprintf("%#v", creds),
		"%s":               fmt.Sprintf("%s", creds),
		"%q":               fmt.Sprintf("%q", creds),
		"%v pointer":       fmt.Sprintf("%v", &creds),
		"%+v config":       fmt.Sprintf("%+v", cfg),
		"%#v config":       fmt.Sprintf("%#v", cfg),
		"%v *config":       fmt.Sprintf("%v", &cfg),
		"Sprint":           fmt.Sprint(creds),
		"secret, no key":   fmt.Sprintf("%+v %#v", secretOnly, secretOnly),
		"slog text record": slogText(creds),
	}
	for name, s := range checks {
		if strings.Contains(s, testSecret) {
			t.Errorf("%s leaks the secret: %s", name, s)
		}
		if strings.Contains(s, "sts-token-xyz") {
			t.Errorf("%s leaks the security token: %s", name, s)
		}
	}
	if !strings.Contains(creds.String(), "AK-123") {
		t.Errorf("String() = %q, want the access key visible", creds.String())
	}
	if (Credentials{}).String() != "Credentials{}" {
		t.Errorf("zero Credentials print as %q", Credentials{}.String())
	}
}

func slogText(v any) string {
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "creds", v)
	return b.String()
}

// TestClientFormattingHidesSecret: the Credentials doc promises they are
// never logged; a *Client printed by mistake (say, in a debug log) must not
// print the secret either.
func TestClientFormattingHidesSecret(t *testing.T) {
	c := newTestClient(t, Config{Endpoints: "127.0.0.1:1", Credentials: Credentials{AccessKey: "AK", AccessSecret: testSecret}})
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		if s := fmt.Sprintf(verb, c); strings.Contains(s, testSecret) {
			i := max(0, strings.Index(s, testSecret)-40)
			t.Errorf("fmt %s of *Client leaks the access secret: ...%.120s...", verb, s[i:])
		}
	}
}

// TestNewAcceptsWhatParseEndpointsAccepts: every address ParseEndpoints
// takes makes a client, an IPv6 link-local address with its zone included
// (its '%' broke the connection target: "invalid URL escape").
func TestNewAcceptsWhatParseEndpointsAccepts(t *testing.T) {
	for _, ep := range []string{"[fe80::1%eth0]:8081", "[fe80::1%25]:8081", "127.0.0.1:8081;[::1]:8081", "host%:1"} {
		if _, err := ParseEndpoints(ep); err != nil {
			t.Fatalf("ParseEndpoints(%q): %v", ep, err)
		}
		c, err := New(Config{Endpoints: ep})
		if err != nil {
			t.Errorf("New(%q): %v", ep, err)
			continue
		}
		_ = c.Close(t.Context())
	}
}
