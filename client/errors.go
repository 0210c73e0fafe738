package client

import (
	"errors"
	"fmt"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code is a RocketMQ status code (apache.rocketmq.v2.Code), such as 40013 for
// INVALID_RECEIPT_HANDLE.
type Code int32

// The status codes rmqflow handles specially. Every other code the broker sends
// is kept as is in [StatusError.Code].
const (
	CodeOK                            Code = Code(v2.Code_OK)
	CodeMultipleResults               Code = Code(v2.Code_MULTIPLE_RESULTS)
	CodeBadRequest                    Code = Code(v2.Code_BAD_REQUEST)
	CodeIllegalTopic                  Code = Code(v2.Code_ILLEGAL_TOPIC)
	CodeIllegalConsumerGroup          Code = Code(v2.Code_ILLEGAL_CONSUMER_GROUP)
	CodeIllegalMessageTag             Code = Code(v2.Code_ILLEGAL_MESSAGE_TAG)
	CodeIllegalMessageKey             Code = Code(v2.Code_ILLEGAL_MESSAGE_KEY)
	CodeIllegalMessageGroup           Code = Code(v2.Code_ILLEGAL_MESSAGE_GROUP)
	CodeIllegalMessagePropertyKey     Code = Code(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY)
	CodeInvalidTransactionID          Code = Code(v2.Code_INVALID_TRANSACTION_ID)
	CodeIllegalMessageID              Code = Code(v2.Code_ILLEGAL_MESSAGE_ID)
	CodeIllegalFilterExpression       Code = Code(v2.Code_ILLEGAL_FILTER_EXPRESSION)
	CodeIllegalInvisibleTime          Code = Code(v2.Code_ILLEGAL_INVISIBLE_TIME)
	CodeIllegalDeliveryTime           Code = Code(v2.Code_ILLEGAL_DELIVERY_TIME)
	CodeInvalidReceiptHandle          Code = Code(v2.Code_INVALID_RECEIPT_HANDLE)
	CodeMessagePropertyConflict       Code = Code(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)
	CodeUnrecognizedClientType        Code = Code(v2.Code_UNRECOGNIZED_CLIENT_TYPE)
	CodeMessageCorrupted              Code = Code(v2.Code_MESSAGE_CORRUPTED)
	CodeClientIDRequired              Code = Code(v2.Code_CLIENT_ID_REQUIRED)
	CodeIllegalPollingTime            Code = Code(v2.Code_ILLEGAL_POLLING_TIME)
	CodeIllegalOffset                 Code = Code(v2.Code_ILLEGAL_OFFSET)
	CodeIllegalLiteTopic              Code = Code(v2.Code_ILLEGAL_LITE_TOPIC)
	CodeUnauthorized                  Code = Code(v2.Code_UNAUTHORIZED)
	CodeForbidden                     Code = Code(v2.Code_FORBIDDEN)
	CodeNotFound                      Code = Code(v2.Code_NOT_FOUND)
	CodeMessageNotFound               Code = Code(v2.Code_MESSAGE_NOT_FOUND)
	CodeTopicNotFound                 Code = Code(v2.Code_TOPIC_NOT_FOUND)
	CodeConsumerGroupNotFound         Code = Code(v2.Code_CONSUMER_GROUP_NOT_FOUND)
	CodeOffsetNotFound                Code = Code(v2.Code_OFFSET_NOT_FOUND)
	CodeRequestTimeout                Code = Code(v2.Code_REQUEST_TIMEOUT)
	CodePayloadTooLarge               Code = Code(v2.Code_PAYLOAD_TOO_LARGE)
	CodeMessageBodyTooLarge           Code = Code(v2.Code_MESSAGE_BODY_TOO_LARGE)
	CodeMessageBodyEmpty              Code = Code(v2.Code_MESSAGE_BODY_EMPTY)
	CodePreconditionFailed            Code = Code(v2.Code_PRECONDITION_FAILED)
	CodeTooManyRequests               Code = Code(v2.Code_TOO_MANY_REQUESTS)
	CodeLiteTopicQuotaExceeded        Code = Code(v2.Code_LITE_TOPIC_QUOTA_EXCEEDED)
	CodeLiteSubscriptionQuotaExceeded Code = Code(v2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED)
	CodeInternalError                 Code = Code(v2.Code_INTERNAL_ERROR)
	CodeInternalServerError           Code = Code(v2.Code_INTERNAL_SERVER_ERROR)
	CodeHAError                       Code = Code(v2.Code_HA_NOT_AVAILABLE)
	CodeProxyTimeout                  Code = Code(v2.Code_PROXY_TIMEOUT)
	CodeMasterPersistenceTimeout      Code = Code(v2.Code_MASTER_PERSISTENCE_TIMEOUT)
	CodeSlavePersistenceTimeout       Code = Code(v2.Code_SLAVE_PERSISTENCE_TIMEOUT)
	CodeUnsupported                   Code = Code(v2.Code_UNSUPPORTED)
	CodeVersionUnsupported            Code = Code(v2.Code_VERSION_UNSUPPORTED)
	CodeVerifyFIFOMessageUnsupported  Code = Code(v2.Code_VERIFY_FIFO_MESSAGE_UNSUPPORTED)
)

// String returns the code's protocol name, such as "INVALID_RECEIPT_HANDLE".
func (c Code) String() string {
	if name, ok := v2.Code_name[int32(c)]; ok {
		return name
	}
	return fmt.Sprintf("CODE_%d", int32(c))
}

// StatusError is a non-OK status returned by the broker (or proxy). Use
// errors.Is with one of the sentinel errors below to test for a code, or
// errors.As to read the code and message:
//
//	if errors.Is(err, client.ErrInvalidReceiptHandle) { ... }
//	var se *client.StatusError
//	if errors.As(err, &se) { log.Print(se.Code) }
type StatusError struct {
	// Op is the RPC that failed, such as "AckMessage".
	Op string
	// Code is the RocketMQ status code.
	Code Code
	// Message is the broker's message, verbatim.
	Message string
}

func (e *StatusError) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("rocketmq: %s (%d)", e.Code, int32(e.Code))
	}
	if e.Message == "" {
		return fmt.Sprintf("rocketmq: %s: %s (%d)", e.Op, e.Code, int32(e.Code))
	}
	return fmt.Sprintf("rocketmq: %s: %s (%d): %s", e.Op, e.Code, int32(e.Code), e.Message)
}

// Is reports whether target is a *StatusError with the same code. The Op and
// Message of target are ignored, so the sentinels below match any RPC.
func (e *StatusError) Is(target error) bool {
	t, ok := target.(*StatusError)
	return ok && t.Code == e.Code
}

// Sentinel errors, one per code callers commonly branch on. Compare with
// errors.Is; never compare error strings.
var (
	ErrBadRequest                    = &StatusError{Code: CodeBadRequest}
	ErrIllegalTopic                  = &StatusError{Code: CodeIllegalTopic}
	ErrIllegalConsumerGroup          = &StatusError{Code: CodeIllegalConsumerGroup}
	ErrIllegalFilterExpression       = &StatusError{Code: CodeIllegalFilterExpression}
	ErrIllegalInvisibleTime          = &StatusError{Code: CodeIllegalInvisibleTime}
	ErrIllegalDeliveryTime           = &StatusError{Code: CodeIllegalDeliveryTime}
	ErrInvalidReceiptHandle          = &StatusError{Code: CodeInvalidReceiptHandle}
	ErrIllegalPollingTime            = &StatusError{Code: CodeIllegalPollingTime}
	ErrIllegalLiteTopic              = &StatusError{Code: CodeIllegalLiteTopic}
	ErrUnauthorized                  = &StatusError{Code: CodeUnauthorized}
	ErrForbidden                     = &StatusError{Code: CodeForbidden}
	ErrNotFound                      = &StatusError{Code: CodeNotFound}
	ErrMessageNotFound               = &StatusError{Code: CodeMessageNotFound}
	ErrTopicNotFound                 = &StatusError{Code: CodeTopicNotFound}
	ErrConsumerGroupNotFound         = &StatusError{Code: CodeConsumerGroupNotFound}
	ErrTooManyRequests               = &StatusError{Code: CodeTooManyRequests}
	ErrLiteTopicQuotaExceeded        = &StatusError{Code: CodeLiteTopicQuotaExceeded}
	ErrLiteSubscriptionQuotaExceeded = &StatusError{Code: CodeLiteSubscriptionQuotaExceeded}
	ErrInternal                      = &StatusError{Code: CodeInternalError}
	ErrProxyTimeout                  = &StatusError{Code: CodeProxyTimeout}
	ErrUnsupported                   = &StatusError{Code: CodeUnsupported}
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("rocketmq: client closed")

// ConfigError reports an invalid setting; Option names it.
type ConfigError struct {
	Option string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("rocketmq: invalid %s: %s", e.Option, e.Reason)
}

// checkStatus turns a response status into nil (OK) or a *StatusError.
func checkStatus(op string, st *v2.Status) error {
	if st == nil {
		return &StatusError{Op: op, Code: CodeInternalError, Message: "response carried no status"}
	}
	if st.GetCode() == v2.Code_OK {
		return nil
	}
	return &StatusError{Op: op, Code: Code(st.GetCode()), Message: st.GetMessage()}
}

// transportError wraps an error from gRPC itself (connection refused, deadline,
// TLS). The gRPC status stays reachable through errors.As/status.FromError.
type transportError struct {
	op       string
	endpoint string
	err      error
}

func (e *transportError) Error() string {
	return fmt.Sprintf("rocketmq: %s to %s: %v", e.op, e.endpoint, e.err)
}

func (e *transportError) Unwrap() error { return e.err }

// GRPCStatus lets status.FromError see the code of the wrapped gRPC error.
func (e *transportError) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.err)
	return s
}

// IsRetriable reports whether err is worth retrying unchanged after a backoff:
// throttling, broker-side timeouts, internal errors and transport failures
// other than a bad request or a cancelled context.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		switch se.Code {
		// Not INTERNAL_SERVER_ERROR: RocketMQ 5.5.0 uses it for permanent
		// refusals too (an unparsable receipt handle, an unsupported
		// operation for the group).
		case CodeTooManyRequests, CodeRequestTimeout, CodeProxyTimeout, CodeInternalError,
			CodeHAError, CodeMasterPersistenceTimeout, CodeSlavePersistenceTimeout:
			return true
		}
		return false
	}
	var te *transportError
	if errors.As(err, &te) {
		switch status.Code(te.err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
			return true
		}
	}
	return false
}
