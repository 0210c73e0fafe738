package proof

import (
	"strings"
	"testing"
)

// recs builds records "lite seq" with increasing times from at.
func recs(at int64, pairs ...string) []Record {
	var out []Record
	for _, p := range pairs {
		f := strings.Fields(p)
		var seq int
		for _, c := range f[1] {
			seq = seq*10 + int(c-'0')
		}
		out = append(out, Record{At: at, Lite: f[0], Seq: seq, Attempt: 1})
		at++
	}
	return out
}

var exp = Expected{Prefix: "p", Lites: 2, Messages: 6} // p-0: 0 1 2, p-1: 0 1 2

func TestCheckSequentialClean(t *testing.T) {
	runs := []Run{
		{Name: "r1", Killed: true, Records: recs(0, "p-0 0", "p-1 0", "p-0 1")},
		// p-0 1 was in flight at the kill: handled again first.
		{Name: "r2", Records: recs(10, "p-0 1", "p-1 1", "p-0 2", "p-1 2")},
	}
	r := CheckSequential(exp, runs)
	if r.Lost != 0 || r.ViolationCount != 0 || r.Dups != 1 || r.DupsByRun[1] != 1 || r.Distinct != 6 || r.Handled != 7 || r.Killed != 1 {
		t.Errorf("report %v %v", r, r.Violations)
	}
}

func TestCheckSequentialFindsFaults(t *testing.T) {
	cases := []struct {
		name string
		runs []Run
		want func(*Report) bool
	}{
		{"lost", []Run{{Name: "r", Records: recs(0, "p-0 0", "p-0 1", "p-0 2", "p-1 0", "p-1 1")}},
			func(r *Report) bool { return r.Lost == 1 && r.LostSample[0] == "p-1 2" && r.ViolationCount == 0 }},
		{"out of order in a run", []Run{{Name: "r", Records: recs(0, "p-0 0", "p-0 2", "p-0 1", "p-1 0", "p-1 1", "p-1 2")}},
			func(r *Report) bool { return r.Lost == 0 && r.ViolationCount == 2 }},
		{"again right behind itself", []Run{{Name: "r", Records: recs(0, "p-0 0", "p-0 1", "p-0 1", "p-0 2", "p-1 0", "p-1 1", "p-1 2")}},
			func(r *Report) bool { return r.ViolationCount == 0 && r.Dups == 1 }},
		{"back to an earlier one", []Run{{Name: "r", Records: recs(0, "p-0 0", "p-0 1", "p-0 0", "p-0 1", "p-0 2", "p-1 0", "p-1 1", "p-1 2")}},
			func(r *Report) bool { return r.ViolationCount == 1 && r.Dups == 2 }},
		{"restart skips ahead", []Run{
			{Name: "r1", Killed: true, Records: recs(0, "p-0 0", "p-1 0", "p-1 1", "p-1 2")},
			{Name: "r2", Records: recs(10, "p-0 2", "p-0 1")}},
			func(r *Report) bool { return r.Lost == 0 && r.ViolationCount == 2 }},
		{"restart goes back two", []Run{
			{Name: "r1", Killed: true, Records: recs(0, "p-0 0", "p-0 1", "p-0 2", "p-1 0")},
			{Name: "r2", Records: recs(10, "p-0 1", "p-0 2", "p-1 1", "p-1 2")}},
			func(r *Report) bool { return r.ViolationCount == 1 && r.Dups == 2 }},
		{"unknown message", []Run{{Name: "r", Records: recs(0, "p-0 0", "p-0 1", "p-0 2", "p-1 0", "p-1 1", "p-1 2", "p-1 3", "q-0 0", "p-01 0")}},
			func(r *Report) bool { return r.Unknown == 3 && r.Lost == 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckSequential(exp, c.runs)
			if !c.want(r) {
				t.Errorf("report %v, violations %q", r, r.Violations)
			}
		})
	}
}

func TestCheckConcurrent(t *testing.T) {
	// Two processes share the lite topics; p-0 moves from a to b.
	a := Run{Name: "a", Records: []Record{{At: 1, Lite: "p-0", Seq: 0}, {At: 2, Lite: "p-0", Seq: 1}, {At: 3, Lite: "p-1", Seq: 0}}}
	b := Run{Name: "b", Records: []Record{{At: 4, Lite: "p-0", Seq: 2}, {At: 5, Lite: "p-1", Seq: 1}, {At: 6, Lite: "p-1", Seq: 2}}}
	if r := CheckConcurrent(exp, []Run{a, b}); r.ViolationCount != 0 || r.Lost != 0 || r.Dups != 0 {
		t.Errorf("clean: %v %q", r, r.Violations)
	}
	// b handles p-0 1 again: a duplicate across processes with no crash.
	b2 := b
	b2.Records = append([]Record{{At: 3, Lite: "p-0", Seq: 1}}, b.Records...)
	if r := CheckConcurrent(exp, []Run{a, b2}); r.ViolationCount != 1 || r.Dups != 1 {
		t.Errorf("duplicate without a crash: %v %q", r, r.Violations)
	}
	// The same after a was killed: allowed, counted.
	a.Killed = true
	if r := CheckConcurrent(exp, []Run{a, b2}); r.ViolationCount != 0 || r.Dups != 1 || r.DupsByRun[1] != 1 {
		t.Errorf("duplicate after a crash: %v %q", r, r.Violations)
	}
	// b handles p-0 2 before a handled p-0 1 (by time): out of order.
	b3 := Run{Name: "b", Records: []Record{{At: 0, Lite: "p-0", Seq: 2}, {At: 5, Lite: "p-1", Seq: 1}, {At: 6, Lite: "p-1", Seq: 2}}}
	if r := CheckConcurrent(exp, []Run{a, b3}); r.ViolationCount == 0 {
		t.Errorf("order across processes not checked: %v", r)
	}
}

func TestParseLog(t *testing.T) {
	got, err := ParseLog(strings.NewReader("10 p-0 0 1\n11 p-1 4 2\n"))
	if err != nil || len(got) != 2 || got[1] != (Record{At: 11, Lite: "p-1", Seq: 4, Attempt: 2}) {
		t.Errorf("ParseLog = %v, %v", got, err)
	}
	if _, err := ParseLog(strings.NewReader("10 p-0 0 1\n11 p-1")); err == nil {
		t.Error("a torn last line was accepted")
	}
	if _, err := ParseLog(strings.NewReader("10 p-0 x 1\n")); err == nil {
		t.Error("a bad seq was accepted")
	}
}
