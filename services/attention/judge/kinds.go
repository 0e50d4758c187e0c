package judge

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// stream judges one stream: every kind that concerns a stream.
func (j *judging) stream(s wire.StreamInfo, mem *Memory) []found {
	var out []found
	r := s.Recovery

	// The assignment that holds the stream's data: during a recovery the
	// old one, whose copies are being sealed.
	a := s.Assignment
	if r != nil {
		a = r.Old
	}
	ownerOnlyLost := false
	if a.Owner != "" && len(a.Followers) == 0 {
		if f, ok := j.ownerOnly(s, a); ok {
			out = append(out, f)
			ownerOnlyLost = true
		}
	}
	if r != nil && r.Wait != nil {
		switch r.Wait.Kind {
		case WaitConfirmedPrefix:
			if f, ok := j.waitPrefix(s, r); ok {
				out = append(out, f)
			}
		case WaitAnswers:
			// For an owner-only stream the one answer missing is its
			// owner's, which the owner-only entry already says.
			if !ownerOnlyLost {
				out = append(out, j.waitAnswers(s, r))
			}
		}
	}
	if s.AcceptedLoss != nil {
		out = append(out, acceptedLoss(s))
	}
	if s.UnderReplicated != nil {
		out = append(out, underReplicated(s))
	}
	out = append(out, j.sealedLeftOut(s)...)

	// A stream that recovers or waits for its only copy does not serve, and
	// its entries above say why; confirm and lag rules apply to a serving
	// assignment.
	if r == nil && !ownerOnlyLost && s.Assignment.Owner != "" {
		if f, ok := j.belowPolicy(s); ok {
			out = append(out, f)
		}
		out = append(out, j.followerLag(s, mem)...)
	}
	return out
}

// latestStart is the start with the highest epoch, or nil.
func latestStart(starts []wire.HistoryStart) *wire.HistoryStart {
	var best *wire.HistoryStart
	for i := range starts {
		if best == nil || starts[i].Epoch > best.Epoch {
			best = &starts[i]
		}
	}
	return best
}

// waitPrefix: a recovery waits for a copy at or past the latest history
// start. Quiet while a live copy of the old assignment has published nothing
// (it may hold the prefix and answer the next seal).
func (j *judging) waitPrefix(s wire.StreamInfo, r *wire.PendingRecovery) (found, bool) {
	w := r.Wait
	start := w.Start
	if start == nil {
		start = latestStart(s.Starts)
	}
	bestTail, bestNode := uint64(0), ""
	if w.BestNode != "" && j.node(w.BestNode).liveness != down {
		bestTail, bestNode = w.BestTail, w.BestNode
	}
	for _, n := range r.Old.Copies() {
		o := j.observe(n, s.Stream, s.StreamID)
		if o.silent() {
			return found{}, false
		}
		// A copy that did not answer the worker's last seal round is not
		// evidence of a live tail, even while its last heartbeat is
		// younger than the TTL: it is typically the copy just lost.
		if o.published() && !slices.Contains(w.Unanswered, n) && (bestNode == "" || o.cs.RecordTail > bestTail) {
			bestTail, bestNode = o.cs.RecordTail, n
		}
	}
	fig := map[string]any{
		"fence_epoch": r.Old.Epoch + 1,
		"old_owner":   r.Old.Owner,
		"transition":  r.Transition,
		"reason":      r.Reason,
		"best_tail":   bestTail,
		"best_node":   bestNode,
		// When the controller recorded the recovery and when the worker
		// last tried, as the coordinator reports them.
		"recovery_since_ms": r.Since,
		"wait_at_ms":        w.AtMS,
	}
	headline := fmt.Sprintf("recovery of %s waits for a copy holding the confirmed prefix", s.Stream)
	node := ""
	if start != nil {
		node = start.Node
		fig["start_record_tail"] = start.RecordTail
		fig["start_cursor_tail"] = start.CursorTail
		fig["start_epoch"] = start.Epoch
		fig["start_node"] = start.Node
		missing := uint64(0)
		if bestTail < start.RecordTail {
			missing = start.RecordTail - bestTail
		}
		fig["missing_records"] = missing
		headline = fmt.Sprintf("recovery of %s waits for a copy holding the confirmed prefix: %d records (start of epoch %d on %s); best live tail %d%s",
			s.Stream, start.RecordTail, start.Epoch, start.Node, bestTail, onNode(bestNode))
	}
	return found{
		entry: wire.AttentionEntry{
			Kind:     wire.AttentionWaitPrefix,
			Severity: wire.SeverityCritical,
			Stream:   s.Stream,
			Node:     node,
			Headline: headline,
			Figures:  fig,
		},
		key: entryKey(wire.AttentionWaitPrefix, s.Stream, s.StreamID, ""),
	}, true
}

func onNode(n string) string {
	if n == "" {
		return ""
	}
	return " on " + n
}

// waitAnswers: a recovery has fewer than R seal answers.
func (j *judging) waitAnswers(s wire.StreamInfo, r *wire.PendingRecovery) found {
	w := r.Wait
	e := len(r.Old.Copies())
	needed := w.Needed
	if needed <= 0 {
		needed = policy.StampR(r.Old.Policy, e)
	}
	unanswered := slices.Clone(w.Unanswered)
	slices.Sort(unanswered)
	if unanswered == nil {
		unanswered = []string{}
	}
	return found{
		entry: wire.AttentionEntry{
			Kind:     wire.AttentionWaitAnswers,
			Severity: wire.SeverityCritical,
			Stream:   s.Stream,
			Headline: fmt.Sprintf("recovery of %s waits for seal answers: %d of %d needed answered; no answer from %s",
				s.Stream, w.Answered, needed, listOrNone(unanswered)),
			Figures: map[string]any{
				"answered":          w.Answered,
				"needed":            needed,
				"unanswered":        unanswered,
				"copies":            e,
				"fence_epoch":       r.Old.Epoch + 1,
				"old_owner":         r.Old.Owner,
				"transition":        r.Transition,
				"reason":            r.Reason,
				"recovery_since_ms": r.Since,
				"wait_at_ms":        w.AtMS,
			},
		},
		key: entryKey(wire.AttentionWaitAnswers, s.Stream, s.StreamID, ""),
	}
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none listed"
	}
	return strings.Join(xs, ", ")
}

// belowPolicy: fewer than W copies of the assignment are live and publish a
// current tail (at the assignment's epoch, not sealed), so publishes cannot
// confirm. A silent copy counts as possibly current.
func (j *judging) belowPolicy(s wire.StreamInfo) (found, bool) {
	a := s.Assignment
	copies := a.Copies()
	e := len(copies)
	w := policy.StampW(a.Policy, e)
	var current []string
	silent := 0
	notCurrent := map[string]any{}
	for _, n := range copies {
		o := j.observe(n, s.Stream, s.StreamID)
		switch {
		case o.silent():
			silent++
		case o.st.liveness == down:
			notCurrent[n] = "node " + o.st.why
		case o.cs.Sealed:
			notCurrent[n] = fmt.Sprintf("sealed at epoch %d", o.cs.Epoch)
		case o.cs.Epoch != a.Epoch:
			notCurrent[n] = fmt.Sprintf("at epoch %d", o.cs.Epoch)
		default:
			current = append(current, n)
		}
	}
	if len(current)+silent >= w {
		return found{}, false
	}
	slices.Sort(current)
	if current == nil {
		current = []string{}
	}
	return found{
		entry: wire.AttentionEntry{
			Kind:     wire.AttentionBelowPolicy,
			Severity: wire.SeverityCritical,
			Stream:   s.Stream,
			Headline: fmt.Sprintf("%s is below its confirm policy %s: %d of %d copies current, %d needed; publishes cannot confirm",
				s.Stream, policyName(a.Policy), len(current), e, w),
			Figures: map[string]any{
				"w":             w,
				"copies":        e,
				"current":       len(current),
				"current_nodes": current,
				"not_current":   notCurrent,
				"policy":        policyName(a.Policy),
				"epoch":         a.Epoch,
			},
		},
		key: entryKey(wire.AttentionBelowPolicy, s.Stream, s.StreamID, ""),
	}, true
}

func policyName(stamp string) string {
	if p, err := policy.Parse(stamp); err == nil {
		return p.String()
	}
	return stamp
}

// underReplicated: the assignment holds fewer copies than the stream's E
// (wire.StreamInfo.UnderReplicated, the coordinator's one rule, which its
// metrics count by too). Critical when one more loss would lose confirmed
// records (W is now 1) or when the stream's floor refuses its publishes; a
// warning otherwise. It goes once the copies are back.
func underReplicated(s wire.StreamInfo) found {
	u := s.UnderReplicated
	sev := wire.SeverityWarning
	headline := fmt.Sprintf("%s holds %d of its %d copies (W=%d now)", s.Stream, u.Copies, s.Copies, u.W)
	if u.LossLosesConfirmed {
		sev = wire.SeverityCritical
		headline += "; one more loss would lose confirmed records"
	}
	if u.PublishesRefused {
		sev = wire.SeverityCritical
		headline += fmt.Sprintf("; publishes are refused below min_copies %d", s.MinCopies)
	}
	return found{
		entry: wire.AttentionEntry{
			Kind:     wire.AttentionUnderRepl,
			Severity: sev,
			Stream:   s.Stream,
			Node:     s.Assignment.Owner,
			Headline: headline,
			Figures: map[string]any{
				"copies":                    u.Copies,
				"copies_wanted":             s.Copies,
				"w":                         u.W,
				"policy":                    policyName(s.Assignment.Policy),
				"under_replicated_since_ms": u.SinceMS,
				"loss_loses_confirmed":      u.LossLosesConfirmed,
				"min_copies":                s.MinCopies,
				"publishes_refused":         u.PublishesRefused,
				"copy_nodes":                s.Assignment.Copies(),
				"epoch":                     s.Assignment.Epoch,
			},
		},
		key: entryKey(wire.AttentionUnderRepl, s.Stream, s.StreamID, ""),
	}
}

// sealedLeftOut: a live node publishes a sealed copy of the stream but is in
// neither the assignment nor a pending recovery.
func (j *judging) sealedLeftOut(s wire.StreamInfo) []found {
	var out []found
	for _, n := range j.heard {
		if s.Assignment.Includes(n) {
			continue
		}
		if r := s.Recovery; r != nil && (r.Old.Includes(n) || r.Proposal.Includes(n)) {
			continue
		}
		o := j.observe(n, s.Stream, s.StreamID)
		if !o.published() || !o.cs.Sealed {
			continue
		}
		out = append(out, found{
			entry: wire.AttentionEntry{
				Kind:     wire.AttentionSealedLeft,
				Severity: wire.SeverityWarning,
				Stream:   s.Stream,
				Node:     n,
				Headline: fmt.Sprintf("sealed copy of %s on %s (record tail %d, epoch %d) is left out of the assignment at epoch %d",
					s.Stream, n, o.cs.RecordTail, o.cs.Epoch, s.Assignment.Epoch),
				Figures: map[string]any{
					"record_tail":      o.cs.RecordTail,
					"cursor_tail":      o.cs.CursorTail,
					"copy_epoch":       o.cs.Epoch,
					"assignment_epoch": s.Assignment.Epoch,
				},
			},
			key: entryKey(wire.AttentionSealedLeft, s.Stream, s.StreamID, n),
		})
	}
	return out
}

// acceptedLoss: an accepted owner loss landed below the confirmed prefix; it
// stays until an operator clears it (the coordinator drops AcceptedLoss).
func acceptedLoss(s wire.StreamInfo) found {
	al := s.AcceptedLoss
	below := uint64(0)
	if al.RecordTail < al.StartTail {
		below = al.StartTail - al.RecordTail
	}
	return found{
		entry: wire.AttentionEntry{
			Kind:     wire.AttentionAcceptedLoss,
			Severity: wire.SeverityWarning,
			Stream:   s.Stream,
			Node:     al.Node,
			Headline: fmt.Sprintf("accepted owner loss moved %s to %s at record %d, below the confirmed prefix %d: up to %d confirmed records may be lost; clear with attention.clear",
				s.Stream, al.Node, al.RecordTail, al.StartTail, below),
			Figures: map[string]any{
				"epoch":            al.Epoch,
				"record_tail":      al.RecordTail,
				"start_tail":       al.StartTail,
				"records_below":    below,
				"accepted_at_ms":   al.AtMS,
				"accepted_onto":    al.Node,
				"current_owner":    s.Assignment.Owner,
				"assignment_epoch": s.Assignment.Epoch,
			},
		},
		// A later accepted loss at another epoch is a new warning.
		key: entryKey(wire.AttentionAcceptedLoss, s.Stream, s.StreamID, fmt.Sprintf("epoch=%d", al.Epoch)),
	}
}

// ownerOnly: a stream whose one copy is on a node that is down waits for it.
func (j *judging) ownerOnly(s wire.StreamInfo, a wire.Assignment) (found, bool) {
	st := j.node(a.Owner)
	if st.liveness != down {
		return found{}, false
	}
	fig := map[string]any{
		"owner":      a.Owner,
		"epoch":      a.Epoch,
		"why":        st.why,
		"node_state": st.coord,
	}
	if ni, ok := j.coord[a.Owner]; ok {
		fig["last_seen_ms"] = ni.LastSeenMS
	}
	for _, ct := range s.CopyTails {
		if ct.Node == a.Owner && ct.Published {
			fig["last_record_tail"] = ct.RecordTail
		}
	}
	return found{
		entry: wire.AttentionEntry{
			Kind:     wire.AttentionOwnerOnly,
			Severity: wire.SeverityCritical,
			Stream:   s.Stream,
			Node:     a.Owner,
			Headline: fmt.Sprintf("owner-only stream %s waits for its lost owner %s (%s)", s.Stream, a.Owner, st.why),
			Figures:  fig,
		},
		key: entryKey(wire.AttentionOwnerOnly, s.Stream, s.StreamID, a.Owner),
	}, true
}

// followerLag: a current follower whose record tail has stood still below
// its owner's for at least the lag window. A follower that advances, however
// slowly, restarts its window; one that catches up clears it.
func (j *judging) followerLag(s wire.StreamInfo, mem *Memory) []found {
	a := s.Assignment
	owner := j.observe(a.Owner, s.Stream, s.StreamID)
	ownerCurrent := owner.published() && owner.cs.Epoch == a.Epoch && !owner.cs.Sealed
	var out []found
	for _, f := range a.Followers {
		tr, isNew := mem.track(lagKey{stream: s.Stream, streamID: s.StreamID, epoch: a.Epoch, follower: f})
		fo := j.observe(f, s.Stream, s.StreamID)
		if !ownerCurrent || !fo.published() || fo.cs.Epoch != a.Epoch || fo.cs.Sealed {
			// No evidence this round; keep the track as it was.
			continue
		}
		ft, ot := fo.cs.RecordTail, owner.cs.RecordTail
		switch {
		case ft >= ot:
			tr.behindSince = time.Time{}
		case isNew || ft != tr.tail:
			// First sight, or the tail moved: the window starts now.
			tr.behindSince, tr.ownerThen = j.now, ot
		case tr.behindSince.IsZero():
			tr.behindSince, tr.ownerThen = j.now, ot
		}
		tr.tail = ft
		if tr.behindSince.IsZero() || j.now.Sub(tr.behindSince) < j.cfg.LagWindow {
			continue
		}
		stuck := j.now.Sub(tr.behindSince)
		out = append(out, found{
			entry: wire.AttentionEntry{
				Kind:     wire.AttentionFollowerLag,
				Severity: wire.SeverityWarning,
				Stream:   s.Stream,
				Node:     f,
				Headline: fmt.Sprintf("follower %s of %s is not catching up: record tail %d for %s while the owner %s went from %d to %d",
					f, s.Stream, ft, stuck.Round(time.Second), a.Owner, tr.ownerThen, ot),
				Figures: map[string]any{
					"follower_tail":   ft,
					"owner":           a.Owner,
					"owner_tail":      ot,
					"owner_tail_then": tr.ownerThen,
					"behind":          ot - ft,
					"stuck_ms":        stuck.Milliseconds(),
					"window_ms":       j.cfg.LagWindow.Milliseconds(),
					"epoch":           a.Epoch,
				},
			},
			key: entryKey(wire.AttentionFollowerLag, s.Stream, s.StreamID, f),
		})
	}
	return out
}

// nodesHoldingCopies: a node that is expired, draining or left while
// assignments still place copies on it.
func (j *judging) nodesHoldingCopies() []found {
	var out []found
	for _, ni := range j.v.Nodes {
		sev := ""
		switch ni.State {
		case wire.NodeExpired, wire.NodeLeft:
			sev = wire.SeverityWarning
		case wire.NodeDraining:
			// Draining is an operator's action in progress.
			sev = wire.SeverityInfo
		default:
			continue
		}
		var held, owned []string
		for _, s := range j.v.Streams {
			if s.Assignment.Includes(ni.Node) {
				held = append(held, s.Stream)
				if s.Assignment.Owner == ni.Node {
					owned = append(owned, s.Stream)
				}
			}
		}
		n := len(held)
		if n == 0 {
			// The stream list may lag cluster info by one pull; trust the
			// coordinator's own count then.
			n = ni.Copies
		}
		if n == 0 {
			continue
		}
		slices.Sort(held)
		slices.Sort(owned)
		if held == nil {
			held = []string{}
		}
		if owned == nil {
			owned = []string{}
		}
		out = append(out, found{
			entry: wire.AttentionEntry{
				Kind:     wire.AttentionNodeHolds,
				Severity: sev,
				Node:     ni.Node,
				Headline: fmt.Sprintf("node %s is %s and still holds %s (owner of %d)", ni.Node, ni.State, plural(n, "copy", "copies"), len(owned)),
				Figures: map[string]any{
					"state":        ni.State,
					"copies":       n,
					"streams":      held,
					"owner_of":     owned,
					"last_seen_ms": ni.LastSeenMS,
				},
			},
			key: entryKey(wire.AttentionNodeHolds, "", 0, ni.Node),
		})
	}
	return out
}

// drainsStuck: a draining node (its node.drain ended) that still owns
// streams: no planned move took them and no recovery may, or not yet.
// Each stream is listed with why (wire.DrainStay*), judged from the state:
// one copy; a recovery pending (it decides the owner); no follower on a
// live node; else not_moved (a live follower exists: the drain's move
// failed, and the recovery the controller starts for a draining owner
// has not come yet; node.drain again does nothing for a draining node:
// stream.move, or node.undrain then node.drain, retries the move).
func (j *judging) drainsStuck() []found {
	state := map[string]string{}
	for _, ni := range j.v.Nodes {
		state[ni.Node] = ni.State
	}
	var out []found
	for _, ni := range j.v.Nodes {
		if ni.State != wire.NodeDraining {
			continue
		}
		why := map[string]string{}
		var owned []string
		for _, s := range j.v.Streams {
			a := s.Assignment
			if a.Owner != ni.Node {
				continue
			}
			owned = append(owned, s.Stream)
			switch {
			case len(a.Copies()) < 2:
				why[s.Stream] = wire.DrainStayOneCopy
			case s.Recovery != nil:
				why[s.Stream] = wire.DrainStayRecovering
			case !slices.ContainsFunc(a.Followers, func(f string) bool { return f != a.Owner && state[f] == wire.NodeLive }):
				why[s.Stream] = wire.DrainStayNoLiveFollower
			default:
				why[s.Stream] = wire.DrainStayNotMoved
			}
		}
		if len(owned) == 0 {
			continue
		}
		slices.Sort(owned)
		out = append(out, found{
			entry: wire.AttentionEntry{
				Kind:     wire.AttentionDrainStuck,
				Severity: wire.SeverityWarning,
				Node:     ni.Node,
				Headline: fmt.Sprintf("node %s is draining and still owns %s: %s", ni.Node, plural(len(owned), "stream", "streams"), drainWhy(owned, why)),
				Figures: map[string]any{
					"owner_of": owned,
					"why":      why,
				},
			},
			key: entryKey(wire.AttentionDrainStuck, "", 0, ni.Node),
		})
	}
	return out
}

// drainWhy says, for a headline, how many of owned stay for each reason.
func drainWhy(owned []string, why map[string]string) string {
	count := map[string]int{}
	for _, s := range owned {
		count[why[s]]++
	}
	var parts []string
	for _, r := range sortedKeys(count) {
		parts = append(parts, fmt.Sprintf("%d %s", count[r], r))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// storeFailures: a host that is heard (a heartbeat that still stands:
// judging.fresh) reports that its store failed. It confirms and serves
// nothing; its streams fail over as from a leaving host, but the host
// needs an operator: a full or
// broken disk, then a restart. Once it stops beating the entry goes, and
// node_gone_holding_copies takes over while assignments still place
// copies on it.
func (j *judging) storeFailures() []found {
	var out []found
	for _, n := range j.heard {
		hs := j.hbs[n]
		if hs.Heartbeat.StoreError == "" || !j.fresh(n, hs) {
			continue
		}
		var owned, held []string
		for _, s := range j.v.Streams {
			if s.Assignment.Includes(n) {
				held = append(held, s.Stream)
				if s.Assignment.Owner == n {
					owned = append(owned, s.Stream)
				}
			}
		}
		slices.Sort(held)
		slices.Sort(owned)
		if held == nil {
			held = []string{}
		}
		if owned == nil {
			owned = []string{}
		}
		out = append(out, found{
			entry: wire.AttentionEntry{
				Kind:     wire.AttentionStoreFailed,
				Severity: wire.SeverityCritical,
				Node:     n,
				Headline: fmt.Sprintf("the store of %s failed: %s; it confirms and serves nothing and its streams fail over; fix its disk and restart it",
					n, hs.Heartbeat.StoreError),
				Figures: map[string]any{
					"error":             hs.Heartbeat.StoreError,
					"copies_held":       len(hs.Heartbeat.Copies),
					"assigned_streams":  held,
					"owner_of":          owned,
					"incarnation":       hs.Heartbeat.Incarnation,
					"last_heartbeat_ms": hs.At.UnixMilli(),
				},
			},
			key: entryKey(wire.AttentionStoreFailed, "", 0, n),
		})
	}
	return out
}
