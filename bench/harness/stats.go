package main

import (
	"math"
	"slices"
)

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread is a cell's statistic over its repetitions.
type spread struct {
	Median, Min, Max float64
	N                int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	return spread{Median: median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// cell aggregates the successful runs of one report cell.
type cell struct {
	runs []*run
}

func (c cell) of(f func(*run) float64) spread {
	var xs []float64
	for _, r := range c.runs {
		if v := f(r); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return spreadOf(xs)
}

// cells groups the successful runs by key, keeping first-seen order.
func cells(runs []*run, keep func(*run) bool) (keys []string, by map[string]*cell) {
	by = map[string]*cell{}
	for _, r := range runs {
		if r.Result.Error != "" || !keep(r) {
			continue
		}
		k := r.Key()
		c := by[k]
		if c == nil {
			c = &cell{}
			by[k] = c
			keys = append(keys, k)
		}
		c.runs = append(c.runs, r)
	}
	return keys, by
}

// nan marks a value a run cannot give (not observable).
func nan() float64 { return math.NaN() }

// perMsgOrNaN is x per window message, NaN when x < 0 (not observable).
func perMsgOrNaN(r *run, x float64) float64 {
	if x < 0 {
		return nan()
	}
	return x / float64(max(r.Result.Messages, 1))
}
