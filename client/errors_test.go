package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatusErrorIsMatchesByCode(t *testing.T) {
	sentinels := []*StatusError{
		ErrBadRequest, ErrIllegalTopic, ErrIllegalConsumerGroup, ErrIllegalFilterExpression,
		ErrIllegalInvisibleTime, ErrIllegalDeliveryTime, ErrInvalidReceiptHandle, ErrIllegalPollingTime,
		ErrIllegalLiteTopic, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrMessageNotFound,
		ErrTopicNotFound, ErrConsumerGroupNotFound, ErrTooManyRequests, ErrLiteTopicQuotaExceeded,
		ErrLiteSubscriptionQuotaExceeded, ErrInternal, ErrProxyTimeout, ErrUnsupported,
	}
	seen := map[Code]bool{}
	for _, s := range sentinels {
		if seen[s.Code] {
			t.Errorf("two sentinels share code %v", s.Code)
		}
		seen[s.Code] = true
		// Op and Message differ from the sentinel's (empty) ones; wrapping
		// twice must not hide the code.
		err := fmt.Errorf("outer: %w", fmt.Errorf("inner: %w",
			&StatusError{Op: "AckMessage", Code: s.Code, Message: "broker says no"}))
		for _, other := range sentinels {
			if got, want := errors.Is(err, other), other.Code == s.Code; got != want {
				t.Errorf("errors.Is(%v, sentinel %v) = %v, want %v", err, other.Code, got, want)
			}
		}
	}
	if errors.Is(&StatusError{Code: CodeInvalidReceiptHandle}, errors.New("rocketmq: INVALID_RECEIPT_HANDLE (40013)")) {
		t.Error("a StatusError matched a plain error with the same text")
	}
	if errors.Is(ErrClosed, ErrInternal) || errors.Is(nil, ErrInternal) {
		t.Error("non-status errors matched a status sentinel")
	}
}

func TestStatusErrorAsAndMessage(t *testing.T) {
	err := fmt.Errorf("acking batch: %w", &StatusError{Op: "AckMessage", Code: CodeInvalidReceiptHandle, Message: "handle expired"})
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("errors.As found no *StatusError in %v", err)
	}
	if se.Code != CodeInvalidReceiptHandle || int32(se.Code) != int32(v2.Code_INVALID_RECEIPT_HANDLE) || se.Op != "AckMessage" || se.Message != "handle expired" {
		t.Errorf("extracted %+v", se)
	}
	for _, tc := range []struct {
		err  *StatusError
		want string
	}{
		{&StatusError{Code: CodeTooManyRequests}, "rocketmq: TOO_MANY_REQUESTS (42900)"},
		{&StatusError{Op: "SendMessage", Code: CodeIllegalLiteTopic}, "rocketmq: SendMessage: ILLEGAL_LITE_TOPIC (40020)"},
		{&StatusError{Op: "AckMessage", Code: CodeInvalidReceiptHandle, Message: "expired"}, "rocketmq: AckMessage: INVALID_RECEIPT_HANDLE (40013): expired"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestCodeString(t *testing.T) {
	for c, want := range map[Code]string{
		CodeOK:                      "OK",
		CodeInvalidReceiptHandle:    "INVALID_RECEIPT_HANDLE",
		CodeTooManyRequests:         "TOO_MANY_REQUESTS",
		CodeProxyTimeout:            "PROXY_TIMEOUT",
		CodeIllegalLiteTopic:        "ILLEGAL_LITE_TOPIC",
		CodeMessagePropertyConflict: "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
		CodeInternalServerError:     "INTERNAL_SERVER_ERROR",
		Code(12345):                 "CODE_12345",
	} {
		if got := c.String(); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", int32(c), got, want)
		}
	}
	// Every named constant is a protocol code with a name.
	for _, c := range []Code{CodeMultipleResults, CodeLiteTopicQuotaExceeded, CodeLiteSubscriptionQuotaExceeded, CodeIllegalOffset, CodeVerifyFIFOMessageUnsupported} {
		if strings.HasPrefix(c.String(), "CODE_") {
			t.Errorf("code %d has no protocol name", int32(c))
		}
	}
}

func TestIsRetriable(t *testing.T) {
	wrapGRPC := func(c codes.Code) error {
		return &transportError{op: "Heartbeat", endpoint: "127.0.0.1:1", err: status.Error(c, "boom")}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"TOO_MANY_REQUESTS", &StatusError{Op: "SendMessage", Code: CodeTooManyRequests}, true},
		{"PROXY_TIMEOUT", &StatusError{Code: CodeProxyTimeout}, true},
		{"wrapped PROXY_TIMEOUT", fmt.Errorf("x: %w", &StatusError{Code: CodeProxyTimeout}), true},
		{"INTERNAL_ERROR", ErrInternal, true},
		{"INVALID_RECEIPT_HANDLE", &StatusError{Code: CodeInvalidReceiptHandle}, false},
		{"ILLEGAL_LITE_TOPIC", ErrIllegalLiteTopic, false},
		{"gRPC Unavailable", wrapGRPC(codes.Unavailable), true},
		{"gRPC Unavailable, wrapped again", fmt.Errorf("send: %w", wrapGRPC(codes.Unavailable)), true},
		{"gRPC DeadlineExceeded", wrapGRPC(codes.DeadlineExceeded), true},
		{"gRPC InvalidArgument", wrapGRPC(codes.InvalidArgument), false},
		{"gRPC Canceled", wrapGRPC(codes.Canceled), false},
		{"gRPC Unauthenticated", wrapGRPC(codes.Unauthenticated), false},
		{"ErrClosed", ErrClosed, false},
		{"ConfigError", &ConfigError{Option: "Topic", Reason: "empty"}, false},
		{"context.Canceled", context.Canceled, false},
	} {
		if got := IsRetriable(tc.err); got != tc.want {
			t.Errorf("IsRetriable(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestTransportErrorKeepsGRPCStatus(t *testing.T) {
	inner := status.Error(codes.Unavailable, "connection refused")
	err := fmt.Errorf("outer: %w", &transportError{op: "QueryRoute", endpoint: "h:1", err: inner})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("status.Code = %v, want Unavailable", status.Code(err))
	}
	if !errors.Is(err, inner) {
		t.Error("errors.Is does not reach the wrapped gRPC error")
	}
	if msg := err.Error(); !strings.Contains(msg, "QueryRoute") || !strings.Contains(msg, "h:1") {
		t.Errorf("message %q names neither the RPC nor the endpoint", msg)
	}
}

func TestCheckStatus(t *testing.T) {
	if err := checkStatus("X", &v2.Status{Code: v2.Code_OK}); err != nil {
		t.Errorf("OK status: %v", err)
	}
	err := checkStatus("X", nil)
	if !errors.Is(err, ErrInternal) {
		t.Errorf("missing status: %v, want INTERNAL_ERROR", err)
	}
	err = checkStatus("SendMessage", &v2.Status{Code: v2.Code_ILLEGAL_LITE_TOPIC, Message: "bad"})
	var se *StatusError
	if !errors.As(err, &se) || se.Op != "SendMessage" || se.Code != CodeIllegalLiteTopic || se.Message != "bad" {
		t.Errorf("checkStatus = %#v", err)
	}
}
