package rmqfake_test

import (
	"errors"
	"testing"

	"github.com/rmqflow/rmqflow/brokeradmin"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The refusals of TriggerLiteDispatch follow the broker's: an unknown group
// (26), a group without LiteBind (29); in AutoCreate mode the unknown group
// is created as a normal group first (autoCreateSubscriptionGroup=true), so
// 29. The dispatch itself is scenario aa of the conformance suite.
func TestTriggerLiteDispatchRefusals(t *testing.T) {
	s := rmqfake.NewForTest(t)
	if err := s.CreateTopic("main", rmqfake.TopicLite); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("lite-g", rmqfake.LiteBind("main"), rmqfake.Wildcard()); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("ns-g", rmqfake.LiteBind("main"), rmqfake.Wildcard(), rmqfake.InNamespace("ns1")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup("plain-g"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		group, client string
		opts          []rmqfake.ResourceOption
		want          error
	}{
		{"lite-g", "", nil, nil},
		{"lite-g", "some-client", nil, nil},
		{"ns-g", "", []rmqfake.ResourceOption{rmqfake.InNamespace("ns1")}, nil},
		{"ns-g", "", nil, brokeradmin.ErrGroupNotFound},
		{"nope", "", nil, brokeradmin.ErrGroupNotFound},
		{"plain-g", "", nil, brokeradmin.ErrNotLiteGroup},
	} {
		err := s.TriggerLiteDispatch(c.group, c.client, c.opts...)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s %q: %v, want %v", c.group, c.client, err, c.want)
		}
	}
	var e *brokeradmin.Error
	if err := s.TriggerLiteDispatch("nope", ""); !errors.As(err, &e) || e.Remark != "Group [nope] not exist." {
		t.Errorf("remark: %v, want the broker's", err)
	}

	auto := rmqfake.NewForTest(t, rmqfake.AutoCreate())
	if err := auto.TriggerLiteDispatch("made-now", ""); !errors.Is(err, brokeradmin.ErrNotLiteGroup) {
		t.Errorf("AutoCreate: %v, want 29 (created as a normal group)", err)
	}
	fast := rmqfake.NewForTest(t, rmqfake.FastLiteDispatch())
	_ = fast.CreateTopic("main", rmqfake.TopicLite)
	_ = fast.CreateGroup("lite-g", rmqfake.LiteBind("main"), rmqfake.Wildcard())
	if err := fast.TriggerLiteDispatch("lite-g", ""); err != nil {
		t.Errorf("FastLiteDispatch: %v", err)
	}
}
