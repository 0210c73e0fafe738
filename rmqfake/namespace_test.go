package rmqfake_test

import (
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Topics and groups of one namespace are invisible from another, and the
// same names can live in both.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		must(t, s.CreateTopic("orders", rmqfake.TopicNormal, rmqfake.InNamespace(ns)))
		must(t, s.CreateGroup("billing", rmqfake.InNamespace(ns)))
	}
	inNS := func(ns string) (*client.Client, *client.Client) {
		p := newClient(t, s, client.Config{Namespace: ns})
		_, err := p.OpenSession(ctxT(t), client.SessionConfig{Type: client.Producer})
		must(t, err)
		c := newClient(t, s, client.Config{Namespace: ns})
		_, err = c.OpenSession(ctxT(t), client.SessionConfig{Type: client.SimpleConsumer, Group: "billing", Subscriptions: []client.Subscription{{Topic: "orders"}}})
		must(t, err)
		return p, c
	}
	pa, ca := inNS("tenant-a")
	pb, cb := inNS("tenant-b")
	send(t, pa, &client.Message{Topic: "orders", Body: []byte("for a")})
	send(t, pb, &client.Message{Topic: "orders", Body: []byte("for b")})
	req := client.ReceiveRequest{Group: "billing", Topic: "orders", InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second}
	ma := receiveNow(t, ca, req)
	mb := receiveNow(t, cb, req)
	if len(ma) != 1 || string(ma[0].Body) != "for a" || len(mb) != 1 || string(mb[0].Body) != "for b" {
		t.Fatalf("tenant a got %v, tenant b got %v", bodies(ma), bodies(mb))
	}
	ackAll(t, ca, "billing", "orders", ma)
	ackAll(t, cb, "billing", "orders", mb)
	st := s.Stats()
	if st.Groups["tenant-a%billing"].Acked != 1 || st.Groups["tenant-b%billing"].Acked != 1 {
		t.Errorf("acks per namespace: %+v / %+v", st.Groups["tenant-a%billing"].Counts, st.Groups["tenant-b%billing"].Counts)
	}

	// The received message's topic names its namespace.
	raw := newClient(t, s, client.Config{Namespace: "tenant-a"})
	qs, err := raw.QueryRoute(ctxT(t), "orders")
	must(t, err)
	if qs[0].GetTopic().GetResourceNamespace() != "tenant-a" {
		t.Errorf("route topic %v, want namespace tenant-a", qs[0].GetTopic())
	}

	// Without the namespace the topic does not exist.
	plain := producer(t, s)
	if _, err := plain.Send(ctxT(t), &client.Message{Topic: "orders", Body: []byte("x")}); codeOf(err) != client.CodeMessagePropertyConflict {
		t.Errorf("send to orders outside any namespace: %v, want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (unknown topic)", err)
	}
	if _, err := plain.QueryRoute(ctxT(t), "orders"); codeOf(err) != client.CodeTopicNotFound {
		t.Errorf("route of orders outside any namespace: %v, want TOPIC_NOT_FOUND", err)
	}

	// A resource's own namespace wins over the header's.
	stub := v2.NewMessagingServiceClient(raw.Conn())
	resp, err := stub.QueryRoute(raw.OutgoingContext(ctxT(t)), &v2.QueryRouteRequest{Topic: &v2.Resource{ResourceNamespace: "tenant-b", Name: "orders"}})
	must(t, err)
	if resp.GetStatus().GetCode() != v2.Code_OK || resp.GetMessageQueues()[0].GetTopic().GetResourceNamespace() != "tenant-b" {
		t.Errorf("route with an explicit namespace: %v", resp.GetStatus())
	}
}
