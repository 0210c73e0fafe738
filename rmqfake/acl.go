package rmqfake

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
)

// ACL 2.0 as the 5.5.0 proxy checks it for gRPC clients when both
// authenticationEnabled and authorizationEnabled are on
// (notes/research/auth-acl.md): users are Super (never checked) or Normal;
// a Normal user may do what its ACL entries allow. Every refusal is
// UNAUTHORIZED "User:<u> has no permission to access <resource> from <ip>,
// <why>".

// UserOption configures a User.
type UserOption func(*userConfig)

type userConfig struct {
	secret   string
	super    bool
	disabled bool
}

// SuperUser makes a user a super user: no ACL applies to it.
func SuperUser() UserOption { return func(c *userConfig) { c.super = true } }

// DisabledUser makes a user disabled: its requests are refused with "User:<u>
// is disabled.".
func DisabledUser() UserOption { return func(c *userConfig) { c.disabled = true } }

// User adds a user that signs with secret (a Normal user unless SuperUser),
// and turns on authorization: a Normal user may do only what its ACL entries
// (WithACL) allow. Credentials(ak, sk) is a super user.
func User(name, secret string, opts ...UserOption) Option {
	return func(c *config) {
		u := userConfig{secret: secret}
		for _, o := range opts {
			o(&u)
		}
		if c.users == nil {
			c.users = map[string]userConfig{}
		}
		c.users[name] = u
	}
}

// ACLEntry is one entry of a user's ACL (mqadmin createAcl -s User:<User>
// -r <Resource> -a <Actions> -d Allow|Deny -i <SourceIPs>).
type ACLEntry struct {
	// User is the user's name.
	User string
	// Resource is "Topic:<name>", "Group:<name>", "Topic:*", a prefix such
	// as "Topic:orders-*", or "*" (anything). Lite topics are never
	// resources: a lite message's resource is its main topic.
	Resource string
	// Actions are "Pub", "Sub", "Get", "List", "Create", "Update", "Delete"
	// or "All" (case does not matter).
	Actions []string
	// Deny makes the entry deny; the default allows.
	Deny bool
	// SourceIPs, when set, limit the entry to these addresses or CIDR
	// ranges of the client.
	SourceIPs []string
}

// WithACL adds ACL entries. A user has one entry per resource: a later
// entry for the same user and resource replaces the earlier one (its actions,
// addresses and decision), as mqadmin createAcl does on 5.5.0 (conformance
// scenario t's users.txt relies on it).
func WithACL(entries ...ACLEntry) Option {
	return func(c *config) { c.acl = append(c.acl, entries...) }
}

// aclRule is an ACLEntry, parsed.
type aclRule struct {
	user    string
	typ     string // "Topic", "Group", or "" for any type
	name    string // literal name or prefix
	prefix  bool   // name is a prefix ("Topic:x-*")
	anyName bool   // "Topic:*" or "*"
	actions map[string]bool
	deny    bool
	ips     []netip.Prefix
}

func parseACL(entries []ACLEntry) ([]aclRule, error) {
	var out []aclRule
	at := map[[2]string]int{} // user and resource -> index in out
	for _, e := range entries {
		r := aclRule{user: e.User, deny: e.Deny, actions: map[string]bool{}}
		switch {
		case e.Resource == "*":
			r.anyName = true
		default:
			typ, name, ok := strings.Cut(e.Resource, ":")
			if !ok || (typ != "Topic" && typ != "Group") || name == "" {
				return nil, fmt.Errorf("rmqfake: ACL resource %q: want Topic:<name>, Group:<name>, a trailing * or *", e.Resource)
			}
			r.typ = typ
			switch {
			case name == "*":
				r.anyName = true
			case strings.HasSuffix(name, "*"):
				r.prefix, r.name = true, strings.TrimSuffix(name, "*")
			default:
				r.name = name
			}
		}
		for _, a := range e.Actions {
			a = strings.ToLower(a)
			switch a {
			case "all", "pub", "sub", "get", "list", "create", "update", "delete":
				r.actions[a] = true
			default:
				return nil, fmt.Errorf("rmqfake: ACL action %q", a)
			}
		}
		for _, ip := range e.SourceIPs {
			p, err := netip.ParsePrefix(ip)
			if err != nil {
				a, aerr := netip.ParseAddr(ip)
				if aerr != nil {
					return nil, fmt.Errorf("rmqfake: ACL source IP %q: %w", ip, err)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			r.ips = append(r.ips, p)
		}
		key := [2]string{e.User, e.Resource}
		if i, ok := at[key]; ok {
			out[i] = r
			continue
		}
		at[key] = len(out)
		out = append(out, r)
	}
	return out, nil
}

// rank orders how specifically r names a resource: literal, then prefix
// (longer first), then any name of a type, then anything. Two matching
// entries of one user rank the same only if they name the same resource,
// which parseACL prevents; were they to, Deny would win, as in the proxy.
func (r aclRule) rank() int {
	switch {
	case r.anyName && r.typ == "":
		return 0
	case r.anyName:
		return 1
	case r.prefix:
		return 2 + len(r.name)
	default:
		return 1 << 20
	}
}

func (r aclRule) matches(typ, name string, actions []string, ip netip.Addr) bool {
	if r.typ != "" && r.typ != typ {
		return false
	}
	switch {
	case r.anyName:
	case r.prefix:
		if !strings.HasPrefix(name, r.name) {
			return false
		}
	default:
		if r.name != name {
			return false
		}
	}
	act := r.actions["all"]
	for _, a := range actions {
		act = act || r.actions[strings.ToLower(a)]
	}
	if !act {
		return false
	}
	if len(r.ips) == 0 {
		return true
	}
	for _, p := range r.ips {
		if ip.IsValid() && p.Contains(ip) {
			return true
		}
	}
	return false
}

// check is one authorization check: actions on a resource, any of them
// sufficing.
type check struct {
	typ, name string
	actions   []string
}

// allowed decides one check for user from ip.
func (a *authenticator) allowed(user string, ip netip.Addr, ipText string, c check) *failure {
	var best *aclRule
	for i := range a.acl {
		r := &a.acl[i]
		if r.user != user || !r.matches(c.typ, c.name, c.actions, ip) {
			continue
		}
		if best == nil || r.rank() > best.rank() || (r.rank() == best.rank() && r.deny && !best.deny) {
			best = r
		}
	}
	why := ""
	switch {
	case best == nil:
		why = "no matched policies."
	case best.deny:
		why = "the decision is deny."
	default:
		return nil
	}
	return fail(v2.Code_UNAUTHORIZED, "User:%s has no permission to access %s:%s from %s, %s", user, c.typ, c.name, ipText, why)
}

// authorize runs the checks the 5.5.0 proxy makes for req (a request, or a
// Telemetry command) of an authenticated Normal user.
func (a *authenticator) authorize(ctx context.Context, user string, req proto.Message) *failure {
	if a == nil || !a.authz {
		return nil
	}
	if u := a.users[user]; u == nil || u.super {
		return nil
	}
	checks, f := checksOf(req)
	if f != nil {
		return f
	}
	ipText := ""
	if addr := peerOf(ctx); addr != "" {
		ipText = addr
		if host, _, err := net.SplitHostPort(addr); err == nil {
			ipText = host
		}
	}
	ip, _ := netip.ParseAddr(ipText)
	for _, c := range checks {
		if f := a.allowed(user, ip, ipText, c); f != nil {
			return f
		}
	}
	return nil
}

func topicCheck(name string, actions ...string) check {
	return check{typ: "Topic", name: name, actions: actions}
}

func groupCheck(name string) check { return check{typ: "Group", name: name, actions: []string{"Sub"}} }

// checksOf lists what req needs, in the proxy's order
// (DefaultAuthorizationContextBuilder), or the proxy's error for a request
// that names no resource it must check.
func checksOf(req proto.Message) ([]check, *failure) {
	topicNull := fail(v2.Code_UNAUTHORIZED, "topic is null.")
	groupNull := fail(v2.Code_UNAUTHORIZED, "group is null.")
	withGroupTopic := func(group, topic string) ([]check, *failure) {
		if strings.TrimSpace(group) == "" {
			return nil, groupNull
		}
		if strings.TrimSpace(topic) == "" {
			return nil, topicNull
		}
		return []check{groupCheck(group), topicCheck(topic, "Sub")}, nil
	}
	pub := func(topic string) ([]check, *failure) {
		if strings.TrimSpace(topic) == "" {
			return nil, topicNull
		}
		return []check{topicCheck(topic, "Pub")}, nil
	}
	switch r := req.(type) {
	case *v2.SendMessageRequest:
		if len(r.GetMessages()) == 0 {
			return nil, fail(v2.Code_UNAUTHORIZED, "message is null.")
		}
		return pub(r.GetMessages()[0].GetTopic().GetName())
	case *v2.RecallMessageRequest:
		return pub(r.GetTopic().GetName())
	case *v2.EndTransactionRequest:
		return pub(r.GetTopic().GetName())
	case *v2.QueryRouteRequest:
		if strings.TrimSpace(r.GetTopic().GetName()) == "" {
			return nil, topicNull
		}
		return []check{topicCheck(r.GetTopic().GetName(), "Pub", "Sub")}, nil
	case *v2.HeartbeatRequest:
		switch r.GetClientType() {
		case v2.ClientType_PUSH_CONSUMER, v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PULL_CONSUMER:
			if strings.TrimSpace(r.GetGroup().GetName()) == "" {
				return nil, groupNull
			}
			return []check{groupCheck(r.GetGroup().GetName())}, nil
		}
		return nil, nil
	case *v2.ReceiveMessageRequest:
		if r.GetMessageQueue() == nil {
			return nil, fail(v2.Code_UNAUTHORIZED, "messageQueue is null.")
		}
		return withGroupTopic(r.GetGroup().GetName(), r.GetMessageQueue().GetTopic().GetName())
	case *v2.AckMessageRequest:
		return withGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *v2.ForwardMessageToDeadLetterQueueRequest:
		return withGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *v2.QueryAssignmentRequest:
		return withGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *v2.ChangeInvisibleDurationRequest:
		if strings.TrimSpace(r.GetGroup().GetName()) == "" {
			return nil, groupNull
		}
		return []check{groupCheck(r.GetGroup().GetName())}, nil
	case *v2.NotifyClientTerminationRequest:
		if r.GetGroup().GetName() == "" {
			return nil, nil
		}
		return []check{groupCheck(r.GetGroup().GetName())}, nil
	case *v2.SyncLiteSubscriptionRequest:
		if len(r.GetLiteTopicSet()) == 0 {
			return nil, nil
		}
		return withGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *v2.TelemetryCommand:
		st := r.GetSettings()
		if st == nil {
			return nil, nil
		}
		var out []check
		for _, t := range st.GetPublishing().GetTopics() {
			if strings.TrimSpace(t.GetName()) == "" {
				return nil, topicNull
			}
			out = append(out, topicCheck(t.GetName(), "Pub"))
		}
		if sub := st.GetSubscription(); sub != nil {
			if strings.TrimSpace(sub.GetGroup().GetName()) == "" {
				return nil, groupNull
			}
			out = append(out, groupCheck(sub.GetGroup().GetName()))
			for _, e := range sub.GetSubscriptions() {
				if strings.TrimSpace(e.GetTopic().GetName()) == "" {
					return nil, topicNull
				}
				out = append(out, topicCheck(e.GetTopic().GetName(), "Sub"))
			}
		}
		return out, nil
	}
	return nil, nil
}
