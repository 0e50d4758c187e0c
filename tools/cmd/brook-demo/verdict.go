package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/brook-streams/brook/tools/bench"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// delivery is one record the verifying reader received.
type delivery struct {
	Offset uint64
	ID     brookload.ID
	OK     bool // the record names an id
}

// verification is the verdict on the read-back: every confirmed record
// must be delivered exactly once, at the offset its confirm named.
type verification struct {
	Read int    // records read
	End  uint64 // the reader read every offset below End
	// Lost: confirmed, never read. Moved: confirmed at one offset, read at
	// another. Duplicates: records read at more than one offset.
	Lost, Moved, Duplicates int
	// Missing offsets below End that the reader never received (a hole
	// in the log); Malformed records name no id.
	Missing, Malformed int
	// Unconfirmed records were read but their publish got no confirm:
	// at-least-once allows them.
	Unconfirmed int
}

// OK is the verdict.
func (v verification) OK() bool {
	return v.Lost == 0 && v.Moved == 0 && v.Duplicates == 0 && v.Missing == 0 && v.Malformed == 0
}

// judge compares what was confirmed with what the reader read of the
// offsets [head, end).
func judge(confirms map[brookload.ID]confirmed, read []delivery, head, end uint64) verification {
	v := verification{Read: len(read), End: end}
	at := make(map[brookload.ID][]uint64, len(read))
	seen := make(map[uint64]bool, len(read))
	for _, d := range read {
		seen[d.Offset] = true
		if !d.OK {
			v.Malformed++
			continue
		}
		at[d.ID] = append(at[d.ID], d.Offset)
	}
	for off := head; off < end; off++ {
		if !seen[off] {
			v.Missing++
		}
	}
	for id, offs := range at {
		if len(offs) > 1 {
			v.Duplicates++
		}
		if _, ok := confirms[id]; !ok {
			v.Unconfirmed++
		}
	}
	for id, c := range confirms {
		offs, ok := at[id]
		switch {
		case !ok:
			v.Lost++
		case !slices.Contains(offs, c.Offset):
			v.Moved++
		}
	}
	return v
}

// summary is the demo's result.
type summary struct {
	Records  int
	Errors   int
	Resolved int // publishes found in the new owner's log (see brookload)
	Duration time.Duration
	Rate     float64
	P50, P99 time.Duration

	Victim   string
	KilledAt time.Duration // since publishing began
	// Unavailable is the time from the kill to the first confirm of a
	// publish begun after it; UnavailableKnown is false if there was none.
	Unavailable      time.Duration
	UnavailableKnown bool
	// FailoverTook is the time from the kill until stream.info first
	// showed the stream serving under a new owner.
	FailoverDone bool
	FailoverTook time.Duration
	NewOwner     string
	OldEpoch     uint64
	Epoch        uint64
	TraceID      string

	Verify    verification
	VerifyErr string

	Rejoin    brookload.Rejoin
	RejoinErr string
}

// summarizeRecords fills the publishing figures from the confirms.
func summarizeRecords(s *summary, confirms map[brookload.ID]confirmed, errors int, start, end, killAt, firstAfter time.Time) {
	s.Records, s.Errors, s.Duration = len(confirms), errors, end.Sub(start)
	lat := make([]time.Duration, 0, len(confirms))
	for _, c := range confirms {
		lat = append(lat, c.At.Sub(c.Sent))
		if c.Resolved {
			s.Resolved++
		}
	}
	if s.Duration > 0 {
		s.Rate = float64(len(confirms)) / s.Duration.Seconds()
	}
	s.P50, s.P99 = bench.Quantile(lat, 0.50), bench.Quantile(lat, 0.99)
	if !killAt.IsZero() {
		s.KilledAt = killAt.Sub(start)
		if !firstAfter.IsZero() {
			s.Unavailable, s.UnavailableKnown = firstAfter.Sub(killAt), true
		}
	}
}

// Pass is the overall verdict: the record check holds, the stream failed
// over without an operator, and the old owner came back as a follower
// without another recovery.
func (s summary) Pass() bool {
	return s.VerifyErr == "" && s.Verify.OK() && s.FailoverDone && s.UnavailableKnown &&
		s.RejoinErr == "" && s.Rejoin.WithoutRecovery()
}

// Problems lists why Pass is false.
func (s summary) Problems() []string {
	var p []string
	if s.VerifyErr != "" {
		p = append(p, "read-back failed: "+s.VerifyErr)
	} else if !s.Verify.OK() {
		p = append(p, "confirmed records not delivered exactly once at their offsets")
	}
	if !s.FailoverDone {
		p = append(p, "the stream did not serve again under a new owner")
	} else if !s.UnavailableKnown {
		p = append(p, "no publish begun after the kill was confirmed")
	}
	switch {
	case s.RejoinErr != "":
		p = append(p, "old owner did not rejoin: "+s.RejoinErr)
	case !s.Rejoin.WithoutRecovery():
		p = append(p, "old owner did not rejoin as a follower without another recovery")
	}
	return p
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// write prints the summary.
func (s summary) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n== summary\n")
	fmt.Fprintf(&b, "  records      %d confirmed in %.1f s (%.0f rec/s), %d publish errors; confirm latency p50 %s, p99 %s\n",
		s.Records, s.Duration.Seconds(), s.Rate, s.Errors, ms(s.P50), ms(s.P99))
	if s.Victim != "" {
		fail := "did not serve again"
		if s.FailoverDone {
			fail = fmt.Sprintf("serving again under %s at epoch %d (was %d) %d ms after the kill", s.NewOwner, s.Epoch, s.OldEpoch, s.FailoverTook.Milliseconds())
		}
		fmt.Fprintf(&b, "  failover     killed owner %s at %.1f s; %s\n", s.Victim, s.KilledAt.Seconds(), fail)
		if s.UnavailableKnown {
			fmt.Fprintf(&b, "  unavailable  %d ms of writes (kill to the first confirm of a publish begun after it)\n", s.Unavailable.Milliseconds())
		} else {
			fmt.Fprintf(&b, "  unavailable  until the end: no publish begun after the kill was confirmed\n")
		}
		if s.TraceID != "" {
			fmt.Fprintf(&b, "  trace        %s\n", s.TraceID)
		}
		if s.Resolved > 0 {
			fmt.Fprintf(&b, "  resolved     %d publishes the kill left unanswered were found in the new owner's log, not written again\n", s.Resolved)
		}
	}
	v := s.Verify
	if s.VerifyErr != "" {
		fmt.Fprintf(&b, "  verify       FAILED to read back: %s\n", s.VerifyErr)
	} else {
		fmt.Fprintf(&b, "  verify       %d records read below offset %d: lost %d, moved %d, duplicates %d, missing offsets %d, malformed %d; %d read without a confirm (at-least-once)\n",
			v.Read, v.End, v.Lost, v.Moved, v.Duplicates, v.Missing, v.Malformed, v.Unconfirmed)
	}
	r := s.Rejoin
	switch {
	case s.RejoinErr != "":
		fmt.Fprintf(&b, "  rejoin       FAILED: %s\n", s.RejoinErr)
	case s.Victim != "":
		fmt.Fprintf(&b, "  rejoin       %s follower %v after %d ms; epoch %d -> %d, history starts %d -> %d, recovery seen %v\n",
			r.Node, r.Follower, r.Took.Milliseconds(), r.EpochBefore, r.Epoch, r.StartsBefore, r.StartsAfter, r.RecoverySeen)
	}
	if s.Pass() {
		fmt.Fprintf(&b, "  verdict      PASS: every confirmed record delivered exactly once at its offset; failover without an operator; the old owner rejoined as a follower without another recovery\n")
	} else {
		fmt.Fprintf(&b, "  verdict      FAIL: %s\n", strings.Join(s.Problems(), "; "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
