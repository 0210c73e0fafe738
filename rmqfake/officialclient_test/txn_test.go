package officialclient_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

const (
	txnTopic = "rmqflow-official-txn"
	txnGroup = "rmqflow-official-txn-g"
)

// TestOfficialTransactionProducer: the official Go Producer's transactions.
// A committed message is delivered, a rolled-back one never; one left open
// is checked by the broker over the producer's Telemetry stream, the
// producer's TransactionChecker commits it, and it is delivered. Against
// rmqfake and RocketMQ (whose first check comes 6 to 36 s after the send).
func TestOfficialTransactionProducer(t *testing.T) {
	quietClient(t)
	for name, ep := range targets(t) {
		t.Run(name, func(t *testing.T) {
			run := fmt.Sprintf("txn-%d", time.Now().UnixNano())
			var mu sync.Mutex
			var checked []string
			checker := &rmq.TransactionChecker{Check: func(mv *rmq.MessageView) rmq.TransactionResolution {
				if !slices.Contains(mv.GetKeys(), run) {
					return rmq.ROLLBACK // an earlier run's leftover
				}
				mu.Lock()
				checked = append(checked, string(mv.GetBody()))
				mu.Unlock()
				return rmq.COMMIT
			}}
			p, err := rmq.NewProducer(&rmq.Config{Endpoint: ep, Credentials: &credentials.SessionCredentials{}},
				rmq.WithTopics(txnTopic), rmq.WithTransactionChecker(checker))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(); err != nil {
				t.Fatalf("producer start: %v", err)
			}
			defer p.GracefulStop()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, body := range []string{"commit", "rollback", "open"} {
				m := &rmq.Message{Topic: txnTopic, Body: []byte(body)}
				m.SetKeys(run)
				tx := p.BeginTransaction()
				if _, err := p.SendWithTransaction(ctx, m, tx); err != nil {
					t.Fatalf("send %s: %v", body, err)
				}
				switch body {
				case "commit":
					err = tx.Commit()
				case "rollback":
					err = tx.RollBack()
				}
				if err != nil {
					t.Fatalf("%s: %v", body, err)
				}
			}
			c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: txnGroup, Credentials: &credentials.SessionCredentials{}},
				rmq.WithSimpleAwaitDuration(5*time.Second),
				rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{txnTopic: rmq.SUB_ALL}))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(); err != nil {
				t.Fatalf("consumer start: %v", err)
			}
			defer c.GracefulStop()
			var got []string
			for len(got) < 2 && ctx.Err() == nil {
				mvs, err := c.Receive(ctx, 16, 20*time.Second)
				if err != nil {
					continue // MESSAGE_NOT_FOUND after an empty poll
				}
				for _, mv := range mvs {
					if slices.Contains(mv.GetKeys(), run) {
						got = append(got, string(mv.GetBody()))
					}
					if err := c.Ack(ctx, mv); err != nil {
						t.Errorf("ack: %v", err)
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, []string{"commit", "open"}) {
				t.Fatalf("delivered %v, want [commit open] (the open one after the broker's check)", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(checked) == 0 || slices.ContainsFunc(checked, func(b string) bool { return b != "open" }) {
				t.Errorf("the checker was asked about %v, want only the open one (once, or again if a check overtook its commit)", checked)
			}
		})
	}
}
