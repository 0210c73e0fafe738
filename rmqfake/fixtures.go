package rmqfake

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Fixture is a topic or group to create, one line of a fixtures file:
//
//	topic <name> [normal|lite|fifo|delay|transaction] [queues=N] [ttl=MINUTES]
//	group <name> [retry=N] [bind=<lite main topic>] [wildcard] [exclusive] [fifo] [event-cap=N]
type Fixture struct {
	// Group is false for a topic, true for a group.
	Group bool
	Name  string
	// Type, Queues and LiteTTL describe a topic (Queues 0: the default, 4;
	// at most MaxQueues; LiteTTL in minutes, 0: never).
	Type    TopicType
	Queues  int
	LiteTTL int
	// RetryMax, Bind, Wildcard, Exclusive, FIFO and EventCap describe a
	// group (RetryMax -1: the default, 16; EventCap is
	// lite.sub.client.max.event.cnt, LiteMaxEventCount, 0: unset).
	RetryMax  int
	Bind      string
	Wildcard  bool
	Exclusive bool
	FIFO      bool
	EventCap  int
}

// ProjectFixturesFile is where the project keeps the topics and groups its
// tests use, relative to the repository root.
const ProjectFixturesFile = "scripts/rocketmq/fixtures.txt"

// ProjectFixtures reads scripts/rocketmq/fixtures.txt, the fixtures `make
// test` creates on the real broker, found by walking up from the working
// directory (a package directory while `go test` runs). It lets rmqfake stand
// in for that broker in the project's own tests.
func ProjectFixtures() ([]Fixture, error) {
	path, err := projectFile(ProjectFixturesFile)
	if err != nil {
		return nil, err
	}
	return LoadFixtures(path)
}

// LoadFixtures reads a fixtures file.
func LoadFixtures(path string) ([]Fixture, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fs, err := ParseFixtures(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fs, nil
}

// ParseFixtures reads a fixtures file: one fixture per line, '#' starts a
// comment.
func ParseFixtures(r io.Reader) ([]Fixture, error) {
	var out []Fixture
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		f, err := ParseFixture(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, f)
	}
	return out, sc.Err()
}

// ParseFixture reads one fixture line ("topic t lite", "group g bind=t
// wildcard retry=3").
func ParseFixture(line string) (Fixture, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return Fixture{}, fmt.Errorf("want 'topic <name> <type> [queues=N]' or 'group <name> [options]', got %q", line)
	}
	fx := Fixture{Name: f[1], RetryMax: -1}
	switch f[0] {
	case "topic":
		fx.Type = TopicNormal
		for i, opt := range f[2:] {
			k, v, hasV := strings.Cut(opt, "=")
			switch {
			case i == 0 && !hasV:
				t, ok := ParseTopicType(k)
				if !ok {
					return Fixture{}, fmt.Errorf("topic %s: unknown type %q (normal, lite, fifo, delay, transaction)", fx.Name, k)
				}
				fx.Type = t
			case k == "queues" && hasV:
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > MaxQueues {
					return Fixture{}, fmt.Errorf("topic %s: queues=%q: want a number from 1 to %d", fx.Name, v, MaxQueues)
				}
				fx.Queues = n
			case k == "ttl" && hasV:
				n, err := strconv.Atoi(v)
				if err != nil || n < -1 || n > 43200 {
					return Fixture{}, fmt.Errorf("topic %s: ttl=%q: want minutes from -1 to 43200 (lite.topic.expiration)", fx.Name, v)
				}
				fx.LiteTTL = n
			default:
				return Fixture{}, fmt.Errorf("topic %s: unknown option %q (queues=N, ttl=MINUTES)", fx.Name, opt)
			}
		}
	case "group":
		fx.Group = true
		for _, opt := range f[2:] {
			k, v, hasV := strings.Cut(opt, "=")
			switch {
			case k == "retry" && hasV:
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > maxRetryMax {
					return Fixture{}, fmt.Errorf("group %s: retry=%q: want a number from 0 to %d", fx.Name, v, maxRetryMax)
				}
				fx.RetryMax = n
			case k == "bind" && hasV && v != "":
				fx.Bind = v
			case k == "wildcard" && !hasV:
				fx.Wildcard = true
			case k == "fifo" && !hasV:
				fx.FIFO = true
			case k == "exclusive" && !hasV:
				fx.Exclusive = true
			case k == "event-cap" && hasV:
				n, err := strconv.Atoi(v)
				if err == nil {
					err = checkMaxEvents(n)
				}
				if err != nil || n == 0 {
					return Fixture{}, fmt.Errorf("group %s: event-cap=%q: want a number from %d to %d (lite.sub.client.max.event.cnt)", fx.Name, v, MinLiteMaxEventCount, math.MaxInt32)
				}
				fx.EventCap = n
			default:
				return Fixture{}, fmt.Errorf("group %s: unknown option %q (retry=N, bind=TOPIC, wildcard, exclusive, fifo, event-cap=N)", fx.Name, opt)
			}
		}
	default:
		return Fixture{}, fmt.Errorf("unknown kind %q: want topic or group", f[0])
	}
	return fx, nil
}

// ApplyFixtures creates the fixtures' topics and groups, each with opts too
// (InNamespace(ns) creates them in a namespace).
func (s *Server) ApplyFixtures(fs []Fixture, opts ...ResourceOption) error {
	for _, f := range fs {
		if err := s.applyFixture(f, opts); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) applyFixture(f Fixture, with []ResourceOption) error {
	if !f.Group {
		var opts []TopicOption
		for _, o := range with {
			opts = append(opts, o)
		}
		if f.Queues > 0 {
			opts = append(opts, Queues(f.Queues))
		}
		if f.LiteTTL > 0 {
			opts = append(opts, LiteTTL(f.LiteTTL))
		}
		return s.CreateTopic(f.Name, f.Type, opts...)
	}
	var opts []GroupOption
	for _, o := range with {
		opts = append(opts, o)
	}
	if f.RetryMax >= 0 {
		opts = append(opts, RetryMax(f.RetryMax))
	}
	if f.Bind != "" {
		opts = append(opts, LiteBind(f.Bind))
	}
	if f.Wildcard {
		opts = append(opts, Wildcard())
	}
	if f.FIFO {
		opts = append(opts, FIFO())
	}
	if f.Exclusive {
		opts = append(opts, LiteExclusive())
	}
	if f.EventCap > 0 {
		opts = append(opts, LiteMaxEventCount(f.EventCap))
	}
	return s.CreateGroup(f.Name, opts...)
}
