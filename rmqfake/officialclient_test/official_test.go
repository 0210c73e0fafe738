// Package officialclient_test checks that the official RocketMQ Go client
// (github.com/apache/rocketmq-clients/golang/v5: Producer, SimpleConsumer,
// PushConsumer, LitePushConsumer) works against rmqfake unchanged; the push
// flows run against the real broker of `make test` too (push_test.go). It is
// a module of its own so that the official client's dependencies (zap,
// OpenCensus, ...) stay out of rmqflow's go.mod; scripts/test.sh runs it.
package officialclient_test

import (
	"context"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// The official client dials TLS by default (rmqfake, like the proxy, serves
// TLS and plaintext on one port); both are tried.
func TestOfficialClientSendReceiveAck(t *testing.T) {
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	defer func(v bool) { rmq.EnableSsl = v }(rmq.EnableSsl)
	for _, ssl := range []bool{true, false} {
		rmq.EnableSsl = ssl
		t.Run(map[bool]string{true: "tls", false: "plaintext"}[ssl], sendReceiveAck)
	}
}

func sendReceiveAck(t *testing.T) {
	const topic, group = "official-topic", "official-group"
	s := rmqfake.NewForTest(t, rmqfake.Credentials("official-ak", "official-sk"))
	if err := s.CreateTopic(topic, rmqfake.TopicNormal); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroup(group, rmqfake.RetryMax(3)); err != nil {
		t.Fatal(err)
	}
	creds := &credentials.SessionCredentials{AccessKey: "official-ak", AccessSecret: "official-sk"}

	producer, err := rmq.NewProducer(&rmq.Config{Endpoint: s.Addr(), Credentials: creds}, rmq.WithTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := producer.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	defer producer.GracefulStop()

	consumer, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: s.Addr(), ConsumerGroup: group, Credentials: creds},
		rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.NewFilterExpression("blue || green")}))
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatalf("consumer start: %v", err)
	}
	defer consumer.GracefulStop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := map[string]string{}
	for _, tag := range []string{"blue", "red", "green"} {
		msg := &rmq.Message{Topic: topic, Body: []byte("body-" + tag)}
		msg.SetTag(tag)
		msg.SetKeys("key-" + tag)
		msg.AddProperty("colour", tag)
		receipts, err := producer.Send(ctx, msg)
		if err != nil {
			t.Fatalf("send %s: %v", tag, err)
		}
		sent[receipts[0].MessageID] = tag
	}

	got := map[string]bool{}
	for len(got) < 2 && ctx.Err() == nil {
		mvs, err := consumer.Receive(ctx, 16, 20*time.Second)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, mv := range mvs {
			tag := sent[mv.GetMessageId()]
			if mv.GetTag() == nil || *mv.GetTag() != tag || string(mv.GetBody()) != "body-"+tag ||
				mv.GetProperties()["colour"] != tag || mv.GetDeliveryAttempt() != 1 || mv.GetTopic() != topic {
				t.Errorf("message %s: tag %v body %q properties %v attempt %d topic %s; sent with tag %q",
					mv.GetMessageId(), mv.GetTag(), mv.GetBody(), mv.GetProperties(), mv.GetDeliveryAttempt(), mv.GetTopic(), tag)
			}
			if err := consumer.Ack(ctx, mv); err != nil {
				t.Fatalf("ack: %v", err)
			}
			got[tag] = true
		}
	}
	if !got["blue"] || !got["green"] || got["red"] {
		t.Fatalf("received tags %v, want blue and green (the filter drops red)", got)
	}
	g := s.Stats().Groups[group]
	if g.Acked != 2 || g.InFlight != 0 || g.Backlog != 0 {
		t.Fatalf("group after the acks: %+v", g.Counts)
	}
}
