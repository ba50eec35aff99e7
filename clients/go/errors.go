package rmqs

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The API's error codes (ErrorDetail.code of api/openapi.yaml), and the
// client's own (CodeTimeout, CodeCanceled, CodeConnection, CodeClosed).
const (
	CodeInvalidArgument      = "invalid_argument"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeUIReadOnly           = "ui_read_only"
	CodeCrossOrigin          = "cross_origin"
	CodeHostNotAllowed       = "host_not_allowed"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeConflict             = "conflict"
	CodePayloadTooLarge      = "payload_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnavailable          = "unavailable"
	CodeStorageFull          = "storage_full"
	CodeSearchTimeout        = "search_timeout"
	CodeInternal             = "internal"

	// A request attempt past the client's per-request timeout.
	CodeTimeout = "timeout"
	// The caller's context was cancelled or its deadline passed
	// (errors.Is(err, context.Canceled / context.DeadlineExceeded) too).
	CodeCanceled = "canceled"
	// No answer after every retry (refused, reset, DNS...).
	CodeConnection = "connection"
	// The client was closed.
	CodeClosed = "closed"
	// An answer without a recognised code and an unmapped status.
	CodeUnknown = "unknown"
)

// APICodes lists every error code the API documents.
var APICodes = []string{
	CodeInvalidArgument, CodeUnauthorized, CodeForbidden, CodeUIReadOnly,
	CodeCrossOrigin, CodeHostNotAllowed, CodeNotFound, CodeMethodNotAllowed,
	CodeConflict, CodePayloadTooLarge, CodeUnsupportedMediaType,
	CodeUnavailable, CodeStorageFull, CodeSearchTimeout, CodeInternal,
}

// Sentinels for errors.Is: errors.Is(err, rmqs.ErrNotFound) is true for
// any *Error whose Code is not_found.
var (
	ErrInvalidArgument      = &Error{Code: CodeInvalidArgument}
	ErrUnauthorized         = &Error{Code: CodeUnauthorized}
	ErrForbidden            = &Error{Code: CodeForbidden}
	ErrUIReadOnly           = &Error{Code: CodeUIReadOnly}
	ErrCrossOrigin          = &Error{Code: CodeCrossOrigin}
	ErrHostNotAllowed       = &Error{Code: CodeHostNotAllowed}
	ErrNotFound             = &Error{Code: CodeNotFound}
	ErrMethodNotAllowed     = &Error{Code: CodeMethodNotAllowed}
	ErrConflict             = &Error{Code: CodeConflict}
	ErrPayloadTooLarge      = &Error{Code: CodePayloadTooLarge}
	ErrUnsupportedMediaType = &Error{Code: CodeUnsupportedMediaType}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
	ErrStorageFull          = &Error{Code: CodeStorageFull}
	ErrSearchTimeout        = &Error{Code: CodeSearchTimeout}
	ErrInternal             = &Error{Code: CodeInternal}
	ErrTimeout              = &Error{Code: CodeTimeout}
	ErrCanceled             = &Error{Code: CodeCanceled}
	ErrConnection           = &Error{Code: CodeConnection}
	ErrClosed               = &Error{Code: CodeClosed}
)

// ItemError is one invalid item of a batch (the `errors` list of a 400).
type ItemError struct {
	Index   int    `json:"index"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is every error the client returns.
type Error struct {
	// HTTP status; 0 when there was no answer.
	Status int
	// The API's error code, or one of the client's own.
	Code    string
	Message string
	// The request member at fault, if the service named one.
	Field string
	// A batch's per-item errors (400 on POST /schedule/batch).
	Errors []ItemError
	// From a Retry-After header (0 if none).
	RetryAfter time.Duration
	// The answer's body, as received.
	Body []byte
	// The cause: a net error, context.Canceled, ...
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rmqs: ")
	if e.Status != 0 {
		b.WriteString(strconv.Itoa(e.Status))
		b.WriteString(" ")
	}
	b.WriteString(e.Code)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, " (field %s)", e.Field)
	}
	if e.Err != nil && e.Message == "" {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause (errors.Is(err, context.Canceled) works).
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinels by code: errors.Is(err, rmqs.ErrConflict).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t == e {
		return true
	}
	return t.Status == 0 && t.Message == "" && t.Field == "" && t.Err == nil && t.Code != "" && t.Code == e.Code
}

var codeByStatus = map[int]string{
	400: CodeInvalidArgument,
	401: CodeUnauthorized,
	403: CodeForbidden,
	404: CodeNotFound,
	405: CodeMethodNotAllowed,
	409: CodeConflict,
	413: CodePayloadTooLarge,
	415: CodeUnsupportedMediaType,
	500: CodeInternal,
	503: CodeUnavailable,
}

func errorFromAnswer(status int, body []byte, h http.Header) *Error {
	e := &Error{Status: status, Body: body, RetryAfter: parseRetryAfter(h.Get("Retry-After"))}
	var doc struct {
		Error *struct {
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Field   *string `json:"field"`
		} `json:"error"`
		Errors []ItemError `json:"errors"`
	}
	if json.Unmarshal(body, &doc) == nil && doc.Error != nil {
		e.Code = doc.Error.Code
		e.Message = doc.Error.Message
		if doc.Error.Field != nil {
			e.Field = *doc.Error.Field
		}
		e.Errors = doc.Errors
	}
	if e.Code == "" {
		if c, ok := codeByStatus[status]; ok {
			e.Code = c
		} else {
			e.Code = CodeUnknown
		}
	}
	if e.Message == "" {
		s := strings.TrimSpace(string(body))
		if len(s) > 300 {
			s = s[:300]
		}
		if s == "" {
			s = fmt.Sprintf("HTTP %d", status)
		}
		e.Message = s
	}
	return e
}

func parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
