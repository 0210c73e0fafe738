package rmqbenthos_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The tests read a stream's Benthos metrics through the metrics exporter
// `rmqflow_test_counts`: `metrics: {rmqflow_test_counts: {id: <id>}}` records
// every counter of the stream in the counts registered under id.
func init() {
	service.MustRegisterMetricsExporter("rmqflow_test_counts",
		service.NewConfigSpec().Field(service.NewStringField("id")),
		func(conf *service.ParsedConfig, _ *service.Logger) (service.MetricsExporter, error) {
			id, err := conf.FieldString("id")
			if err != nil {
				return nil, err
			}
			c, ok := countsByID.Load(id)
			if !ok {
				return nil, fmt.Errorf("no counts registered as %q", id)
			}
			return c.(*counts), nil
		})
}

var countsByID sync.Map // id -> *counts

// counts is a stream's counters: the increments of each counter name per
// label set, and a token on changed after each.
type counts struct {
	mu      sync.Mutex
	n       map[string]map[string]int64 // name -> "k=v,..." -> total
	changed chan struct{}
}

// newCounts registers counts under id until the test ends; the stream's
// metrics config is metricsYAML(id).
func newCounts(id string) *counts {
	c := &counts{n: map[string]map[string]int64{}, changed: make(chan struct{}, 1)}
	countsByID.Store(id, c)
	return c
}

func metricsYAML(id string) string { return "rmqflow_test_counts:\n  id: " + id }

func (c *counts) NewCounterCtor(name string, keys ...string) service.MetricsExporterCounterCtor {
	return func(values ...string) service.MetricsExporterCounter {
		var labels []string
		for i, k := range keys {
			if i < len(values) {
				labels = append(labels, k+"="+values[i])
			}
		}
		return counter{c: c, name: name, labels: strings.Join(labels, ",")}
	}
}

func (c *counts) NewTimerCtor(string, ...string) service.MetricsExporterTimerCtor {
	return func(...string) service.MetricsExporterTimer { return nopMetric{} }
}

func (c *counts) NewGaugeCtor(string, ...string) service.MetricsExporterGaugeCtor {
	return func(...string) service.MetricsExporterGauge { return nopMetric{} }
}

func (c *counts) Close(context.Context) error { return nil }

type counter struct {
	c            *counts
	name, labels string
}

func (k counter) Incr(n int64) {
	k.c.mu.Lock()
	if k.c.n[k.name] == nil {
		k.c.n[k.name] = map[string]int64{}
	}
	k.c.n[k.name][k.labels] += n
	k.c.mu.Unlock()
	select {
	case k.c.changed <- struct{}{}:
	default:
	}
}

type nopMetric struct{}

func (nopMetric) Timing(int64) {}
func (nopMetric) Set(int64)    {}

// sum adds up counter name over the label sets that hold every label of
// want ("k=v").
func (c *counts) sum(name string, want ...string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
outer:
	for labels, v := range c.n[name] {
		have := strings.Split(labels, ",")
		for _, w := range want {
			found := false
			for _, h := range have {
				found = found || h == w
			}
			if !found {
				continue outer
			}
		}
		n += v
	}
	return n
}

// by formats counter name per value of label key: "value=n ..." ("none" if
// it never counted).
func (c *counts) by(name, key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	per := map[string]int64{}
	for labels, v := range c.n[name] {
		val := "-"
		for _, l := range strings.Split(labels, ",") {
			if rest, ok := strings.CutPrefix(l, key+"="); ok {
				val = rest
			}
		}
		per[val] += v
	}
	var out []string
	for k, v := range per {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}
