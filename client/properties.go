package client

import "slices"

// refusedProperties are the property names the 5.5.0 proxy refuses as user
// properties (ILLEGAL_MESSAGE_PROPERTY_KEY): RocketMQ's MessageConst system
// keys (TestSystemPropertiesAreRefused checks each on the broker).
var refusedProperties = map[string]bool{
	"KEYS": true, "TAGS": true, "WAIT": true, "DELAY": true, "RETRY_TOPIC": true, "REAL_TOPIC": true,
	"REAL_QID": true, "TRAN_MSG": true, "PGROUP": true, "MIN_OFFSET": true, "MAX_OFFSET": true,
	"BUYER_ID": true, "ORIGIN_MESSAGE_ID": true, "TRANSFER_FLAG": true, "CORRECTION_FLAG": true,
	"MQ2_FLAG": true, "RECONSUME_TIME": true, "MSG_REGION": true, "TRACE_ON": true, "UNIQ_KEY": true,
	"EXTEND_UNIQ_INFO": true, "MAX_RECONSUME_TIMES": true, "CONSUME_START_TIME": true,
	"TRAN_PREPARED_QUEUE_OFFSET": true, "DUP_INFO": true, "INSTANCE_ID": true, "CORRELATION_ID": true,
	"REPLY_TO_CLIENT": true, "TTL": true, "ARRIVE_TIME": true, "PUSH_REPLY_TIME": true, "CLUSTER": true,
	"MSG_TYPE": true, "POP_CK": true, "POP_CK_OFFSET": true, "1ST_POP_TIME": true,
	"INNER_MULTI_QUEUE_OFFSET": true,
	"TIMER_DELAY_SEC":          true, "TIMER_DELIVER_MS": true, "TIMER_ENQUEUE_MS": true, "TIMER_DEQUEUE_MS": true,
	"TIMER_ROLL_TIMES": true, "TIMER_OUT_MS": true, "TIMER_DEL_UNIQKEY": true, "TIMER_DELAY_LEVEL": true,
	"__BORNHOST": true, "BORN_TIMESTAMP": true,
}

// brokerSetProperties are properties the broker takes as user properties but
// sets on the messages it delivers or acts on when a message carries them:
// INNER_MULTI_DISPATCH names the lite topics (LMQs) a message is dispatched
// to, LITE_TOPIC a message's lite topic, __STARTDELIVERTIME a delayed
// message's delivery time, __SHARDINGKEY the key of a sharded FIFO message.
// Forwarding one would redirect, delay or reorder the copy.
var brokerSetProperties = map[string]bool{
	"INNER_MULTI_DISPATCH": true, "LITE_TOPIC": true, "__STARTDELIVERTIME": true, "__SHARDINGKEY": true,
}

// IsSystemProperty reports whether the broker reserves name for itself: a
// message sent with it as a user property is refused
// (ILLEGAL_MESSAGE_PROPERTY_KEY), or it is one the broker sets on the
// messages it delivers or acts on (INNER_MULTI_DISPATCH on a lite message,
// __STARTDELIVERTIME on a delayed one). A received message may carry such
// properties; code that forwards a received message's properties leaves
// them out.
func IsSystemProperty(name string) bool { return refusedProperties[name] || brokerSetProperties[name] }

// RefusedPropertyNames lists, sorted, the names the broker refuses as user
// properties (a subset of those IsSystemProperty reports).
func RefusedPropertyNames() []string {
	out := make([]string, 0, len(refusedProperties))
	for k := range refusedProperties {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
