package rmqflow

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rmqflow/rmqflow/client"
)

// Properties DeadLetterToSink adds to the copy it writes: where the message
// came from and why it was given up on.
const (
	PropertyDeadLetterOrigin    = "RMQFLOW_DLQ_ORIGIN"     // the original topic
	PropertyDeadLetterLiteTopic = "RMQFLOW_DLQ_LITE_TOPIC" // the original lite topic, if any
	PropertyDeadLetterMessageID = "RMQFLOW_DLQ_MSG_ID"     // the original message id
	PropertyDeadLetterCause     = "RMQFLOW_DLQ_CAUSE"      // the last error, or the valve
	PropertyDeadLetterGroup     = "RMQFLOW_DLQ_MSG_GROUP"  // the original message group, if any
)

// DeadLetterToSink returns a DeadLetterFunc that parks a message given up on
// in a topic of your own: it writes a copy (body, tag, keys, the user
// properties, plus the PropertyDeadLetter… properties, the message group
// among them) through s and
// returns once the broker stored it, so that the Runner acks the original
// only then. If the write fails, the Runner keeps the message and tries again
// later (see DeadLetterFunc); a write whose outcome was unknown may leave a
// second copy; a message the runner parked is not parked again when its
// ack fails (it is acked again when it comes back, also as a copy from the
// broker's dead-letter queue). The copy goes to s's topic (and SinkConfig.LiteTopic, if
// set); the original topic, lite topic and message id travel as properties.
//
// On RocketMQ 5.5.0 this is how to park lite messages for good: the
// broker's own dead-letter queue dispatches a lite message back into its
// lite topic (docs/broker-semantics.md, scenario g).
func DeadLetterToSink[T any](s *Sink) DeadLetterFunc[T] {
	return func(ctx context.Context, m *AckableMessage[T], cause error) error {
		props := maps.Clone(m.Meta.Properties)
		if props == nil {
			props = map[string]string{}
		}
		// The broker acts on some properties a received message carries
		// (INNER_MULTI_DISPATCH would dispatch the copy back into its lite
		// topic) or refuses them: none travels with the copy.
		maps.DeleteFunc(props, func(k, _ string) bool { return client.IsSystemProperty(k) })
		props[PropertyDeadLetterOrigin] = m.Meta.Topic
		props[PropertyDeadLetterMessageID] = m.Meta.MessageID
		if m.Meta.LiteTopic != "" {
			props[PropertyDeadLetterLiteTopic] = m.Meta.LiteTopic
		}
		if m.Meta.MessageGroup != "" {
			// As a property, not the copy's own group: a NORMAL topic
			// refuses a message with a group, and the function would fail
			// for ever.
			props[PropertyDeadLetterGroup] = m.Meta.MessageGroup
		}
		if cause != nil {
			c := cause.Error()
			if len(c) > 1024 {
				c = c[:1024]
			}
			props[PropertyDeadLetterCause] = c
		}
		_, err := s.Write(ctx, Record{Tag: m.Meta.Tag, Keys: slices.Clone(m.Meta.Keys), Properties: props,
			Body: m.Meta.Body}).Wait(ctx)
		return err
	}
}

// CheckDeadLetterSink asks the broker whether s's topic takes the copies
// DeadLetterToSink writes through s, and returns an error that says why not
// otherwise: a copy has no message group and no delivery time, and a lite
// topic only when SinkConfig.LiteTopic is set, so s's topic must accept
// NORMAL messages, or LITE ones with SinkConfig.LiteTopic. A topic the
// broker names no type for passes. Call it before parking anything: every
// copy would fail otherwise, and a message whose parks keep failing comes
// back until something else gives up on it.
func CheckDeadLetterSink(ctx context.Context, s *Sink) error {
	types, err := s.TopicTypes(ctx)
	if err != nil || len(types) == 0 {
		return err
	}
	// The reasons name no Go field: an integration's user reads them after
	// the integration's own config key.
	want, why := MessageNormal, "a parked copy has no lite topic and no message group"
	if s.cfg.LiteTopic != "" {
		want, why = MessageLite, "a parked copy has a lite topic"
	}
	if slices.Contains(types, want) {
		return nil
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	return fmt.Errorf("rmqflow: dead-letter topic %s accepts %s messages only: %s, so the broker would refuse it; name a %s topic",
		s.cfg.Topic, strings.Join(names, ", "), why, want)
}
