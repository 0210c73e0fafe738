package rmqkuiper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rmqflow/rmqflow"
)

// A ledger holds the rows one run of a rule ingested from its rocketmq
// stream and that no acking sink has settled yet, in ingest order
// (rocketmq_seq). Each acking sink of the rule reports the highest seq it
// delivered; every row up to the lowest of those reports is done —
// delivered, or dropped by the rule's SQL before a later row was delivered,
// or folded into a window result that was delivered — and a message is
// acked once all its rows are done.
//
// That inference holds because a run processes its rows in order: one
// rocketmq stream per rule, concurrency 1, no buffer-full discarding, no
// overlapping or event-time windows. The source checks those options when it
// connects (rulecheck.go) and refuses to start without them. Nothing is
// acked before the run is confirmed (confirm): until then the settled
// messages are held.
type ledger struct {
	key ledgerKey

	mu     sync.Mutex
	acker  ackerLike // the source's; nil while no source is attached
	source any       // the attached source, to detach only itself
	// first is the seq before the run's first row, next its last row's:
	// the run gives out first+1..next. first comes from the clock (and is
	// above any seq this process gave out before), so that a row of an
	// earlier run, of this process or another, carries a seq outside them.
	first, next int64
	rows        []pendingRow // ascending seq
	// expected is how many acking sinks the rule has; marks holds the
	// highest seq each one delivered. Until every expected sink reported
	// once, nothing is acked.
	expected int
	marks    map[string]int64
	now      func() time.Time
	// poisoned: a sink reported a seq this run never gave out (a row of an
	// earlier run): progress can no longer be trusted, and the run acks
	// nothing more; its messages come back.
	poisoned error
	// confirmed: the rule's stored definition, read again after the run
	// started (watchRule's first read), is still the one checked. Until
	// then the messages the run settled are held in held, not acked: an
	// update the topology check cannot see (a window kind, an option) may
	// be what runs, and only that read tells. confirm acks them; poison
	// leaves them to come back; detach gives them back.
	confirmed bool
	held      []*heldMsg
}

// ErrForeignSeq: a sink delivered a row whose rocketmq_seq this run of the
// rule never gave out (restored state of an earlier run, a cached row).
var ErrForeignSeq = errors.New("rocketmq: a delivered row carries a " + MetaSeq + " this run of the rule never gave out (a row of an earlier run?): the run acks nothing more, its messages come back")

// ackerLike is what a ledger needs of rmqflow's Acker (a fake in unit tests).
type ackerLike interface {
	// ackAll acks hs together and returns each one's result.
	ackAll(ctx context.Context, hs []rmqflow.ReceiptHandle) []error
	Release(ctx context.Context, h rmqflow.ReceiptHandle) error
	Leave(h rmqflow.ReceiptHandle)
	// failedOwn gives back a message whose rows failed: left to come
	// back, or, once its valve fired, sent where on-valve says (valve.go).
	// m is the message, when the ledger kept it (dead-letter-topic).
	failedOwn(ctx context.Context, h rmqflow.ReceiptHandle, m *rmqflow.AckableMessage[[]byte])
}

// rmqAcker is the source's Acker, and its valve, as a ledger uses them.
type rmqAcker struct {
	*rmqflow.Acker
	v *valve // nil: a failed message is left, whatever its count
}

func (a rmqAcker) failedOwn(ctx context.Context, h rmqflow.ReceiptHandle, m *rmqflow.AckableMessage[[]byte]) {
	if a.v == nil {
		a.Leave(h)
		return
	}
	a.v.failed(ctx, a.Acker, h, m)
}

// ackAll sends the acks at once (the ack pool batches them) and waits for
// them all, whatever ctx says: an ack once sent is worth its answer.
func (a rmqAcker) ackAll(ctx context.Context, hs []rmqflow.ReceiptHandle) []error {
	futures := make([]*rmqflow.AckFuture, len(hs))
	for i, h := range hs {
		futures[i] = a.AckAsync(context.WithoutCancel(ctx), h)
	}
	errs := make([]error, len(hs))
	for i, f := range futures {
		<-f.Done()
		errs[i] = f.Err()
	}
	return errs
}

// ledgerKey names one run of a rule: a restarted rule gets a new ledger, so
// that the old run's closing sinks cannot ack the new run's rows.
type ledgerKey struct {
	rule string
	run  int
}

func (k ledgerKey) String() string { return fmt.Sprintf("%s (run %d)", k.rule, k.run) }

// heldMsg is one message in the ledger: rows is how many of its rows are
// not settled yet (a JSON array payload makes one row per element).
type heldMsg struct {
	h    rmqflow.ReceiptHandle
	id   string
	rows int
	gone bool // given back after a failure: its other rows ack nothing
	// dead: a lite message's copy from the dead-letter topic, which no ack
	// removes (docs/broker-semantics.md, scenario g): settled by leaving it.
	dead bool
	// msg is the message itself, kept only to park it in dead-letter-topic
	// should its valve fire; nil otherwise.
	msg *rmqflow.AckableMessage[[]byte]
}

type pendingRow struct {
	seq int64
	msg *heldMsg
}

var ledgers = struct {
	sync.Mutex
	m map[ledgerKey]*ledger
}{m: map[ledgerKey]*ledger{}}

// ledgerOf returns the run's ledger, making it on first use (by the source
// or a sink, whichever starts first).
func ledgerOf(k ledgerKey) *ledger {
	ledgers.Lock()
	defer ledgers.Unlock()
	l := ledgers.m[k]
	if l == nil {
		l = &ledger{key: k, marks: map[string]int64{}, now: time.Now}
		l.first = seqBase()
		l.next = l.first
		ledgers.m[k] = l
	}
	return l
}

// seqHigh is the highest seq base handed out in this process.
var seqHigh int64

// seqBase is where a new run's seqs start: the clock in microseconds, but
// above every base before it (plus room for 2^32 rows each). Called under
// ledgers' lock.
func seqBase() int64 {
	b := max(time.Now().UnixMicro(), seqHigh+1<<32)
	seqHigh = b
	return b
}

// forget drops the ledger of k from the registry once nothing uses it.
func forget(l *ledger) {
	ledgers.Lock()
	defer ledgers.Unlock()
	l.mu.Lock()
	idle := l.source == nil && len(l.marks) == 0
	l.mu.Unlock()
	if idle && ledgers.m[l.key] == l {
		delete(ledgers.m, l.key)
	}
}

// ErrTwoSources is returned when a rule reads two rocketmq streams whose
// sinks ack: a window's seq could not tell whose rows it covers.
var ErrTwoSources = errors.New("rocketmq: a rule whose sinks ack (ack-mode sink) reads one rocketmq stream only")

// attach makes src the ledger's source, with expected acking sinks.
func (l *ledger) attach(src any, acker ackerLike, expected int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.source != nil && l.source != src {
		return fmt.Errorf("rule %s: %w", l.key, ErrTwoSources)
	}
	l.source, l.acker, l.expected = src, acker, expected
	return nil
}

// detach ends src's part: the messages still pending go back to the group
// at once (the run stopped before settling them), and the ledger forgets
// them.
func (l *ledger) detach(ctx context.Context, src any) error {
	l.mu.Lock()
	if l.source != src {
		l.mu.Unlock()
		return nil
	}
	back := l.takeLocked(func(pendingRow) bool { return true })
	back = append(back, l.takeHeldLocked()...)
	acker := l.acker
	l.source, l.acker = nil, nil
	l.mu.Unlock()
	defer forget(l)
	var errs []error
	for _, m := range back {
		if err := acker.Release(ctx, m.h); err != nil {
			errs = append(errs, fmt.Errorf("giving back %s: %w", m.id, err))
		}
	}
	return errors.Join(errs...)
}

// add records an ingested message of rows rows and returns the seqs given
// to them, ascending. dead marks a copy from the dead-letter topic.
func (l *ledger) add(h rmqflow.ReceiptHandle, rows int, dead bool) []int64 {
	return l.addMsg(h, nil, rows, dead)
}

// addMsg is add, keeping msg (when not nil) for a failure of its own.
func (l *ledger) addMsg(h rmqflow.ReceiptHandle, msg *rmqflow.AckableMessage[[]byte], rows int, dead bool) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := &heldMsg{h: h, id: h.MessageID, rows: rows, dead: dead, msg: msg}
	seqs := make([]int64, rows)
	for i := range seqs {
		l.next++
		seqs[i] = l.next
		l.rows = append(l.rows, pendingRow{seq: l.next, msg: m})
	}
	return seqs
}

// join registers an acking sink; until every expected sink reported, nothing
// is acked.
func (l *ledger) join(sink string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marks[sink]; !ok {
		l.marks[sink] = 0
	}
}

// leave unregisters a closing sink.
func (l *ledger) leave(sink string) {
	l.mu.Lock()
	delete(l.marks, sink)
	l.mu.Unlock()
	forget(l)
}

// lowLocked is the seq every acking sink has passed; 0 while a sink the rule
// has did not report yet.
func (l *ledger) lowLocked() int64 {
	if len(l.marks) < l.expected || len(l.marks) == 0 {
		return 0
	}
	low := int64(-1)
	for _, m := range l.marks {
		if low < 0 || m < low {
			low = m
		}
	}
	return low
}

// takeLocked removes the rows for which drop holds and returns the messages
// whose last row that was, not given back before.
func (l *ledger) takeLocked(drop func(pendingRow) bool) []*heldMsg {
	var done []*heldMsg
	kept := l.rows[:0]
	for _, r := range l.rows {
		if !drop(r) {
			kept = append(kept, r)
			continue
		}
		r.msg.rows--
		if r.msg.rows == 0 && !r.msg.gone {
			done = append(done, r.msg)
		}
	}
	clear(l.rows[len(kept):])
	l.rows = kept
	return done
}

// delivered records that sink delivered every row up to seq, and acks the
// messages every acking sink has now passed. It waits for those acks; a
// failed ack leaves its message to come back (a duplicate, not a loss).
func (l *ledger) delivered(ctx context.Context, sink string, seq int64) error {
	l.mu.Lock()
	if (seq > l.next || seq <= l.first) && l.poisoned == nil {
		l.poisoned = fmt.Errorf("rule %s: sink %s delivered seq %d, the run gave out %d..%d: %w", l.key, sink, seq, l.first+1, l.next, ErrForeignSeq)
	}
	if err := l.poisoned; err != nil {
		l.mu.Unlock()
		l.failed(l.ingested())
		l.leaveHeld()
		return err
	}
	if seq > l.marks[sink] {
		l.marks[sink] = seq
	}
	low := l.lowLocked()
	done := l.holdLocked(l.takeLocked(func(r pendingRow) bool { return r.seq <= low }))
	acker := l.acker
	l.mu.Unlock()
	if acker == nil || len(done) == 0 {
		return nil
	}
	return settle(ctx, acker, done)
}

// failed gives back every message with a row up to seq that is not settled
// yet. They are not given back at once: their lease ends and each comes back
// when its invisibility does. They are not charged with a failure of their
// own (the run cannot tell which of them failed): failedOwn is for a sink
// call that failed.
func (l *ledger) failed(seq int64) int { return l.giveBack(context.Background(), seq, false) }

// failedOwn is failed for an acking sink's call that failed on rows up to
// seq: it gives back the rows of the failed call, the rows a window folded
// into them, and the rows the SQL dropped since the last delivery, and
// charges each of their messages with a failed delivery of its own. A
// message that keeps failing is not returned for ever: once its own
// failures reach its valve it is moved to the group's dead-letter queue
// (or acked, if on-valve says so: valve.go) — before the broker's count,
// which also grows for the messages delivered again behind it, would take
// them there too. A dead-lettered copy is only left (nothing removes it).
func (l *ledger) failedOwn(ctx context.Context, seq int64) int { return l.giveBack(ctx, seq, true) }

// giveBack is failed and failedOwn.
func (l *ledger) giveBack(ctx context.Context, seq int64, own bool) int {
	l.mu.Lock()
	var back []*heldMsg
	for _, r := range l.rows {
		if r.seq > seq {
			break
		}
		if !r.msg.gone {
			r.msg.gone = true
			back = append(back, r.msg)
		}
	}
	// Their rows leave the ledger, later ones of the same message included.
	l.takeLocked(func(r pendingRow) bool { return r.msg.gone })
	acker := l.acker
	l.mu.Unlock()
	if acker != nil {
		for _, m := range back {
			if own && !m.dead {
				acker.failedOwn(ctx, m.h, m.msg)
			} else {
				acker.Leave(m.h)
			}
		}
	}
	return len(back)
}

// poison makes the run ack nothing more, for err: every message pending and
// every one ingested later is left to come back.
func (l *ledger) poison(err error) {
	l.mu.Lock()
	if l.poisoned == nil {
		l.poisoned = err
	}
	l.mu.Unlock()
	l.failed(l.ingested())
	l.leaveHeld()
}

// holdLocked keeps done in held while the run is not confirmed, and returns
// what may be acked now.
func (l *ledger) holdLocked(done []*heldMsg) []*heldMsg {
	if l.confirmed || len(done) == 0 {
		return done
	}
	l.held = append(l.held, done...)
	return nil
}

// takeHeldLocked empties held and returns what it held, the dead-lettered
// copies included.
func (l *ledger) takeHeldLocked() []*heldMsg {
	held := l.held
	l.held = nil
	for _, m := range held {
		m.gone = true
	}
	return held
}

// leaveHeld leaves the held messages to come back (the run is poisoned).
func (l *ledger) leaveHeld() {
	l.mu.Lock()
	held := l.takeHeldLocked()
	acker := l.acker
	l.mu.Unlock()
	if acker != nil {
		for _, m := range held {
			acker.Leave(m.h)
		}
	}
}

// confirm records that the rule's stored definition, read again after the
// run started, is the one checked, and acks what the run held until then.
// It returns how many messages it acked (dead-lettered copies are left, as
// settle does). A poisoned run confirms nothing: it returns the poison.
func (l *ledger) confirm(ctx context.Context) (int, error) {
	l.mu.Lock()
	if err := l.poisoned; err != nil {
		l.mu.Unlock()
		l.leaveHeld()
		return 0, err
	}
	l.confirmed = true
	done := l.held
	l.held = nil
	acker := l.acker
	l.mu.Unlock()
	if acker == nil || len(done) == 0 {
		return 0, nil
	}
	n := 0
	for _, m := range done {
		if !m.dead {
			n++
		}
	}
	return n, settle(ctx, acker, done)
}

// pending is how many messages wait to be settled (tests, status).
func (l *ledger) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[*heldMsg]bool{}
	for _, r := range l.rows {
		seen[r.msg] = true
	}
	return len(seen)
}

// hasSource reports whether a rocketmq source in ack-mode sink feeds the run.
func (l *ledger) hasSource() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.source != nil
}

// base is the seq before the run's first row.
func (l *ledger) base() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// ingested is the seq of the run's last ingested row.
func (l *ledger) ingested() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// settleIdle acks every message whose rows are all at or below seq: the
// rule's metrics showed every row up to seq left the rule (delivered, failed
// or dropped) while nothing else was ingested (idle.go).
func (l *ledger) settleIdle(ctx context.Context, seq int64) (int, error) {
	l.mu.Lock()
	if err := l.poisoned; err != nil {
		l.mu.Unlock()
		l.failed(seq)
		l.leaveHeld()
		return 0, err
	}
	done := l.holdLocked(l.takeLocked(func(r pendingRow) bool { return r.seq <= seq }))
	acker := l.acker
	l.mu.Unlock()
	if acker == nil || len(done) == 0 {
		return 0, nil
	}
	return len(done), settle(ctx, acker, done)
}

// settle acks the messages done, but leaves the dead-lettered copies (an
// ack cannot remove them; they come back after their invisibility).
func settle(ctx context.Context, acker ackerLike, done []*heldMsg) error {
	var hs []rmqflow.ReceiptHandle
	var ids []string
	for _, m := range done {
		if m.dead {
			acker.Leave(m.h)
			continue
		}
		hs = append(hs, m.h)
		ids = append(ids, m.id)
	}
	if len(hs) == 0 {
		return nil
	}
	var errs []error
	for i, err := range acker.ackAll(ctx, hs) {
		if err != nil {
			errs = append(errs, fmt.Errorf("ack of %s: %w", ids[i], err))
		}
	}
	return errors.Join(errs...)
}
