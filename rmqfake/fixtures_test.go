package rmqfake_test

import (
	"os"
	"strings"
	"testing"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// ProjectFixtures finds scripts/rocketmq/fixtures.txt from a package
// directory and the server creates every topic and group in it.
func TestProjectFixtures(t *testing.T) {
	t.Parallel()
	fs, err := rmqfake.ProjectFixtures()
	must(t, err)
	raw, err := os.ReadFile("../" + rmqfake.ProjectFixturesFile)
	must(t, err)
	if want := strings.Count(string(raw), "\ntopic ") + strings.Count(string(raw), "\ngroup "); len(fs) != want {
		t.Fatalf("%d fixtures, the file has %d topic and group lines", len(fs), want)
	}
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures())
	st := s.Stats()
	for _, fx := range fs {
		if fx.Group {
			if _, ok := st.Groups[fx.Name]; !ok {
				t.Errorf("group %s not created", fx.Name)
			}
		} else if ts, ok := st.Topics[fx.Name]; !ok || ts.Type != fx.Type {
			t.Errorf("topic %s: %+v", fx.Name, ts)
		}
	}
}

func TestParseFixture(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]rmqfake.Fixture{
		"topic a lite":                         {Name: "a", Type: rmqfake.TopicLite, RetryMax: -1},
		"topic b normal queues=1":              {Name: "b", Type: rmqfake.TopicNormal, Queues: 1, RetryMax: -1},
		"topic c":                              {Name: "c", Type: rmqfake.TopicNormal, RetryMax: -1},
		"group g bind=a wildcard retry=3":      {Group: true, Name: "g", Bind: "a", Wildcard: true, RetryMax: 3},
		"group f fifo":                         {Group: true, Name: "f", FIFO: true, RetryMax: -1},
		"  group   h   retry=0  ":              {Group: true, Name: "h", RetryMax: 0},
		"topic d delay queues=2":               {Name: "d", Type: rmqfake.TopicDelay, Queues: 2, RetryMax: -1},
		"group e bind=a wildcard event-cap=10": {Group: true, Name: "e", Bind: "a", Wildcard: true, RetryMax: -1, EventCap: 10},
	} {
		got, err := rmqfake.ParseFixture(line)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", line, got, err, want)
		}
	}
	for _, bad := range []string{"topic", "topic a blue", "topic a lite queues=0", "group g retry=-1", "group g colour=red", "queue q", "group g bind=", "group g event-cap=9", "group g event-cap=x", "group g event-cap=2147483648"} {
		if _, err := rmqfake.ParseFixture(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	fs, err := rmqfake.ParseFixtures(strings.NewReader("# comment\n\ntopic a lite # trailing\ngroup g bind=a\n"))
	if err != nil || len(fs) != 2 {
		t.Errorf("ParseFixtures: %v, %v", fs, err)
	}
	if _, err := rmqfake.ParseFixtures(strings.NewReader("topic a\ntopic b purple\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error without its line: %v", err)
	}
}
