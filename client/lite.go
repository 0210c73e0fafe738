package client

import (
	"context"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// LiteAction is a SyncLiteSubscription action.
type LiteAction int32

const (
	// LitePartialAdd adds the given lite topics to the subscription.
	LitePartialAdd = LiteAction(v2.LiteSubscriptionAction_PARTIAL_ADD)
	// LitePartialRemove removes the given lite topics.
	LitePartialRemove = LiteAction(v2.LiteSubscriptionAction_PARTIAL_REMOVE)
	// LiteCompleteAdd replaces the subscription with the given set; wildcard
	// groups send it (with an empty set) to bind the main topic.
	LiteCompleteAdd = LiteAction(v2.LiteSubscriptionAction_COMPLETE_ADD)
	// LiteCompleteRemove removes the whole subscription.
	LiteCompleteRemove = LiteAction(v2.LiteSubscriptionAction_COMPLETE_REMOVE)
)

func (a LiteAction) String() string { return v2.LiteSubscriptionAction(a).String() }

// OffsetPolicy is where a new exact lite subscription starts.
type OffsetPolicy int32

const (
	OffsetLast = OffsetPolicy(v2.OffsetOption_LAST)
	OffsetMin  = OffsetPolicy(v2.OffsetOption_MIN)
	OffsetMax  = OffsetPolicy(v2.OffsetOption_MAX)
)

// OffsetOption sets where a PARTIAL_ADD starts. Set exactly one field.
type OffsetOption struct {
	Policy    *OffsetPolicy
	Offset    *int64
	TailN     *int64
	Timestamp *time.Time
}

func (o *OffsetOption) proto() (*v2.OffsetOption, error) {
	n := 0
	out := &v2.OffsetOption{}
	if o.Policy != nil {
		n++
		out.OffsetType = &v2.OffsetOption_Policy_{Policy: v2.OffsetOption_Policy(*o.Policy)}
	}
	if o.Offset != nil {
		n++
		out.OffsetType = &v2.OffsetOption_Offset{Offset: *o.Offset}
	}
	if o.TailN != nil {
		n++
		out.OffsetType = &v2.OffsetOption_TailN{TailN: *o.TailN}
	}
	if o.Timestamp != nil {
		n++
		out.OffsetType = &v2.OffsetOption_Timestamp{Timestamp: o.Timestamp.UnixMilli()}
	}
	if n != 1 {
		return nil, &ConfigError{Option: "OffsetOption", Reason: "set exactly one of Policy, Offset, TailN, Timestamp"}
	}
	return out, nil
}

// LiteSyncRequest is one SyncLiteSubscription call.
type LiteSyncRequest struct {
	Action LiteAction
	// Topic is the LITE main topic the group is bound to.
	Topic string
	Group string
	// LiteTopics is the set the action applies to (may be empty for
	// COMPLETE_ADD on a wildcard group).
	LiteTopics []string
	// Version is sent when non-nil.
	Version *int64
	// Offset is sent when non-nil (PARTIAL_ADD).
	Offset *OffsetOption
}

// SyncLiteSubscription sends one SyncLiteSubscription RPC.
func (c *Client) SyncLiteSubscription(ctx context.Context, req LiteSyncRequest) error {
	if req.Topic == "" {
		return &ConfigError{Option: "Topic", Reason: "empty"}
	}
	if req.Group == "" {
		return &ConfigError{Option: "Group", Reason: "empty"}
	}
	pb := &v2.SyncLiteSubscriptionRequest{
		Action:       v2.LiteSubscriptionAction(req.Action),
		Topic:        c.resource(req.Topic),
		Group:        c.resource(req.Group),
		LiteTopicSet: req.LiteTopics,
		Version:      req.Version,
	}
	if req.Offset != nil {
		oo, err := req.Offset.proto()
		if err != nil {
			return err
		}
		pb.OffsetOption = oo
	}
	_, err := unary(c, ctx, "SyncLiteSubscription", c.stub.SyncLiteSubscription, pb, (*v2.SyncLiteSubscriptionResponse).GetStatus)
	return err
}
