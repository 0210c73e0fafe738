package rmqfake_test

import (
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// TestFilterAnswersInBrokerOrder: an SQL92 expression the broker cannot
// compile is answered after the route check (an unknown topic is still
// TOPIC_NOT_FOUND) and is no error at all on a lite receive, whose pop has no
// filter (scenario q); tag filters are trimmed as Java's String.trim does
// (characters up to U+0020, not U+00A0).
func TestFilterAnswersInBrokerOrder(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	p := producer(t, s)
	c := normalConsumer(t, s)
	bad := client.Filter{Type: client.FilterSQL, Expression: "a = "}
	req := normalReq(10 * time.Second)
	req.Topic, req.Filter = "no-such-topic", bad
	if _, err := c.Receive(ctxT(t), req); codeOf(err) != client.CodeTopicNotFound {
		t.Errorf("bad SQL on an unknown topic: %v, want TOPIC_NOT_FOUND", err)
	}
	req.Topic = normalTopic
	if _, err := c.Receive(ctxT(t), req); codeOf(err) != client.CodeInternalServerError {
		t.Errorf("bad SQL on a normal topic: %v, want INTERNAL_SERVER_ERROR", err)
	}
	send(t, p, &client.Message{Topic: liteTopic, LiteTopic: "l1", Body: []byte("lite")})
	lc := liteConsumer(t, s)
	lreq := liteReq(10 * time.Second)
	lreq.Filter = bad
	if got := receiveNow(t, lc, lreq); len(got) != 1 {
		t.Errorf("bad SQL on a lite receive: %d messages, want the lite message", len(got))
	}
	for _, tc := range []struct {
		filter string
		want   int
	}{{"\x01blue", 1}, {"blue\u00a0", 0}} {
		send(t, p, &client.Message{Topic: normalTopic, Tag: "blue", Body: []byte(tc.filter)})
		r := normalReq(10 * time.Second)
		r.Filter = client.TagFilter(tc.filter)
		r.LongPollingTimeout = 5 * time.Second
		got, err := c.Receive(ctxT(t), r)
		if len(got) != tc.want {
			t.Errorf("tag filter %q on tag blue: %d messages (%v), want %d", tc.filter, len(got), err, tc.want)
		}
	}
}
