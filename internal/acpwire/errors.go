package acpwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// RequestError is a JSON-RPC error, sent or received.
type RequestError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// Error is the error as compact JSON ({"code":…,"message":…,"data":…}).
func (e *RequestError) Error() string {
	if e == nil {
		return "<nil>"
	}
	type view RequestError
	if b, err := json.Marshal((*view)(e)); err == nil {
		return string(b)
	}
	if e.Data != nil {
		return fmt.Sprintf("code %d: %s (data: %v)", e.Code, e.Message, e.Data)
	}
	return fmt.Sprintf("code %d: %s", e.Code, e.Message)
}

// JSON-RPC error codes.
const (
	CodeInvalidRequest   = -32600
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternalError    = -32603
	CodeRequestCancelled = -32800
)

func NewInvalidRequest(data any) *RequestError {
	return &RequestError{Code: CodeInvalidRequest, Message: "Invalid request", Data: data}
}

func NewMethodNotFound(method string) *RequestError {
	return &RequestError{Code: CodeMethodNotFound, Message: "Method not found", Data: map[string]any{"method": method}}
}

func NewInvalidParams(data any) *RequestError {
	return &RequestError{Code: CodeInvalidParams, Message: "Invalid params", Data: data}
}

func NewInternalError(data any) *RequestError {
	return &RequestError{Code: CodeInternalError, Message: "Internal error", Data: data}
}

func NewRequestCancelled(data any) *RequestError {
	return &RequestError{Code: CodeRequestCancelled, Message: "Request cancelled", Data: data}
}

// ToRequestError makes any error a JSON-RPC error: a *RequestError as it
// is, a cancellation as "Request cancelled", anything else as an internal
// error carrying its text.
func ToRequestError(err error) *RequestError {
	if err == nil {
		return nil
	}
	if re := (*RequestError)(nil); errors.As(err, &re) {
		return re
	}
	if errors.Is(err, context.Canceled) {
		return NewRequestCancelled(map[string]any{"error": err.Error()})
	}
	return NewInternalError(map[string]any{"error": err.Error()})
}
