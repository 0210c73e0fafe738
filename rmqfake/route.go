package rmqfake

import (
	"context"
	"net"
	"slices"
	"strconv"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// brokerName is the one broker rmqfake pretends to be.
const brokerName = "rmqfake"

// route answers QueryRoute: one READ_WRITE queue per topic queue, all on this
// server. The endpoints are the ones the client asked through, as the proxy
// answers in cluster mode.
func (b *broker) route(req *v2.QueryRouteRequest, ns, self string) *v2.QueryRouteResponse {
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return &v2.QueryRouteResponse{Status: f.status()}
	}
	k := key(req.GetTopic(), ns)
	var t *topic
	var n int
	var typ TopicType
	var full string
	b.locked(func() {
		t = b.topics[k]
		if t == nil {
			t = b.autoTopic(k, TopicNormal)
		}
		if t != nil {
			n, typ = len(t.queues), t.typ
		} else {
			full = b.autoTopicsFull()
		}
	})
	if t == nil {
		return &v2.QueryRouteResponse{Status: fail(v2.Code_TOPIC_NOT_FOUND, "No topic route info in name server for the topic: %s%s", k.name, full).status()}
	}
	eps := req.GetEndpoints()
	if len(eps.GetAddresses()) == 0 {
		eps = endpointsOf(self)
	}
	resp := &v2.QueryRouteResponse{Status: okStatus()}
	for i := 0; i < n; i++ {
		resp.MessageQueues = append(resp.MessageQueues, &v2.MessageQueue{
			Topic:              k.proto(),
			Id:                 int32(i),
			Permission:         v2.Permission_READ_WRITE,
			Broker:             &v2.Broker{Name: brokerName, Id: 0, Endpoints: eps},
			AcceptMessageTypes: []v2.MessageType{typ.proto()},
		})
	}
	return resp
}

func endpointsOf(addr string) *v2.Endpoints {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: host, Port: int32(p)}}}
}

// SyncLiteSubscription manages a client's lite subscription. It needs no
// session. A wildcard group binds with COMPLETE_ADD (any set); PARTIAL_ADD is
// refused for it, as on 5.5.0. Exact groups add and remove lite topics, with
// an optional starting offset.
func (x *service) SyncLiteSubscription(ctx context.Context, req *v2.SyncLiteSubscriptionRequest) (*v2.SyncLiteSubscriptionResponse, error) {
	m := metaOf(ctx)
	f := x.s.b.syncLite(m, req)
	if f != nil {
		return &v2.SyncLiteSubscriptionResponse{Status: f.status()}, nil
	}
	return &v2.SyncLiteSubscriptionResponse{Status: okStatus()}, nil
}

func (b *broker) syncLite(m callMeta, req *v2.SyncLiteSubscriptionRequest) *failure {
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return f
	}
	if f := checkGroup(req.GetGroup().GetName()); f != nil {
		return f
	}
	action := req.GetAction()
	if action == v2.LiteSubscriptionAction_PARTIAL_ADD {
		for _, lt := range req.GetLiteTopicSet() {
			if f := checkLiteTopic(lt); f != nil {
				return f
			}
		}
	}
	gk, tk := key(req.GetGroup(), m.ns), key(req.GetTopic(), m.ns)
	var notices []notice
	b.mu.Lock()
	defer func() {
		b.mu.Unlock()
		sendNotices(notices) // a stream send must not hold b.mu
	}()
	g := b.groups[gk]
	if g == nil {
		return fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "group not found: %s", gk.name)
	}
	if g.bind != tk.name {
		bind := g.bind
		if bind == "" {
			bind = "null"
		}
		return fail(v2.Code_ILLEGAL_TOPIC, "lite group %s is expected to bind topic %s, but actual is %s", gk.name, bind, tk.name)
	}
	if n := len(req.GetLiteTopicSet()); n > liteSubQuota+300 {
		return fail(v2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED, "lite subscription quota exceeded: %d", liteSubQuota)
	}
	t := b.topics[tk]
	if t == nil {
		t = b.autoTopic(tk, TopicLite)
	}
	if t == nil || t.lite == nil {
		return fail(v2.Code_TOPIC_NOT_FOUND, "No topic route info in name server for the topic: %s%s", tk.name, b.autoTopicsFull())
	}
	// The broker checks its quota before the group's kind.
	if f := b.admitLiteSub(m.clientID, g, action, req.GetLiteTopicSet()); f != nil {
		return f
	}
	if action == v2.LiteSubscriptionAction_PARTIAL_ADD && g.wildcard {
		return fail(v2.Code_INTERNAL_SERVER_ERROR, "subscribe lite operation is not supported for this group")
	}
	sub := b.liteSubs[m.clientID]
	if action != v2.LiteSubscriptionAction_COMPLETE_REMOVE && (sub == nil || sub.group != g || sub.main != t) {
		sub = &liteSub{group: g, main: t, set: map[string]struct{}{}}
		b.setLiteSub(m.clientID, sub)
	}
	if sub != nil {
		b.touchLite(m.clientID, sub)
	}
	switch action {
	case v2.LiteSubscriptionAction_PARTIAL_ADD:
		for _, lt := range req.GetLiteTopicSet() {
			if g.exclusive {
				notices = append(notices, b.takeOver(m.clientID, g, t, lt)...)
			}
			sub.add(lt)
			b.wantLite(t, g, lt)
			// A lite topic that does not exist yet is not created (the
			// broker skips LMQs that are not active): it gets the exact
			// subscriber's position when its first message comes.
			lq := b.liteQueue(t, lt, false)
			if lq == nil {
				continue
			}
			c := b.cursor(lq, g)
			if oo := req.GetOffsetOption(); oo != nil {
				b.resetOffset(c, oo)
			}
			b.trimLite(lq) // what no group reads any more is freed
		}
	case v2.LiteSubscriptionAction_PARTIAL_REMOVE:
		for _, lt := range req.GetLiteTopicSet() {
			sub.remove(lt)
		}
	case v2.LiteSubscriptionAction_COMPLETE_ADD:
		sub.names, sub.set = nil, map[string]struct{}{}
		if g.wildcard {
			b.markWildcard(sub)
		} else {
			for _, lt := range req.GetLiteTopicSet() {
				sub.add(lt)
				b.wantLite(t, g, lt)
			}
		}
	case v2.LiteSubscriptionAction_COMPLETE_REMOVE:
		b.dropLiteSub(m.clientID)
	}
	b.wake(t)
	return nil
}

// notice is a NotifyUnsubscribeLite for one client's Telemetry stream.
type notice struct {
	push func(*v2.TelemetryCommand) error
	lite string
}

// takeOver takes lite topic lt of main topic t from every client of the
// exclusive group g that holds it, for clientID, and returns the notices to
// send (excludeClientByLmqName): every holder of g is told, the caller too
// when it already held lt (5.5.0 filters on the group alone; the caller keeps
// lt). With lite.sub.reset.offset.exclusive the group's offset of lt goes back
// to its first stored message. Call it with b.mu held.
func (b *broker) takeOver(clientID string, g *group, t *topic, lt string) []notice {
	var out []notice
	taken := false
	for id, sub := range b.liteSubs {
		if sub.group != g || sub.main != t {
			continue
		}
		if _, ok := sub.set[lt]; !ok {
			continue
		}
		taken = true
		if id != clientID {
			sub.remove(lt)
		}
		// The proxy finds the client by group and id and writes to its open
		// Telemetry stream; a client without one is not told.
		if sess := b.sessions[id]; sess != nil && sess.push != nil && sess.group == g.key {
			out = append(out, notice{push: sess.push, lite: lt})
		}
	}
	if taken && g.resetExclusive {
		if lq := b.liteQueue(t, lt, false); lq != nil {
			b.resetOffset(b.cursor(lq, g), &v2.OffsetOption{OffsetType: &v2.OffsetOption_Policy_{Policy: v2.OffsetOption_MIN}})
		}
	}
	return out
}

// sendNotices sends each notice on its stream, in order, from a goroutine of
// its own (a slow client must not hold the caller).
func sendNotices(ns []notice) {
	if len(ns) == 0 {
		return
	}
	go func() {
		for _, n := range ns {
			_ = n.push(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_NotifyUnsubscribeLiteCommand{
				NotifyUnsubscribeLiteCommand: &v2.NotifyUnsubscribeLiteCommand{LiteTopic: n.lite}}})
		}
	}()
}

// wantLite records that exact group g subscribed lite topic lt of main topic
// t (topic.liteWanted). Call it with b.mu held.
func (b *broker) wantLite(t *topic, g *group, lt string) {
	if slices.Contains(t.liteWanted[lt], g) {
		return
	}
	if t.liteWanted == nil {
		t.liteWanted = map[string][]*group{}
	}
	t.liteWanted[lt] = append(t.liteWanted[lt], g)
}

func (s *liteSub) add(name string) {
	if _, ok := s.set[name]; ok {
		return
	}
	s.set[name] = struct{}{}
	s.names = append(s.names, name)
}

func (s *liteSub) remove(name string) {
	if _, ok := s.set[name]; !ok {
		return
	}
	delete(s.set, name)
	for i, n := range s.names {
		if n == name {
			s.names = append(s.names[:i], s.names[i+1:]...)
			break
		}
	}
}

// resetOffset moves c as an OffsetOption asks (LiteSubscriptionRegistryImpl
// resetOffset): MIN is the oldest retained message, MAX the end, TAIL_N
// counts back from the committed offset; TIMESTAMP is ignored, as on 5.5.0.
func (b *broker) resetOffset(c *liteCursor, oo *v2.OffsetOption) {
	q := &c.lq.q
	target := int64(-1)
	switch x := oo.GetOffsetType().(type) {
	case *v2.OffsetOption_Policy_:
		switch x.Policy {
		case v2.OffsetOption_MIN:
			target = 0
		case v2.OffsetOption_MAX:
			target = q.end()
		}
	case *v2.OffsetOption_Offset:
		target = x.Offset
	case *v2.OffsetOption_TailN:
		target = max(0, c.ord.committed-x.TailN)
	}
	if target < 0 {
		return
	}
	target = min(max(target, q.base), q.end())
	if target == c.ord.committed {
		return
	}
	b.stop(c.ord.timer)
	c.ord = ordered{committed: target}
	b.liteReady(c)
}
