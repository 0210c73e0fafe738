package rmqfake_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// renderFixture writes fx as one fixtures-file line.
func renderFixture(fx rmqfake.Fixture) string {
	if !fx.Group {
		s := "topic " + fx.Name + " " + fx.Type.String()
		if fx.Queues > 0 {
			s += fmt.Sprintf(" queues=%d", fx.Queues)
		}
		return s
	}
	s := "group " + fx.Name
	if fx.RetryMax >= 0 {
		s += fmt.Sprintf(" retry=%d", fx.RetryMax)
	}
	if fx.Bind != "" {
		s += " bind=" + fx.Bind
	}
	if fx.Wildcard {
		s += " wildcard"
	}
	if fx.FIFO {
		s += " fifo"
	}
	return s
}

// checkFixture: a parsed fixture is well formed, and its rendering parses
// back to it.
func checkFixture(t *testing.T, in string, fx rmqfake.Fixture) {
	t.Helper()
	if fx.Name == "" || strings.IndexFunc(fx.Name, unicode.IsSpace) >= 0 || strings.IndexFunc(fx.Bind, unicode.IsSpace) >= 0 {
		t.Fatalf("%q parsed to a fixture with a blank name or bind: %+v", in, fx)
	}
	if !fx.Group && (fx.Type.String() == "unknown" || fx.Queues < 0) || fx.Group && (fx.RetryMax < -1 || fx.Type != 0 || fx.Queues != 0) {
		t.Fatalf("%q parsed to %+v", in, fx)
	}
	line := renderFixture(fx)
	again, err := rmqfake.ParseFixture(line)
	if err != nil || again != fx {
		t.Fatalf("%q parsed to %+v, rendered as %q, which parses to %+v, %v", in, fx, line, again, err)
	}
}

// FuzzParseFixtures: a fixtures file (what `rmqflow broker -fixtures` and
// WithProjectFixtures read) never panics the parser; every fixture parsed
// is well formed and survives rendering and parsing again, alone or as a
// file.
func FuzzParseFixtures(f *testing.F) {
	for _, s := range []string{
		"topic t lite\ngroup g bind=t wildcard retry=3\n",
		"# comment\n\ntopic orders normal queues=8\ngroup billing\ngroup audit retry=0 fifo\n",
		"topic t\ntopic d delay # trailing comment\n",
		"topic t queues=0\n", "group g retry=-1\n", "topic t lite lite\n", "group g bind=\n", "bogus x\n", "topic\n",
		"topic t queues=99999999999999999999\n", "group g retry=+3 wildcard=1\n", "topic t\r\ngroup g\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fs, err := rmqfake.ParseFixtures(strings.NewReader(s))
		if err != nil {
			return
		}
		var lines []string
		for _, fx := range fs {
			checkFixture(t, s, fx)
			lines = append(lines, renderFixture(fx))
		}
		again, err := rmqfake.ParseFixtures(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil || len(again) != len(fs) {
			t.Fatalf("rendered file of %q does not parse back: %v, %v", s, again, err)
		}
		for i := range fs {
			if again[i] != fs[i] {
				t.Fatalf("fixture %d: %+v became %+v", i, fs[i], again[i])
			}
		}
	})
}

// FuzzParseFixture: one line, as `rmqflow broker -topic/-group` hands its
// specs to ParseFixture.
func FuzzParseFixture(f *testing.F) {
	for _, s := range []string{"topic t lite", "group g bind=t wildcard retry=3", "topic t queues=2", "group g#x", "topic a\u00a0b lite", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fx, err := rmqfake.ParseFixture(s)
		if err != nil {
			return
		}
		checkFixture(t, s, fx)
	})
}
