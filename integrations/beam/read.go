package rmqio

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// Read reads messages as described by cfg: an unbounded PCollection of
// AckableMessage with the store time as event time. It never acks: pass the
// messages (or what the pipeline made of them, with their handles) to Ack
// where the work is done.
func Read(s beam.Scope, cfg ReadConfig) beam.PCollection {
	s = s.Scope("rmqio.Read")
	if err := cfg.validate(); err != nil {
		panic(err) // a pipeline-construction error, as Beam's IOs report them
	}
	imp := beam.Impulse(s)
	return beam.ParDo(s, &readFn{Cfg: cfg.withDefaults()}, imp)
}

// readRestriction is a reader's place: which shard, and how many times it
// has checkpointed (a Pop consumer has no offset to resume from; the shared
// source is where the reading resumes). Done marks a read that ended.
type readRestriction struct {
	Shard int
	Epoch int64
	Done  bool
}

// stopClaim, claimed, ends the restriction: the read is over.
type stopClaim struct{}

// readTracker is the restriction tracker of Read: it claims every message
// until the read stops, checkpoints by handing the whole remaining read to a
// residual, and refuses every other split (a Pop read cannot be divided).
type readTracker struct {
	rest    readRestriction
	claimed int64
	done    bool
	err     error
}

func (t *readTracker) TryClaim(pos any) bool {
	if t.done {
		return false
	}
	if _, ok := pos.(stopClaim); ok {
		t.done = true
		t.rest.Done = true
		return false
	}
	t.claimed++
	return true
}

func (t *readTracker) GetError() error { return t.err }

// TrySplit(0) is a self-checkpoint: the primary is what was read (done), the
// residual the rest of the read, one epoch later. A split at any other
// fraction (a runner balancing work) is refused.
func (t *readTracker) TrySplit(fraction float64) (primary, residual any, err error) {
	if fraction != 0 || t.done {
		return t.rest, nil, nil
	}
	t.done = true
	done, rest := t.rest, t.rest
	done.Done = true // what was read is all the primary holds
	rest.Epoch++
	return done, rest, nil
}

func (t *readTracker) GetProgress() (done, remaining float64) { return float64(t.claimed), 1 }
func (t *readTracker) IsDone() bool                           { return t.done }
func (t *readTracker) GetRestriction() any                    { return t.rest }
func (t *readTracker) IsBounded() bool                        { return false }

// lagEstimator is Read's watermark: wall time minus the configured lag.
type lagEstimator struct{ lag time.Duration }

func (e *lagEstimator) CurrentWatermark() time.Time { return time.Now().Add(-e.lag) }

// Read's Beam metrics (namespace rmqio).
var (
	messagesRead    = beam.NewCounter("rmqio", "messages_read")
	readCheckpoints = beam.NewCounter("rmqio", "read_checkpoints")
	deadLettered    = beam.NewCounter("rmqio", "messages_dead_lettered")
)

// readFn is Read's splittable DoFn.
type readFn struct {
	Cfg ReadConfig
}

func (fn *readFn) CreateInitialRestriction(_ []byte) readRestriction { return readRestriction{} }

func (fn *readFn) SplitRestriction(_ []byte, r readRestriction) []readRestriction {
	if r.Epoch != 0 || r.Done {
		return []readRestriction{r}
	}
	out := make([]readRestriction, fn.Cfg.Shards)
	for i := range out {
		out[i] = readRestriction{Shard: i}
	}
	return out
}

func (fn *readFn) RestrictionSize(_ []byte, r readRestriction) float64 {
	if r.Done {
		return 0
	}
	return 1
}

func (fn *readFn) CreateTracker(r readRestriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(&readTracker{rest: r, done: r.Done})
}

// TruncateRestriction on drain: the read ends, and its source on this
// worker closes, giving back what it fetched and had not emitted (nothing
// unread is lost: the broker keeps it for the group).
func (fn *readFn) TruncateRestriction(rt *sdf.LockRTracker, _ []byte) readRestriction {
	r := rt.GetRestriction().(readRestriction)
	retireKey(sourceKey(fn.Cfg, r.Shard))
	return readRestriction{Shard: r.Shard, Done: true}
}

func (fn *readFn) CreateWatermarkEstimator() *lagEstimator {
	return &lagEstimator{lag: fn.Cfg.WatermarkLag}
}

// ProcessElement reads up to MaxBundleMessages messages or for up to
// MaxBundleTime from the worker's shared source, emits each with its store
// time, and checkpoints: at once after a bundle that found messages, after
// IdleResume after one that found none.
func (fn *readFn) ProcessElement(ctx context.Context, _ *lagEstimator, rt *sdf.LockRTracker, _ []byte,
	emit func(beam.EventTime, AckableMessage)) (sdf.ProcessContinuation, error) {
	r := rt.GetRestriction().(readRestriction)
	if r.Done || rt.IsDone() {
		return sdf.StopProcessing(), nil
	}
	shared, err := acquireSource(ctx, fn.Cfg, r.Shard)
	if err != nil {
		return nil, err
	}
	// However the bundle ends, it lets go of the source: done (the source
	// stays for the next bundle, and closes after IdleClose without one), or
	// retire (closed now). Also when emit panics: it does when a stage fused
	// behind Read fails the bundle, and a source held for ever would keep
	// renewing what it fetched, never close, and block the bundle retrying.
	release := shared.done
	defer func() { release() }()
	if r.Epoch == 0 {
		// The read's first bundle: the worker's source may have served an
		// earlier read (a job before this one, within IdleClose), whose last
		// message is not this read's. StopAfterIdle counts from now.
		shared.lastMessage = time.Now()
	}
	// A bundle waits at most MaxBundleTime, also when it finds nothing, so
	// that the watermark moves on while the topic is quiet (windows close,
	// and their messages get acked, which lets their lite topics go on).
	deadline := time.Now().Add(fn.Cfg.MaxBundleTime)
	n := 0
	for n < fn.Cfg.MaxBundleMessages {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		nctx, cancel := context.WithTimeout(ctx, wait)
		m, err := shared.src.Next(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				messagesRead.Inc(ctx, int64(n))
				return nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				break // the bundle's window ended
			}
			// The source ended (an outage past MaxOutage, a permanent
			// error): a later bundle starts a new one.
			release = shared.retireLocked
			return nil, fmt.Errorf("rmqio: reading shard %d: %w", r.Shard, err)
		}
		el, err := fromRMQ(m)
		if err != nil {
			// Not representable (no handle to carry): it is left to come
			// back after its invisibility; the bundle goes on.
			log.Errorf(ctx, "rmqio: dropping message %s from this bundle: %v", m.Meta.MessageID, err)
			continue
		}
		if !rt.TryClaim(n) {
			// The runner ended the restriction under us: give the message
			// back at once rather than after its invisibility.
			if err := shared.src.Acker().Release(context.WithoutCancel(ctx), m.Handle); err != nil {
				log.Warnf(ctx, "rmqio: giving back message %s: %v", m.Meta.MessageID, err)
			}
			messagesRead.Inc(ctx, int64(n))
			return sdf.StopProcessing(), nil
		}
		if el.DeadLettered {
			deadLettered.Inc(ctx, 1)
		}
		emit(mtime.FromTime(el.StoreTime), el)
		n++
		shared.lastMessage = time.Now()
	}
	messagesRead.Inc(ctx, int64(n))
	if n == 0 && fn.Cfg.StopAfterIdle > 0 && time.Since(shared.lastMessage) >= fn.Cfg.StopAfterIdle {
		rt.TryClaim(stopClaim{})
		release = shared.retireLocked // the read is over
		return sdf.StopProcessing(), nil
	}
	readCheckpoints.Inc(ctx, 1)
	if n == 0 {
		return sdf.ResumeProcessingIn(fn.Cfg.IdleResume), nil
	}
	return sdf.ResumeProcessingIn(0), nil
}

func init() {
	beam.RegisterType(reflect.TypeOf((*readRestriction)(nil)).Elem())
	register.DoFn5x2[context.Context, *lagEstimator, *sdf.LockRTracker, []byte, func(beam.EventTime, AckableMessage), sdf.ProcessContinuation, error](&readFn{})
	register.Emitter2[beam.EventTime, AckableMessage]()
}
