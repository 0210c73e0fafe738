package rmqbenthos

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
)

// TestInputGiveUpConfig: dead_letter maps to the Runner's choices (drop:
// ValveAck; topic: a sink; neither: the zero OnValve, the broker's DLQ),
// its fields that exclude each other fail the config naming them, and
// max_messages 0 is 2 in lite mode and rmqflow's default in simple mode.
func TestInputGiveUpConfig(t *testing.T) {
	const lite = "endpoints: 127.0.0.1:1\nlite:\n  - topic: t\n    group: g\n"
	parse := func(yaml string) (*input, error) {
		conf, err := inputSpec().ParseYAML(yaml, nil)
		if err != nil {
			return nil, err
		}
		in, err := newInput(conf, service.MockResources())
		if err != nil {
			return nil, err
		}
		return in.(*input), nil
	}
	for _, tc := range []struct{ yaml, want string }{
		{lite + "dead_letter:\n  topic: parked\n  drop: true\n", "dead_letter.drop and dead_letter.topic"},
		{lite + "dead_letter:\n  lite_topic: parked\n", "dead_letter.lite_topic needs dead_letter.topic"},
	} {
		if _, err := parse(tc.yaml); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %q", tc.yaml, err, tc.want)
		}
	}
	in, err := parse(lite)
	if err != nil {
		t.Fatal(err)
	}
	if in.runCfg.ErrorValves.OnValve != rmqflow.ValveDeadLetterQueue || in.deadLetter != nil || in.srcCfg.MaxMessageNum != defaultLiteMaxMessages {
		t.Errorf("defaults: OnValve %v, dead-letter sink %v, max_messages %d; want the broker's DLQ, none, %d",
			in.runCfg.ErrorValves.OnValve, in.deadLetter, in.srcCfg.MaxMessageNum, defaultLiteMaxMessages)
	}
	if in, err = parse(lite + "dead_letter:\n  drop: true\n"); err != nil {
		t.Fatal(err)
	}
	if in.runCfg.ErrorValves.OnValve != rmqflow.ValveAck || in.deadLetter != nil {
		t.Errorf("drop: OnValve %v, dead-letter sink %v; want ValveAck, none", in.runCfg.ErrorValves.OnValve, in.deadLetter)
	}
	if in, err = parse(lite + "dead_letter:\n  topic: parked\n  lite_topic: x\n"); err != nil {
		t.Fatal(err)
	}
	if d := in.deadLetter; d == nil || d.Topic != "parked" || d.LiteTopic != "x" || in.runCfg.ErrorValves.OnValve != rmqflow.ValveDeadLetterQueue {
		t.Errorf("topic: dead-letter sink %+v, OnValve %v; want parked/x", d, in.runCfg.ErrorValves.OnValve)
	}
	if in, err = parse("endpoints: 127.0.0.1:1\nmode: simple\ntopic: t\ngroup: g\n"); err != nil {
		t.Fatal(err)
	}
	if in.srcCfg.MaxMessageNum != 0 {
		t.Errorf("simple mode: max_messages %d; want 0 (rmqflow's default)", in.srcCfg.MaxMessageNum)
	}
}
