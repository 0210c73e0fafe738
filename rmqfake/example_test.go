package rmqfake_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/rmqflow/rmqflow/client"
	"github.com/rmqflow/rmqflow/rmqfake"
)

// Example starts the emulator with a LITE main topic and a wildcard group,
// then sends, receives and acks through the project's client.
func Example() {
	s, err := rmqfake.New(rmqfake.FastLiteDispatch())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Stop()
	if err := s.CreateTopic("agents", rmqfake.TopicLite); err != nil {
		log.Fatal(err)
	}
	if err := s.CreateGroup("agents-g", rmqfake.LiteBind("agents"), rmqfake.Wildcard(), rmqfake.RetryMax(3)); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	producer, _ := client.New(client.Config{Endpoints: s.Addr()})
	defer producer.Close(ctx)
	if _, err := producer.OpenSession(ctx, client.SessionConfig{Type: client.Producer}); err != nil {
		log.Fatal(err)
	}
	consumer, _ := client.New(client.Config{Endpoints: s.Addr()})
	defer consumer.Close(ctx)
	if _, err := consumer.OpenSession(ctx, client.SessionConfig{Type: client.LiteSimpleConsumer, Group: "agents-g",
		Subscriptions: []client.Subscription{{Topic: "agents"}}, LiteWildcard: true}); err != nil {
		log.Fatal(err)
	}

	if _, err := producer.Send(ctx, &client.Message{Topic: "agents", LiteTopic: "conversation-42", Body: []byte("hello")}); err != nil {
		log.Fatal(err)
	}
	msgs, err := consumer.Receive(ctx, client.ReceiveRequest{Group: "agents-g", Topic: "agents", Lite: true,
		InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s/%s: %s (attempt %d)\n", m.Topic, m.LiteTopic, m.Body, m.DeliveryAttempt)
		res, err := consumer.Ack(ctx, "agents-g", m.Topic, []client.AckEntry{{MessageID: m.MessageID, ReceiptHandle: m.ReceiptHandle, LiteTopic: m.LiteTopic}})
		if err != nil || res[0].Err != nil {
			log.Fatal(err, res)
		}
	}
	fmt.Println("acked:", s.Stats().Groups["agents-g"].Acked)
	// Output:
	// agents/conversation-42: hello (attempt 1)
	// acked: 1
}

// ExampleServer_Intercept fails every other AckMessage, to test retries.
func ExampleServer_Intercept() {
	s, err := rmqfake.New()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Stop()
	n := 0
	remove := s.Intercept("AckMessage", func(c rmqfake.Call) rmqfake.Verdict {
		n++
		if n%2 == 1 {
			return rmqfake.Verdict{Err: fmt.Errorf("injected")}
		}
		return rmqfake.Verdict{}
	})
	defer remove()
	fmt.Println("hook installed")
	// Output: hook installed
}
