package rmqfake

import (
	"fmt"
	"unicode"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// resKey names a topic or group inside its namespace.
type resKey struct {
	ns   string
	name string
}

func (k resKey) String() string {
	if k.ns == "" {
		return k.name
	}
	return k.ns + "%" + k.name
}

// key returns the key of a protocol Resource; a resource without a namespace
// takes the namespace of the request header (x-mq-namespace).
func key(r *v2.Resource, headerNS string) resKey {
	ns := r.GetResourceNamespace()
	if ns == "" {
		ns = headerNS
	}
	return resKey{ns: ns, name: r.GetName()}
}

func (k resKey) proto() *v2.Resource {
	return &v2.Resource{ResourceNamespace: k.ns, Name: k.name}
}

const (
	dlqPrefix   = "%DLQ%"
	retryPrefix = "%RETRY%"
)

// dlqKey is the dead-letter topic of group g.
func dlqKey(g resKey) resKey { return resKey{ns: g.ns, name: dlqPrefix + g.name} }

// Limits of the 5.5.0 proxy and broker (ProxyConfig, Validators).
const (
	topicMaxLen        = 127
	groupMaxLen        = 120
	liteTopicMaxLen    = 64
	maxBodySize        = 4 << 20
	maxBatch           = 32
	minInvisible       = 10_000     // ms, ReceiveMessage
	maxInvisible       = 43_200_000 // ms, 12 h
	minPolling         = 5_000      // ms
	maxPolling         = 20_000     // ms
	maxDelay           = 86_400_000 // ms, 1 day
	maxUserProps       = 128
	maxUserPropSize    = 16 << 10
	maxMessageGroupLen = 64
	liteSubQuota       = 2000
	nackInvisible      = 1_000 // ms: what the proxy gives messages it failed to write
)

// failure is a RocketMQ status to answer with.
type failure struct {
	code v2.Code
	msg  string
}

func (f *failure) Error() string { return f.code.String() + ": " + f.msg }

func (f *failure) status() *v2.Status { return &v2.Status{Code: f.code, Message: f.msg} }

func fail(code v2.Code, format string, args ...any) *failure {
	return &failure{code: code, msg: fmt.Sprintf(format, args...)}
}

func okStatus() *v2.Status { return &v2.Status{Code: v2.Code_OK, Message: "OK"} }

func validChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '%', c == '-', c == '_', c == '|':
		default:
			return false
		}
	}
	return true
}

// blank reports whether s is empty or only whitespace as Java's
// StringUtils.isBlank sees it (Character.isWhitespace): Unicode space,
// line and paragraph separators except the non-breaking ones (U+00A0,
// U+2007, U+202F), and \t \n \v \f \r and U+001C..U+001F; not U+0085.
// strings.TrimSpace differs on exactly those, and the proxy decides.
func blank(s string) bool {
	for _, r := range s {
		if !javaWhitespace(r) {
			return false
		}
	}
	return true
}

func javaWhitespace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f:
		return true
	case 0xa0, 0x2007, 0x202f:
		return false
	}
	return unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp)
}

// checkTopic mirrors Validators.checkTopic of the Java client the proxy uses.
func checkTopic(name string) *failure {
	switch {
	case blank(name):
		return fail(v2.Code_ILLEGAL_TOPIC, "The specified topic is blank")
	case len(name) > topicMaxLen:
		return fail(v2.Code_ILLEGAL_TOPIC, "The specified topic is longer than topic max length %d.", topicMaxLen)
	case !validChars(name):
		return fail(v2.Code_ILLEGAL_TOPIC, "The specified topic[%s] contains illegal characters, allowing only ^[%%|a-zA-Z0-9_-]+$", name)
	}
	return nil
}

// checkGroup mirrors Validators.checkGroup.
func checkGroup(name string) *failure {
	switch {
	case blank(name):
		return fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "the specified group is blank")
	case len(name) > groupMaxLen:
		return fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "the specified group[%s] is longer than group max length: %d.", name, groupMaxLen)
	case !validChars(name):
		return fail(v2.Code_ILLEGAL_CONSUMER_GROUP, "the specified group[%s] contains illegal characters, allowing only ^[%%|a-zA-Z0-9_-]+$", name)
	}
	return nil
}

// checkLiteTopic mirrors GrpcValidator.validateLiteTopic: [A-Za-z0-9_-], at
// most 64 bytes.
func checkLiteTopic(name string) *failure {
	if blank(name) {
		return fail(v2.Code_ILLEGAL_LITE_TOPIC, "lite topic cannot be the char sequence of whitespace")
	}
	if len(name) > liteTopicMaxLen {
		return fail(v2.Code_ILLEGAL_LITE_TOPIC, "lite topic exceed the max size %d", liteTopicMaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fail(v2.Code_ILLEGAL_LITE_TOPIC, "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)")
		}
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return true
		}
	}
	return false
}

// reservedProps are the property names the 5.5.0 proxy refuses as user
// properties (its MessageConst system keys); it takes INNER_MULTI_DISPATCH,
// LITE_TOPIC and __STARTDELIVERTIME (client.TestSystemPropertiesAreRefused
// compares both targets).
var reservedProps = map[string]bool{
	"KEYS": true, "TAGS": true, "WAIT": true, "DELAY": true, "RETRY_TOPIC": true, "REAL_TOPIC": true,
	"REAL_QID": true, "TRAN_MSG": true, "PGROUP": true, "MIN_OFFSET": true, "MAX_OFFSET": true,
	"BUYER_ID": true, "ORIGIN_MESSAGE_ID": true, "TRANSFER_FLAG": true, "CORRECTION_FLAG": true,
	"MQ2_FLAG": true, "RECONSUME_TIME": true, "MSG_REGION": true, "TRACE_ON": true, "UNIQ_KEY": true,
	"EXTEND_UNIQ_INFO": true, "MAX_RECONSUME_TIMES": true, "CONSUME_START_TIME": true,
	"TRAN_PREPARED_QUEUE_OFFSET": true, "DUP_INFO": true, "INSTANCE_ID": true, "CORRELATION_ID": true,
	"REPLY_TO_CLIENT": true, "TTL": true, "ARRIVE_TIME": true, "PUSH_REPLY_TIME": true, "CLUSTER": true,
	"MSG_TYPE": true, "POP_CK": true, "POP_CK_OFFSET": true, "1ST_POP_TIME": true,
	"INNER_MULTI_QUEUE_OFFSET": true, "TIMER_DELAY_SEC": true, "TIMER_DELIVER_MS": true,
	"TIMER_ENQUEUE_MS": true, "TIMER_DEQUEUE_MS": true, "TIMER_ROLL_TIMES": true, "TIMER_OUT_MS": true,
	"TIMER_DEL_UNIQKEY": true, "TIMER_DELAY_LEVEL": true, "__BORNHOST": true, "BORN_TIMESTAMP": true,
}
