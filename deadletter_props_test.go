package rmqflow_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestDeadLetterToSinkDropsSystemProperties: DeadLetterToSink does not copy
// the broker-reserved properties of the received message, such as a lite
// message's INNER_MULTI_DISPATCH. The broker acts on that property when a
// message carries it (client.IsSystemProperty; scenario g: it is why a DLQ
// copy is dispatched into its lite topic again), so a parked copy carrying
// it would go back into the original lite topic on the real broker: not
// parked at all. rmqfake does not act on it for a plain send, so this test
// checks the properties themselves.
func TestDeadLetterToSinkDropsSystemProperties(t *testing.T) {
	ctx := rmqtest.Context(t, time.Minute)
	rig := newParkRig(t, ctx, fakeLite(t))
	rig.write(t, ctx, "poison")
	parkedOnce := make(chan struct{})
	var once sync.Once
	r := rig.failingRunner(t, rmqflow.RunnerConfig{ErrorBackoff: 10 * time.Millisecond, ErrorValves: rmqflow.ThrottleConfig{MaxDefers: 1}},
		nil, func() { once.Do(func() { close(parkedOnce) }) })
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-parkedOnce:
	case <-ctx.Done():
		t.Fatal("never parked")
	}
	stop()
	must(t, <-ran)
	m := rig.readParked(t, ctx)
	for k, v := range m.Meta.Properties {
		if client.IsSystemProperty(k) {
			t.Errorf("the parked copy carries the broker-reserved property %s=%q", k, v)
		}
	}
}
