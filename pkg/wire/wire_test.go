package wire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestValidName(t *testing.T) {
	for _, s := range []string{"a", "orders", "node-1", "A_b-C9", strings.Repeat("x", wire.MaxNameLen)} {
		if err := wire.ValidName("stream", s); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", s, err)
		}
	}
	for _, s := range []string{"", strings.Repeat("x", wire.MaxNameLen+1), "a.b", "a b", "*", ">", "a/b", "ü", "a\x00"} {
		err := wire.ValidName("stream", s)
		if err == nil {
			t.Errorf("ValidName(%q) = nil, want an error", s)
			continue
		}
		if got := wire.CodeOf(err); got != wire.CodeBadRequest {
			t.Errorf("ValidName(%q) code %q, want %q", s, got, wire.CodeBadRequest)
		}
		if !strings.Contains(err.Error(), "stream name") {
			t.Errorf("ValidName(%q) = %q, want the kind in the message", s, err)
		}
	}
}

func TestAssignmentCopiesAndIncludes(t *testing.T) {
	a := wire.Assignment{Stream: "s", Owner: "n1", Followers: []string{"n2", "n3"}}
	if got := a.Copies(); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("Copies() = %v", got)
	}
	// Copies must not alias Followers: appending the owner in front of a
	// followers slice with spare capacity would otherwise corrupt it.
	followers := make([]string, 2, 8)
	copy(followers, []string{"n2", "n3"})
	b := wire.Assignment{Owner: "n1", Followers: followers}
	c := b.Copies()
	c[1] = "changed"
	if b.Followers[0] != "n2" {
		t.Fatalf("Copies() aliases Followers: %v", b.Followers)
	}
	if got := (wire.Assignment{Owner: "solo"}).Copies(); !slices.Equal(got, []string{"solo"}) {
		t.Fatalf("Copies() of an owner-only assignment = %v", got)
	}
	for node, want := range map[string]bool{"n1": true, "n2": true, "n3": true, "n4": false, "": false} {
		if got := a.Includes(node); got != want {
			t.Errorf("Includes(%q) = %v, want %v", node, got, want)
		}
	}
}

func TestCodeOfAndAsError(t *testing.T) {
	we := wire.Errorf(wire.CodeNotOwner, "node %s does not own %s", "n2", "orders")
	if we.Error() != "not_owner: node n2 does not own orders" {
		t.Fatalf("Error() = %q", we.Error())
	}
	wrapped := fmt.Errorf("publish: %w", we)
	if got := wire.CodeOf(wrapped); got != wire.CodeNotOwner {
		t.Errorf("CodeOf(wrapped) = %q", got)
	}
	if got := wire.AsError(wrapped); got != we {
		t.Errorf("AsError(wrapped) = %v, want the same *Error", got)
	}
	plain := io.ErrUnexpectedEOF
	if got := wire.CodeOf(plain); got != wire.CodeInternal {
		t.Errorf("CodeOf(plain) = %q", got)
	}
	ae := wire.AsError(fmt.Errorf("read: %w", plain))
	if ae.Code != wire.CodeInternal || ae.Message != "read: unexpected EOF" {
		t.Errorf("AsError(plain) = %+v", ae)
	}
	if !errors.Is(fmt.Errorf("x: %w", ae), ae) {
		t.Error("an *Error is not found by errors.Is through wrapping")
	}
}

// TestErrorReplyJSON pins the one error shape: {"error":{"code","message"}},
// with copies only on a confirm timeout.
func TestErrorReplyJSON(t *testing.T) {
	b, err := json.Marshal(wire.ErrorReply{Error: wire.Errorf(wire.CodeSealed, "sealed")})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"error":{"code":"sealed","message":"sealed"}}` {
		t.Fatalf("got %s", b)
	}
	var back wire.ErrorReply
	if err := json.Unmarshal([]byte(`{"error":{"code":"confirm_timeout","message":"m","copies":1}}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Error.Code != wire.CodeConfirmTimeout || back.Error.Copies == nil || *back.Error.Copies != 1 {
		t.Fatalf("decoded %+v", back.Error)
	}
}

// TestDecodeErrorReply: the one reading of a reply's error, with and
// without the header's code, of a readable error body, a result and
// bytes that are not JSON.
func TestDecodeErrorReply(t *testing.T) {
	for _, c := range []struct {
		name, code, body string
		want             *wire.Error
	}{
		{"body", "", `{"error":{"code":"not_owner","message":"h2 owns it"}}`, &wire.Error{Code: "not_owner", Message: "h2 owns it"}},
		{"body wins over the header", "sealed", `{"error":{"code":"not_owner","message":"m"}}`, &wire.Error{Code: "not_owner", Message: "m"}},
		{"code from the header", "sealed", `{"error":{"message":"m"}}`, &wire.Error{Code: "sealed", Message: "m"}},
		{"header, no readable body", "overloaded", "\x00\x01", &wire.Error{Code: "overloaded", Message: "\x00\x01"}},
		{"header, a JSON result", "overloaded", `{"offset":3}`, &wire.Error{Code: "overloaded", Message: `{"offset":3}`}},
		{"header, an empty body", "overloaded", "", &wire.Error{Code: "overloaded", Message: ""}},
		{"header, a null error", "overloaded", `{"error":null}`, &wire.Error{Code: "overloaded", Message: `{"error":null}`}},
		{"header, a malformed error", "overloaded", `{"error":{"code":5}}`, &wire.Error{Code: "overloaded", Message: `{"error":{"code":5}}`}},
		{"a malformed error alone", "", `{"error":{"code":5}}`, nil},
		{"an error without a code, no header", "", `{"error":{"message":"m"}}`, &wire.Error{Code: "", Message: "m"}},
		{"a JSON result", "", `{"offset":3,"errors":[]}`, nil},
		{"a binary result", "", "\x00\x01", nil},
		{"an empty body", "", "", nil},
		// encoding/json matches member names case-insensitively and after
		// unescaping them: such a member is an error member too.
		{"a member named in upper case", "", `{"ERROR":{"code":"not_owner","message":"m"}}`, &wire.Error{Code: "not_owner", Message: "m"}},
		{"a member named with an escape", "", `{"\u0065rror":{"code":"not_owner","message":"m"}}`, &wire.Error{Code: "not_owner", Message: "m"}},
		{"a nested error member", "", `{"replies":[{"error":{"code":"sealed"}}]}`, nil},
		{"an error in a value", "", `{"stream":"error","note":"ERROR"}`, nil},
	} {
		got := wire.DecodeErrorReply(c.code, []byte(c.body))
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: DecodeErrorReply(%q, %q) = %+v, want %+v", c.name, c.code, c.body, got, c.want)
		}
	}
}

// BenchmarkDecodeErrorReply: a result of a few hundred kilobytes without
// the header (an assignment pull's page, a stream list's), which only a
// scan reads.
func BenchmarkDecodeErrorReply(b *testing.B) {
	type item struct {
		Stream, Owner string
		Epoch         uint64
		Followers     []string
	}
	items := make([]item, 2000)
	for i := range items {
		items[i] = item{Stream: fmt.Sprintf("mass-%05d", i), Owner: "h2", Epoch: 3, Followers: []string{"h3", "h4"}}
	}
	data, err := json.Marshal(map[string]any{"version": 7, "assignments": items})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if e := wire.DecodeErrorReply("", data); e != nil {
			b.Fatal(e)
		}
	}
}

func TestSubjects(t *testing.T) {
	for got, want := range map[string]string{
		wire.AdminSubject(wire.VerbRecoveryAcceptLoss): "brook.admin.recovery.accept-loss",
		wire.HeartbeatSubject("n1"):                    "brook.hb.n1",
		wire.AssignNoticeSubject("n1"):                 "brook.assign.n1",
		wire.SealSubject("n1"):                         "brook.host.n1.seal",
		wire.SealBatchSubject("n1"):                    "brook.host.n1.seals",
		wire.HostProbeSubject("n1"):                    "brook.host.n1.probe",
		wire.PublishSubject("orders"):                  "brook.s.orders.pub",
		wire.FetchSubject("orders"):                    "brook.s.orders.fetch",
		wire.CommitSubject("orders"):                   "brook.s.orders.commit",
		wire.OwnerNoticeSubject("orders", "n2"):        "brook.s.orders.owner.n2",
		wire.OwnerNoticeWildcard("orders"):             "brook.s.orders.owner.*",
		wire.ReplicationSubject("orders", 7, "n2"):     "brook.s.orders.repl.7.n2",
		wire.ReplicationWildcard("orders", 7):          "brook.s.orders.repl.7.*",
		wire.HostLeaveSubject("n1"):                    "brook.host.n1.leave",
		wire.HostInbox("n1"):                           "_INBOX.host.n1",
	} {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
	if n := wire.ReplicationNode(wire.ReplicationSubject("orders", 7, "n2")); n != "n2" {
		t.Errorf("ReplicationNode = %q, want n2", n)
	}
	for subj, want := range map[string]string{
		wire.HostLeaveSubject("h-1"): "h-1",
		"brook.host.h1.seal":         "",
		"brook.host..leave":          "",
		"brook.host.a.b.leave":       "",
		"brook.admin.node.leave":     "",
	} {
		if n, ok := wire.HostLeaveNode(subj); n != want || ok != (want != "") {
			t.Errorf("HostLeaveNode(%q) = %q %v, want %q", subj, n, ok, want)
		}
	}
}
