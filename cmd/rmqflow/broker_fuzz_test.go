package main

import (
	"strings"
	"testing"
)

// FuzzBrokerSpecs: the -topic and -group specs of `rmqflow broker` never
// panic the parser, and a spec that parses creates the resource it names:
// the fixture's name is the spec's NAME, never a word taken from elsewhere
// in the spec.
func FuzzBrokerSpecs(f *testing.F) {
	for _, e := range []struct{ topic, group string }{
		{"agents:lite", "agents-g:bind=agents:wildcard:retry=3"},
		{"orders:queues=8", "audit:retry=0"},
		{"t", "g:fifo"},
		{":lite", ":wildcard"},
		{"a lite", "g bind=x"},
		{"a:lite:queues=2", "g:retry=1:retry=2"},
		{"a#b", "g\tx"},
	} {
		f.Add(e.topic, e.group)
	}
	f.Fuzz(func(t *testing.T, topic, group string) {
		for _, c := range []struct{ kind, spec string }{{"topic", topic}, {"group", group}} {
			fl := &brokerFlags{}
			if c.kind == "topic" {
				fl.topics = specList{c.spec}
			} else {
				fl.groups = specList{c.spec}
			}
			res, err := fl.resources()
			if err != nil {
				if !strings.Contains(err.Error(), "-"+c.kind) {
					t.Fatalf("-%s %q: error %q does not name the flag", c.kind, c.spec, err)
				}
				continue
			}
			if len(res) != 1 {
				t.Fatalf("-%s %q gave %d resources", c.kind, c.spec, len(res))
			}
			name, _, _ := strings.Cut(c.spec, ":")
			if res[0].Name != name || res[0].Group != (c.kind == "group") {
				t.Fatalf("-%s %q creates %+v, want a %s named %q", c.kind, c.spec, res[0], c.kind, name)
			}
		}
	})
}
