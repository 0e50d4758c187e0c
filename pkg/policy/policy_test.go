package policy

import (
	"fmt"
	"math/bits"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	for _, s := range []string{"local_durable", "majority_durable", "replica_durable(2)", "replica_accepted(5)"} {
		p, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if got := p.String(); got != s {
			t.Errorf("Parse(%q).String() = %q", s, got)
		}
	}
	if p, err := Parse(""); err != nil || p.Kind != LocalDurable {
		t.Errorf("Parse(\"\") = %+v, %v; want local_durable", p, err)
	}
	for _, bad := range []string{"majority", "replica_durable()", "replica_durable(0)", "replica_durable(-1)", "replica_durable(2", "replica_accepted(x)", "quorum"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted a bad stamp", bad)
		}
	}
}

// TestWTable pins W for every policy and E = 1..7 against the seed's rules,
// written out independently of the implementation.
func TestWTable(t *testing.T) {
	for e := 1; e <= 7; e++ {
		want := map[string]int{
			"":                 e,
			"local_durable":    e,
			"majority_durable": e/2 + 1,
		}
		for n := 1; n <= 9; n++ {
			capped := n
			if capped > e {
				capped = e
			}
			want[fmt.Sprintf("replica_durable(%d)", n)] = capped
			want[fmt.Sprintf("replica_accepted(%d)", n)] = capped
		}
		for stamp, w := range want {
			if got := StampW(stamp, e); got != w {
				t.Errorf("W(%q, E=%d) = %d, want %d", stamp, e, got, w)
			}
			if got := StampR(stamp, e); got != e-w+1 {
				t.Errorf("R(%q, E=%d) = %d, want %d", stamp, e, got, e-w+1)
			}
		}
	}
	// The seed's two worked examples.
	if StampW("local_durable", 3) != 3 || StampR("local_durable", 3) != 1 {
		t.Error("W = E must give R = 1")
	}
	if StampW("majority_durable", 3) != 2 || StampR("majority_durable", 3) != 2 {
		t.Error("3 copies on majority_durable must give W = 2, R = 2")
	}
}

func TestUnreadableStampIsEveryCopy(t *testing.T) {
	if got := StampW("bogus", 5); got != 5 {
		t.Errorf("StampW(bogus, 5) = %d, want 5", got)
	}
}

func TestDegenerateCounts(t *testing.T) {
	for _, p := range []Policy{{Kind: MajorityDurable}, {Kind: LocalDurable}, {Kind: ReplicaDurable, N: 2}} {
		if p.W(0) != 0 || p.R(0) != 0 {
			t.Errorf("%v with E=0: W=%d R=%d, want 0, 0", p, p.W(0), p.R(0))
		}
	}
}

// TestIntersection checks by brute force over all subsets of E <= 7 copies
// that every W-subset meets every R-subset, and that R is the smallest
// threshold with that property: with R-1 copies some confirmed record could
// be missing from every sealed copy.
func TestIntersection(t *testing.T) {
	policies := []Policy{{Kind: LocalDurable}, {Kind: MajorityDurable}}
	for n := 1; n <= 8; n++ {
		policies = append(policies, Policy{Kind: ReplicaDurable, N: n}, Policy{Kind: ReplicaAccepted, N: n})
	}
	for e := 1; e <= 7; e++ {
		var bySize [8][]uint
		for s := uint(0); s < 1<<e; s++ {
			bySize[bits.OnesCount(s)] = append(bySize[bits.OnesCount(s)], s)
		}
		meets := func(a, b int) bool {
			for _, x := range bySize[a] {
				for _, y := range bySize[b] {
					if x&y == 0 {
						return false
					}
				}
			}
			return true
		}
		for _, p := range policies {
			w, r := p.W(e), p.R(e)
			if w < 1 || w > e || r < 1 || r > e {
				t.Fatalf("%v E=%d: W=%d R=%d out of range", p, e, w, r)
			}
			if !meets(w, r) {
				t.Errorf("%v E=%d: some %d-set misses some %d-set", p, e, w, r)
			}
			if r > 1 && meets(w, r-1) {
				t.Errorf("%v E=%d: R=%d is not the smallest threshold", p, e, r)
			}
		}
	}
}

// TestNormalize: surrounding white space is ignored wherever a policy is
// read, and what brook stores and answers is the canonical form.
func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"  \t":                   "",
		"majority_durable":       "majority_durable",
		"majority_durable ":      "majority_durable",
		" local_durable":         "local_durable",
		"\treplica_durable(2)\n": "replica_durable(2)",
		" replica_accepted(3) ":  "replica_accepted(3)",
	} {
		got, err := Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
			continue
		}
		// The padded and the canonical stamp read alike on both sides of
		// the rule.
		for e := 1; e <= 7; e++ {
			if StampW(in, e) != StampW(got, e) || StampR(in, e) != StampR(got, e) {
				t.Errorf("stamp %q and %q differ in W or R at E=%d", in, got, e)
			}
		}
	}
	for _, bad := range []string{"majority", "majority durable", "MAJORITY_DURABLE", "replica_durable( 2)", "replica_durable(0) ", "local_durable,"} {
		if got, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%q) = %q, accepted a bad policy", bad, got)
		}
	}
}
