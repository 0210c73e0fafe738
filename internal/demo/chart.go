package demo

import (
	"fmt"
	"io"
	"time"
)

// Bar is one bar of a chart.
type Bar struct {
	Label string
	Value float64
	Color string
}

// WriteBarChart writes a self-contained SVG bar chart: title, bars with their
// labels and values, unit after each value.
func WriteBarChart(w io.Writer, title, unit string, bars []Bar) error {
	const width, height, left, top, barH, gap = 720, 0, 230, 50, 28, 14
	h := top + len(bars)*(barH+gap) + 30
	maxV := 0.0
	for _, b := range bars {
		maxV = max(maxV, b.Value)
	}
	if maxV == 0 {
		maxV = 1
	}
	scale := float64(width-left-120) / maxV
	if _, err := fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", width, h); err != nil {
		return err
	}
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", 16, escape(title))
	for i, b := range bars {
		y := top + i*(barH+gap)
		wBar := int(b.Value * scale)
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-10, y+barH/2+5, escape(b.Label))
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, y, max(wBar, 1), barH, b.Color)
		fmt.Fprintf(w, `<text x="%d" y="%d">%.0f %s</text>`+"\n", left+wBar+6, y+barH/2+5, b.Value, escape(unit))
	}
	_, err := fmt.Fprintln(w, `</svg>`)
	return err
}

func escape(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		switch r {
		case '<':
			out = append(out, []rune("&lt;")...)
		case '>':
			out = append(out, []rune("&gt;")...)
		case '&':
			out = append(out, []rune("&amp;")...)
		default:
			out = append(out, r)
		}
	}
	return string(out)
}

// WriteLatencyChart charts the cold sessions' p50 and p99 (and the hot
// session's p50) of each run: the baseline without the hot session, the
// throttle off and on.
func WriteLatencyChart(w io.Writer, results []Result) error {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var bars []Bar
	for _, r := range results {
		tag, color := "throttle off", "#d9534f"
		switch {
		case r.Baseline:
			tag, color = "no hot session", "#5b8def"
		case r.Throttled:
			tag, color = "throttle on", "#5cb85c"
		}
		cold := r.Cold()
		bars = append(bars,
			Bar{Label: "cold p50, " + tag, Value: ms(quantile(cold, 0.5)), Color: color},
			Bar{Label: "cold p99, " + tag, Value: ms(quantile(cold, 0.99)), Color: color},
		)
		if hot := r.Hot(); len(hot.Latencies) > 0 {
			bars = append(bars, Bar{Label: "hot p50, " + tag, Value: ms(hot.P(0.5)), Color: "#999999"})
		}
	}
	return WriteBarChart(w, "Cold sessions' latency (born → acked) while one session floods", "ms", bars)
}
