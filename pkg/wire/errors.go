package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Error codes are stable and machine-readable; messages are for people.
const (
	CodeBadRequest      = "bad_request"       // malformed JSON, unknown field, invalid value
	CodeNotFound        = "not_found"         // no such stream, node or recovery
	CodeExists          = "exists"            // stream already exists
	CodeConflict        = "conflict"          // a guarded write lost to a newer version
	CodeUnavailable     = "unavailable"       // no quorum, not enough live nodes, not ready
	CodeOutcomeUnknown  = "outcome_unknown"   // a write was proposed but its outcome is unknown (it may yet commit); read the state before repeating it
	CodeStreamUnknown   = "stream_unknown"    // this host holds no copy of the stream
	CodeNotOwner        = "not_owner"         // this host is not the stream's owner
	CodeSealed          = "sealed"            // the copy is sealed for a recovery
	CodePayloadTooLarge = "payload_too_large" // a record over the host's limit
	CodeConfirmTimeout  = "confirm_timeout"   // fewer than W copies held the record in time; not confirmed
	CodeShuttingDown    = "shutting_down"     // the host is stopping
	CodeStaleEpoch      = "stale_epoch"       // a request from another epoch
	CodeDiverged        = "diverged"          // a follower's log does not match the owner's below its tail (digests differ)
	CodeDuplicate       = "duplicate"         // producer sequence already written (reply carries the offset)
	CodeRecovering      = "recovering"        // the stream is failing over; retry
	CodeOverloaded      = "overloaded"        // the host is at its cap of requests in flight; retry after a backoff
	CodeNotEnoughCopies = "not_enough_copies" // the assignment holds fewer copies than the stream's min_copies; not confirmed, retry
	CodeTimeout         = "timeout"           // a planned step did not finish in time; nothing changed
	CodeInternal        = "internal"          // a bug or a storage failure; see the host's log
	CodeStreamLimit     = "stream_limit"      // the cluster holds the coordinators' maximum of streams (--max-streams)
	CodeHostLimit       = "host_limit"        // too few live hosts hold fewer copies than the coordinators' maximum per host (--max-copies-per-host)
)

// Error is the one error reply shape of every request-reply exchange.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Copies is set on CodeConfirmTimeout: how many copies held the record.
	Copies *int `json:"copies,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorReply is the JSON body of a failed request.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// DecodeErrorReply is the one reading of a reply's error. code is the
// code the reply's Brook-Error header carries ("" without one; a
// data-plane refusal carries it, so that a binary result needs no JSON
// probe), data its body. It returns the body's error (an ErrorReply),
// its code taken from code when the body has none; an error with code and
// the body as its message when the body holds no readable error; and nil
// when code is "" and the body holds no error (a JSON result never has a
// top-level "error" member).
//
// A result without the header is told apart without decoding it: a body
// in which no "error" member can be written (no "error" in any case, no
// escape that could spell one) holds no error. So a result of megabytes,
// an assignment pull's page or a stream list's, is scanned once, not
// parsed twice (issue 17: the second parse was 1% of the machine in a
// 10,000-stream failover).
func DecodeErrorReply(code string, data []byte) *Error {
	if code == "" && !mayHoldErrorMember(data) {
		return nil
	}
	return decodeErrorBody(code, data)
}

// decodeErrorBody is DecodeErrorReply with every body decoded.
func decodeErrorBody(code string, data []byte) *Error {
	var er ErrorReply
	if json.Unmarshal(data, &er) == nil && er.Error != nil {
		if er.Error.Code == "" {
			er.Error.Code = code
		}
		return er.Error
	}
	if code == "" {
		return nil
	}
	return &Error{Code: code, Message: string(data)}
}

// mayHoldErrorMember reports whether JSON data may have a member that
// decodes into ErrorReply.Error: encoding/json matches a member's name to
// the field's "error" case-insensitively (and "error" has no letter whose
// case folding leaves ASCII), after unescaping it. So a body without a
// backslash and without "error" in any case has no such member.
func mayHoldErrorMember(data []byte) bool {
	if bytes.IndexByte(data, '\\') >= 0 {
		return true
	}
	for i := 0; i+5 <= len(data); i++ {
		// b|0x20 is b's lower case for a letter, and equals a lower-case
		// letter only for that letter in either case.
		if d := data[i : i+5]; d[0]|0x20 == 'e' && d[1]|0x20 == 'r' && d[2]|0x20 == 'r' && d[3]|0x20 == 'o' && d[4]|0x20 == 'r' {
			return true
		}
	}
	return false
}

// CodeOf returns the code of err if it is or wraps an *Error, and
// CodeInternal otherwise.
func CodeOf(err error) string {
	var we *Error
	if errors.As(err, &we) {
		return we.Code
	}
	return CodeInternal
}

// AsError returns err as an *Error, wrapping any other error as CodeInternal.
func AsError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
