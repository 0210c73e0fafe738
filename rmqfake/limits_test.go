package rmqfake_test

import (
	"strings"
	"testing"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestQueueCountBound: a topic has at most MaxQueues queues, from
// CreateTopic and from fixtures alike. `queues=10000000` used to be accepted,
// and one QueryRoute of that topic built a 3.9 GB answer.
func TestQueueCountBound(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	must(t, s.CreateTopic("t-max-queues", rmqfake.TopicNormal, rmqfake.Queues(rmqfake.MaxQueues)))
	for _, n := range []int{rmqfake.MaxQueues + 1, 10000000} {
		err := s.CreateTopic("t-too-many", rmqfake.TopicNormal, rmqfake.Queues(n))
		if err == nil || !strings.Contains(err.Error(), "1024") {
			t.Errorf("CreateTopic with %d queues: %v, want an error naming the bound", n, err)
		}
	}
	if _, ok := s.Stats().Topics["t-too-many"]; ok {
		t.Error("the refused topic was created")
	}
	if _, err := rmqfake.ParseFixture("topic a normal queues=1024"); err != nil {
		t.Errorf("queues=1024: %v", err)
	}
	for _, line := range []string{"topic a normal queues=1025", "topic a normal queues=10000000", "topic a normal queues=99999999999999999999"} {
		if _, err := rmqfake.ParseFixture(line); err == nil || !strings.Contains(err.Error(), "1024") {
			t.Errorf("%q: %v, want an error naming the bound", line, err)
		}
	}
	if err := s.ApplyFixtures([]rmqfake.Fixture{{Name: "t-fx", Type: rmqfake.TopicNormal, Queues: 5000}}); err == nil {
		t.Error("ApplyFixtures with 5000 queues: no error")
	}
}
