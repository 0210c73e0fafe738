package rmqfake

import (
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// assignment answers QueryAssignment, which push consumers call every 5 s
// per subscribed topic, as the 5.5.0 proxy does (RouteActivity): a FIFO
// group that is not a lite group gets one assignment per queue (ids 0..n-1);
// any other group, an unknown one included, gets one assignment with id -1,
// which lets its receives pop every queue. The message queue carries the
// request's topic as sent and the endpoints the client asked through, and
// no accepted message types; the answer is the same on every call, since the
// Go client keys its process queues by it.
func (b *broker) assignment(req *v2.QueryAssignmentRequest, ns, self string) *v2.QueryAssignmentResponse {
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return &v2.QueryAssignmentResponse{Status: f.status()}
	}
	if f := checkGroup(req.GetGroup().GetName()); f != nil {
		return &v2.QueryAssignmentResponse{Status: f.status()}
	}
	tk, gk := key(req.GetTopic(), ns), key(req.GetGroup(), ns)
	var queues int
	var found, fifo bool
	b.locked(func() {
		t := b.topics[tk]
		if t == nil {
			t = b.autoTopic(tk, TopicNormal) // nil without AutoCreate or past MaxAutoTopics
		}
		if t == nil {
			return
		}
		found, queues = true, len(t.queues)
		if g := b.groups[gk]; g != nil {
			fifo = g.fifo && g.bind == ""
		}
	})
	if !found {
		return &v2.QueryAssignmentResponse{Status: fail(v2.Code_TOPIC_NOT_FOUND, "No topic route info in name server for the topic: %s", tk.name).status()}
	}
	eps := req.GetEndpoints()
	if len(eps.GetAddresses()) == 0 {
		eps = endpointsOf(self)
	}
	mq := func(id int32) *v2.Assignment {
		return &v2.Assignment{MessageQueue: &v2.MessageQueue{
			Topic:      &v2.Resource{Name: req.GetTopic().GetName(), ResourceNamespace: req.GetTopic().GetResourceNamespace()},
			Id:         id,
			Permission: v2.Permission_READ_WRITE,
			Broker:     &v2.Broker{Name: brokerName, Id: 0, Endpoints: eps},
		}}
	}
	resp := &v2.QueryAssignmentResponse{Status: okStatus()}
	if !fifo {
		resp.Assignments = []*v2.Assignment{mq(-1)}
		return resp
	}
	for i := range queues {
		resp.Assignments = append(resp.Assignments, mq(int32(i)))
	}
	return resp
}
