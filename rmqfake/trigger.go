package rmqfake

import (
	"fmt"

	"github.com/rmqflow/rmqflow/brokeradmin"
)

// TriggerLiteDispatch runs the lite dispatch that the broker's admin request
// triggerLiteDispatch runs (remoting request 200079; rmqflow's
// brokeradmin.TriggerLiteDispatch sends it to a real broker), at once,
// outside the scan: without clientID, every lite topic of wildcard group
// group with a backlog is offered to the group's clients, until a client's
// event set refuses one (doFullDispatchByGroup); with clientID, only that
// client's own lite topics would be, and on RocketMQ 5.5.0 a client of a
// wildcard group has none of its own, so nothing is dispatched (as on the
// broker: conformance scenario aa). A pending scheduled full dispatch stays
// scheduled. With FastLiteDispatch every backlog is on offer already and it
// does nothing.
//
// It fails as the broker does, with a *brokeradmin.Error: code 26
// (brokeradmin.ErrGroupNotFound) for a group the server does not know, 29
// (brokeradmin.ErrNotLiteGroup) for a group without LiteBind. In AutoCreate
// mode an unknown group is created as a normal group first and so answers
// 29, as a broker with autoCreateSubscriptionGroup=true does. The only
// option that applies is InNamespace.
func (s *Server) TriggerLiteDispatch(group, clientID string, opts ...ResourceOption) error {
	var c groupConfig
	for _, o := range opts {
		if ns, ok := o.(nsOpt); ok {
			c.ns = string(ns)
		}
	}
	refuse := func(code brokeradmin.Code, format string) error {
		return &brokeradmin.Error{Request: "triggerLiteDispatch", Addr: "rmqfake", Code: code, Remark: fmt.Sprintf(format, group)}
	}
	k := resKey{ns: c.ns, name: group}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[k]
	if g == nil && b.auto && checkGroup(group) == nil && b.admitGroup() {
		g = b.newGroup(k, groupConfig{ns: c.ns, retryMax: defaultRetryMax})
	}
	switch {
	case g == nil:
		return refuse(brokeradmin.CodeGroupNotExist, "Group [%s] not exist.")
	case g.bind == "":
		return refuse(brokeradmin.CodeInvalidParameter, "Group [%s] is not a LITE group.")
	case clientID != "" || !g.wildcard || b.disp.fast:
		// A client's own lite topics, or an exact group's clients': rmqfake
		// offers an exact subscription's lite topics as they fill, without
		// event sets, so there is nothing waiting to dispatch.
		return nil
	}
	b.fullDispatch(g)
	return nil
}
