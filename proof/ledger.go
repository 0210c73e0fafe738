package proof

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Record is one line of a child's log: a message it handled (and then acked).
type Record struct {
	At      int64 // unix nanoseconds when the work was done, before the ack
	Lite    string
	Seq     int
	Attempt int32
}

// Run is what one child process handled, in the order it handled it. Runs of
// one crash test follow each other in time; the runs of a multi-process test
// overlap.
type Run struct {
	Name    string
	Records []Record
	// Killed says the run ended with SIGKILL (a crash) rather than a clean
	// shutdown.
	Killed bool
}

// ParseLog reads a child's log (lines "<at> <lite> <seq> <attempt>"). A last
// line without its newline is a write cut by the kill: the kernel takes a
// write(2) whole, so it cannot happen; it is reported as an error.
func ParseLog(r io.Reader) ([]Record, error) {
	var out []Record
	br := bufio.NewReaderSize(r, 1<<16)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			if line != "" {
				return out, fmt.Errorf("line %d: %q has no newline (a torn write)", n, line)
			}
			return out, nil
		}
		if err != nil {
			return out, err
		}
		rec, err := parseRecord(strings.TrimSuffix(line, "\n"))
		if err != nil {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, rec)
	}
}

func parseRecord(line string) (Record, error) {
	f := strings.Fields(line)
	if len(f) != 4 {
		return Record{}, fmt.Errorf("%q: want 4 fields", line)
	}
	at, err1 := strconv.ParseInt(f[0], 10, 64)
	seq, err2 := strconv.Atoi(f[2])
	att, err3 := strconv.ParseInt(f[3], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || seq < 0 {
		return Record{}, fmt.Errorf("%q: bad number", line)
	}
	return Record{At: at, Lite: f[1], Seq: seq, Attempt: int32(att)}, nil
}

// ReadLog parses the log file at path.
func ReadLog(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseLog(f)
}

// Expected is what was produced: lite topic "<Prefix>-<i>" for i in
// 0..Lites-1 holds the messages with sequence numbers 0.. in send order;
// message k of the whole stream went to lite topic k mod Lites with sequence k
// div Lites.
type Expected struct {
	Prefix   string
	Lites    int
	Messages int
}

// count is the number of messages lite topic i holds.
func (e Expected) count(i int) int {
	n := e.Messages / e.Lites
	if i < e.Messages%e.Lites {
		n++
	}
	return n
}

// index maps a lite topic name to its number, or -1 when it is not one of
// e's.
func (e Expected) index(lite string) int {
	rest, ok := strings.CutPrefix(lite, e.Prefix+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= e.Lites || strconv.Itoa(i) != rest {
		return -1
	}
	return i
}

// Report is the verdict on a set of runs.
type Report struct {
	Runs      int
	Killed    int
	Messages  int // produced
	Handled   int // records, duplicates included
	Distinct  int // produced messages handled at least once
	Lost      int // produced messages never handled
	Dups      int // Handled - Distinct (handlings beyond the first)
	DupsByRun []int
	Unknown   int // records of messages that were never produced
	// Violations lists order and integrity failures, at most 20, with
	// ViolationCount the full number.
	Violations     []string
	ViolationCount int
	LostSample     []string
}

func (r *Report) violate(format string, args ...any) {
	r.ViolationCount++
	if len(r.Violations) < 20 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// String is the one-line summary the tests log.
func (r *Report) String() string {
	return fmt.Sprintf("runs %d (killed %d), messages %d, handled %d, distinct %d, lost %d, duplicates %d %v, unknown %d, order/integrity violations %d",
		r.Runs, r.Killed, r.Messages, r.Handled, r.Distinct, r.Lost, r.Dups, r.DupsByRun, r.Unknown, r.ViolationCount)
}

// CheckSequential checks the runs of one consumer that was killed and
// restarted: the runs follow each other in time. Per lite topic it checks:
//
//   - within each run, the sequence numbers handled are consecutive
//     (each is the previous plus one, or the previous again: a redelivery
//     after a failed ack): in order, none skipped;
//   - across runs, a run's first message of a lite topic is the last one
//     handled before (the in-flight message of a crash, handled again) or
//     the next one: nothing is skipped or handled out of order at a restart.
//
// Every produced message must be handled (Lost), and the count of
// re-handlings is reported per run (a duplicate belongs to the run that
// handled the message again).
func CheckSequential(e Expected, runs []Run) *Report {
	r := newReport(e, runs)
	last := make([]int, e.Lites) // highest seq handled so far per lite topic, -1 none
	for i := range last {
		last[i] = -1
	}
	seen := make([][]uint8, e.Lites)
	for i := range seen {
		seen[i] = make([]uint8, e.count(i))
	}
	for ri, run := range runs {
		prev := map[int]int{} // lite index -> seq last handled in this run
		for _, rec := range run.Records {
			li := e.index(rec.Lite)
			if li < 0 || rec.Seq >= len(seen[li]) {
				r.Unknown++
				r.violate("run %s: handled %s %d, which was never produced", run.Name, rec.Lite, rec.Seq)
				continue
			}
			if seen[li][rec.Seq] > 0 {
				r.DupsByRun[ri]++
			}
			if seen[li][rec.Seq] < 255 {
				seen[li][rec.Seq]++
			}
			if p, ok := prev[li]; ok {
				// The same message again right behind itself is a
				// redelivery after an ack that failed (a proxy restart):
				// a duplicate, not an order break.
				if rec.Seq != p+1 && rec.Seq != p {
					r.violate("run %s: lite topic %s handled %d after %d (want %d)", run.Name, rec.Lite, rec.Seq, p, p+1)
				}
			} else if rec.Seq != last[li] && rec.Seq != last[li]+1 {
				r.violate("run %s: lite topic %s starts at %d; the runs before it ended at %d (want %d or %d)",
					run.Name, rec.Lite, rec.Seq, last[li], last[li], last[li]+1)
			}
			prev[li] = rec.Seq
			last[li] = max(last[li], rec.Seq)
		}
	}
	r.finish(e, seen)
	return r
}

// CheckConcurrent checks runs that consumed one group at the same time (one
// per process). Their records are merged by handle time; per lite topic the
// merged sequence must be consecutive, across processes. A lite topic handed
// from one process to another may repeat its last message only if the process
// that handled it first was killed (its ack may not have happened).
func CheckConcurrent(e Expected, runs []Run) *Report {
	r := newReport(e, runs)
	type rec struct {
		Record
		run int
	}
	var all []rec
	for ri, run := range runs {
		for _, x := range run.Records {
			all = append(all, rec{x, ri})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].At < all[j].At })
	seen := make([][]uint8, e.Lites)
	for i := range seen {
		seen[i] = make([]uint8, e.count(i))
	}
	type lastRec struct {
		seq, run int
	}
	last := make([]lastRec, e.Lites)
	for i := range last {
		last[i] = lastRec{-1, -1}
	}
	for _, x := range all {
		li := e.index(x.Lite)
		if li < 0 || x.Seq >= len(seen[li]) {
			r.Unknown++
			r.violate("%s: handled %s %d, which was never produced", runs[x.run].Name, x.Lite, x.Seq)
			continue
		}
		if seen[li][x.Seq] > 0 {
			r.DupsByRun[x.run]++
		}
		if seen[li][x.Seq] < 255 {
			seen[li][x.Seq]++
		}
		l := last[li]
		switch {
		case x.Seq == l.seq+1:
		case x.Seq == l.seq && l.run != x.run && runs[l.run].Killed:
			// The in-flight message of a killed process, handled again.
		default:
			who := "none"
			if l.run >= 0 {
				who = runs[l.run].Name
			}
			r.violate("%s: lite topic %s handled %d after %d (by %s); want %d",
				runs[x.run].Name, x.Lite, x.Seq, l.seq, who, l.seq+1)
		}
		last[li] = lastRec{max(l.seq, x.Seq), x.run}
	}
	r.finish(e, seen)
	return r
}

func newReport(e Expected, runs []Run) *Report {
	r := &Report{Runs: len(runs), Messages: e.Messages, DupsByRun: make([]int, len(runs))}
	for _, run := range runs {
		r.Handled += len(run.Records)
		if run.Killed {
			r.Killed++
		}
	}
	return r
}

func (r *Report) finish(e Expected, seen [][]uint8) {
	for li, s := range seen {
		for seq, n := range s {
			if n == 0 {
				r.Lost++
				if len(r.LostSample) < 10 {
					r.LostSample = append(r.LostSample, fmt.Sprintf("%s-%d %d", e.Prefix, li, seq))
				}
			} else {
				r.Distinct++
			}
		}
	}
	for _, d := range r.DupsByRun {
		r.Dups += d
	}
}
