package rmqfake_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
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

// storeFull asserts that err is the broker's answer for a store that refuses
// a message: the proxy maps the broker's SERVICE_NOT_AVAILABLE to
// INTERNAL_SERVER_ERROR with the broker's remark.
func storeFull(t *testing.T, what string, err error) {
	t.Helper()
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != client.CodeInternalServerError || !strings.Contains(se.Message, "the broker's disk is full") {
		t.Errorf("%s: %v, want INTERNAL_SERVER_ERROR \"service not available now ... the broker's disk is full ...\"", what, err)
	}
}

// TestMaxStoredBytes: past MaxStoredBytes a send is refused whole, with the
// broker's answer for a full store; nothing of a refused batch is stored,
// and acked messages make room again. Without the limit, 480 MiB sent into a
// topic nobody consumed were all kept.
func TestMaxStoredBytes(t *testing.T) {
	t.Parallel()
	body := make([]byte, 1000)
	// Room for three 1000-byte messages (with their ids and overhead), not four.
	limit := int64(3 * (len(body) + rmqfake.MessageOverhead + 100))
	s, clk := start(t, rmqfake.MaxStoredBytes(limit))
	must(t, s.CreateTopic("t-delay", rmqfake.TopicDelay))
	p := producer(t, s)
	for i := 0; i < 3; i++ {
		send(t, p, &client.Message{Topic: normalTopic, Body: body})
	}
	st := s.Stats()
	if st.StoredBytes < int64(3*(len(body)+rmqfake.MessageOverhead)) || st.StoredBytes > limit {
		t.Errorf("StoredBytes %d with three 1000-byte messages (limit %d)", st.StoredBytes, limit)
	}
	_, err := p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a fourth message", err)
	// A batch is stored whole or not at all.
	_, err = p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: []byte("a")}, &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a batch past the limit", err)
	// Delayed and lite messages count too.
	_, err = p.Send(ctxT(t), &client.Message{Topic: "t-delay", DeliveryTime: clk.Now().Add(time.Hour), Body: body})
	storeFull(t, "a delayed message", err)
	_, err = p.Send(ctxT(t), &client.Message{Topic: liteTopic, LiteTopic: "full", Body: body})
	storeFull(t, "a lite message", err)
	if st := s.Stats(); st.Topics[normalTopic].Stored != 3 || st.Topics["t-delay"].Stored != 0 || st.Topics[liteTopic].Stored != 0 {
		t.Fatalf("after the refused sends: stored %d normal, %d delayed, %d lite; want 3, 0, 0",
			st.Topics[normalTopic].Stored, st.Topics["t-delay"].Stored, st.Topics[liteTopic].Stored)
	}

	// Acking frees room.
	c := normalConsumer(t, s)
	ackAll(t, c, normalGroup, normalTopic, receiveNow(t, c, normalReq(time.Minute)))
	if st := s.Stats(); st.Topics[normalTopic].Stored != 0 || st.StoredBytes != 0 {
		t.Fatalf("after acking everything: stored %d, %d bytes", st.Topics[normalTopic].Stored, st.StoredBytes)
	}
	send(t, p, &client.Message{Topic: "t-delay", DeliveryTime: clk.Now().Add(time.Hour), Body: body})
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "full", Body: body})
	send(t, p, &client.Message{Topic: normalTopic, Body: body})
	_, err = p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a fourth message again", err)
	// A delayed message that falls due stays counted, once.
	clk.Advance(time.Hour)
	if st := s.Stats(); st.Topics["t-delay"].Stored != 1 || st.Topics["t-delay"].Scheduled != 0 || st.StoredBytes > limit {
		t.Errorf("after the delay: %+v, %d bytes", st.Topics["t-delay"], st.StoredBytes)
	}
	_, err = p.Send(ctxT(t), &client.Message{Topic: normalTopic, Body: body})
	storeFull(t, "a fourth message after the delay", err)

	// Without the option the default is 1 GiB; a negative limit turns it off.
	if rmqfake.DefaultMaxStoredBytes != 1<<30 {
		t.Errorf("DefaultMaxStoredBytes %d", rmqfake.DefaultMaxStoredBytes)
	}
	u, _ := start(t, rmqfake.MaxStoredBytes(-1))
	up := producer(t, u)
	for i := 0; i < 5; i++ {
		send(t, up, &client.Message{Topic: normalTopic, Body: body})
	}
}
