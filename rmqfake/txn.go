package rmqfake

import (
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// This file emulates transactional messages as RocketMQ 5.5.0 serves them
// (notes/research/sql92-transactions-recall-offsets.md §2): a TRANSACTION
// message is stored as a half message that no consumer sees; EndTransaction
// commits it (it is then stored like a normal message) or rolls it back. A
// half message nobody ends is checked: the broker asks a producer that
// declared the topic, over its Telemetry stream, with a
// RecoverOrphanedTransactionCommand, first once the message is older than
// 6 s (the broker scans every 30 s, so its first check comes 6 to 36 s after
// the send; rmqfake checks at 6 s) and then every 30 s, at most 15 times,
// after which the message is dropped. The producer answers with
// EndTransaction. The proxy keeps what EndTransaction needs for 30 s after
// the send or the last check; past that, EndTransaction answers
// "cannot found transaction data".

const (
	txnFirstCheck = 6_000  // ms after the send (transactionTimeOut)
	txnInterval   = 30_000 // ms between checks (transactionCheckInterval)
	txnMaxChecks  = 15     // transactionCheckMax
	txnDataTTL    = 30_000 // ms the proxy keeps a transaction's data
)

// txnKey names a half message: its topic and transaction id.
type txnKey struct {
	topic resKey
	id    string
}

// halfMessage is a transactional message waiting for its end.
type halfMessage struct {
	t      *topic
	m      *message
	checks int
	known  int64 // ms until which the proxy can end it (txnDataTTL)
	timer  *btimer
}

// holdHalf keeps m, sent to t, as a half message and schedules its checks.
// Call it with b.mu held.
func (b *broker) holdHalf(t *topic, m *message) {
	if b.halves == nil {
		b.halves = map[txnKey]*halfMessage{}
	}
	h := &halfMessage{t: t, m: m, known: b.nowMS() + txnDataTTL}
	k := txnKey{topic: t.key, id: m.id}
	if old := b.halves[k]; old != nil {
		b.dropHalf(k, old) // the same transaction sent again (a retried send): one half message
	}
	b.halves[k] = h
	t.bytes += m.cost()
	h.timer = b.after(b.nowMS()+txnFirstCheck, func() { b.checkHalf(k) })
}

// dropHalf forgets a half message. Call it with b.mu held.
func (b *broker) dropHalf(k txnKey, h *halfMessage) {
	b.stop(h.timer)
	delete(b.halves, k)
	h.t.bytes -= h.m.cost()
}

// checkHalf asks a producer of the topic what became of half message k.
// Call it with b.mu held (a broker timer).
func (b *broker) checkHalf(k txnKey) {
	h := b.halves[k]
	if h == nil {
		return
	}
	if h.checks >= txnMaxChecks {
		b.dropHalf(k, h) // discarded, as the broker does past transactionCheckMax
		return
	}
	h.checks++
	h.known = b.nowMS() + txnDataTTL
	h.timer = b.after(b.nowMS()+txnInterval, func() { b.checkHalf(k) })
	push := b.producerOf(k.topic)
	if push == nil {
		return
	}
	cmd := &v2.TelemetryCommand{Command: &v2.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &v2.RecoverOrphanedTransactionCommand{
			Message:       b.toProto(delivered{m: h.m, attempt: 1}, ""),
			TransactionId: h.m.id,
		}}}
	go func() { _ = push(cmd) }() // a stream send must not hold b.mu
}

// producerOf returns how to reach the Telemetry stream of a producer whose
// settings declared topic t, or nil. Call it with b.mu held.
func (b *broker) producerOf(t resKey) func(*v2.TelemetryCommand) error {
	for _, s := range b.sessions {
		if s.typ != v2.ClientType_PRODUCER || s.push == nil {
			continue
		}
		for _, r := range s.settings.GetPublishing().GetTopics() {
			if r.GetName() == t.name && r.GetResourceNamespace() == t.ns {
				return s.push
			}
		}
	}
	return nil
}

var errNoTxnData = fail(v2.Code_INTERNAL_SERVER_ERROR, "org.apache.rocketmq.proxy.common.ProxyException: cannot found transaction data")

// endTransaction commits or rolls back a half message (EndTransactionActivity).
func (b *broker) endTransaction(req *v2.EndTransactionRequest, ns string) *failure {
	if f := checkTopic(req.GetTopic().GetName()); f != nil {
		return f
	}
	if blank(req.GetTransactionId()) {
		return fail(v2.Code_INVALID_TRANSACTION_ID, "transaction id cannot be empty")
	}
	k := txnKey{topic: key(req.GetTopic(), ns), id: req.GetTransactionId()}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.halves[k]
	if h == nil || b.nowMS() > h.known {
		return errNoTxnData
	}
	switch req.GetResolution() {
	case v2.TransactionResolution_COMMIT:
		b.dropHalf(k, h)
		b.append(h.t, []*message{h.m})
	case v2.TransactionResolution_ROLLBACK:
		b.dropHalf(k, h)
	default:
		// UNKNOWN (the Go client sends an unspecified resolution): the half
		// message waits for its next check.
	}
	return nil
}
