// Package policy holds brook's one rule for W: the function that turns the
// confirm policy stamped on a stream assignment, plus the assignment's copy
// count E, into W, the number of copies that must hold a record durably
// before the owner confirms it.
//
// The stream host confirms by W and the coordinator's recovery worker derives
// the seal threshold R = E - W + 1 from the same function, so the two cannot
// disagree (seed, "One rule for W"). Any W copies and any R copies share at
// least one copy because W + R = E + 1; that shared copy is what makes
// promoting the furthest sealed copy safe.
package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// The policy kinds a stamp can name.
const (
	// LocalDurable means every copy. It is also what an assignment placed
	// before streams had a policy carries (an empty stamp): a replicated
	// stream has no owner-only mode.
	LocalDurable = "local_durable"
	// MajorityDurable means floor(E/2)+1 copies. It is the cluster default.
	MajorityDurable = "majority_durable"
	// ReplicaDurable means n copies hold the record durably, written
	// "replica_durable(n)".
	ReplicaDurable = "replica_durable"
	// ReplicaAccepted is read exactly as ReplicaDurable: an accepted count is
	// read as a durable one.
	ReplicaAccepted = "replica_accepted"
)

// Default is the policy the controller stamps when the cluster sets none.
const Default = MajorityDurable

// Policy is a parsed confirm policy. The zero value is LocalDurable.
type Policy struct {
	Kind string // one of the kind constants; "" reads as LocalDurable
	N    int    // the count for ReplicaDurable and ReplicaAccepted
}

// String renders the policy in its stamp form, the inverse of Parse.
func (p Policy) String() string {
	switch p.Kind {
	case ReplicaDurable, ReplicaAccepted:
		return p.Kind + "(" + strconv.Itoa(p.N) + ")"
	case "":
		return LocalDurable
	default:
		return p.Kind
	}
}

// Parse reads a policy stamp. Surrounding white space is ignored, here and
// so everywhere a policy is read (Normalize, StampW, StampR). The empty
// stamp is LocalDurable. Counted policies must name a count of at least 1; a
// count above the replica set is accepted here and capped by W.
func Parse(stamp string) (Policy, error) {
	s := strings.TrimSpace(stamp)
	switch s {
	case "", LocalDurable:
		return Policy{Kind: LocalDurable}, nil
	case MajorityDurable:
		return Policy{Kind: MajorityDurable}, nil
	}
	for _, kind := range []string{ReplicaDurable, ReplicaAccepted} {
		rest, ok := strings.CutPrefix(s, kind+"(")
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(rest, ")")
		if !ok {
			return Policy{}, fmt.Errorf("policy %q: missing closing parenthesis", stamp)
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 {
			return Policy{}, fmt.Errorf("policy %q: count must be a whole number of at least 1", stamp)
		}
		return Policy{Kind: kind, N: n}, nil
	}
	return Policy{}, fmt.Errorf("policy %q: unknown; want %s, %s, %s(n) or %s(n)",
		stamp, LocalDurable, MajorityDurable, ReplicaDurable, ReplicaAccepted)
}

// Normalize returns a policy read from outside (a create request, a flag, a
// configuration file) in the one form brook stores on streams and
// assignments and answers: surrounding white space removed and the policy
// written as String renders it, so "majority_durable " is stored as
// "majority_durable". A policy that Parse refuses is an error. An empty or
// blank policy stays empty: on a create it means the cluster default.
func Normalize(policy string) (string, error) {
	if strings.TrimSpace(policy) == "" {
		return "", nil
	}
	p, err := Parse(policy)
	if err != nil {
		return "", err
	}
	return p.String(), nil
}

// W returns how many of the e copies, the owner included, must hold a record
// durably before it is confirmed under p. It is at least 1 and at most e for
// any e >= 1 (an assignment always has its owner); for e < 1 it returns 0.
func (p Policy) W(e int) int {
	if e < 1 {
		return 0
	}
	var w int
	switch p.Kind {
	case MajorityDurable:
		w = e/2 + 1
	case ReplicaDurable, ReplicaAccepted:
		w = p.N
	default: // LocalDurable, the empty stamp, or anything unreadable: every copy.
		w = e
	}
	return min(max(w, 1), e)
}

// R returns the seal threshold for e copies under p: how many copies recovery
// must seal before it may promote the furthest of them. R = E - W + 1.
func (p Policy) R(e int) int {
	if e < 1 {
		return 0
	}
	return e - p.W(e) + 1
}

// StampW is W for a stamp as found on an assignment. An unreadable stamp
// reads as LocalDurable (every copy), which is the strictest confirm rule, and
// both sides of the rule read it the same way.
func StampW(stamp string, e int) int {
	p, err := Parse(stamp)
	if err != nil {
		p = Policy{Kind: LocalDurable}
	}
	return p.W(e)
}

// StampR is R for a stamp as found on an assignment: E - StampW + 1.
func StampR(stamp string, e int) int {
	if e < 1 {
		return 0
	}
	return e - StampW(stamp, e) + 1
}
