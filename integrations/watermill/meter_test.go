package rmqwatermill_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// counterMeter records the increments of every Int64Counter made from it, so
// that a test reads rmqflow's metrics (rmqflow.Connection.Meter) by name and
// attribute; changed receives a token after each increment.
type counterMeter struct {
	noop.Meter
	mu      sync.Mutex
	adds    []counterAdd
	changed chan struct{}
}

type counterAdd struct {
	name  string
	attrs attribute.Set
	n     int64
}

func newCounterMeter() *counterMeter { return &counterMeter{changed: make(chan struct{}, 1)} }

type recordingCounter struct {
	noop.Int64Counter
	name string
	m    *counterMeter
}

func (c recordingCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	cfg := metric.NewAddConfig(opts)
	c.m.mu.Lock()
	c.m.adds = append(c.m.adds, counterAdd{name: c.name, attrs: cfg.Attributes(), n: n})
	c.m.mu.Unlock()
	select {
	case c.m.changed <- struct{}{}:
	default:
	}
}

func (m *counterMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return recordingCounter{name: name, m: m}, nil
}

// total adds up counter name's increments.
func (m *counterMeter) total(name string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, a := range m.adds {
		if a.name == name {
			n += a.n
		}
	}
	return n
}

// sum adds up counter name's increments whose attribute key has value.
func (m *counterMeter) sum(name, key, value string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, a := range m.adds {
		if v, ok := a.attrs.Value(attribute.Key(key)); a.name == name && ok && v.AsString() == value {
			n += a.n
		}
	}
	return n
}

// by formats counter name's increments per value of attribute key, as
// "value=n ..." ("-" for increments without the attribute).
func (m *counterMeter) by(name, key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	per := map[string]int64{}
	for _, a := range m.adds {
		if a.name != name {
			continue
		}
		v, ok := a.attrs.Value(attribute.Key(key))
		k := "-"
		if ok {
			k = v.AsString()
		}
		per[k] += a.n
	}
	var out []string
	for k, n := range per {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}
