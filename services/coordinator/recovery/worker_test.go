package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// fakeState is an in-memory State with a version guard like the real one:
// Commit succeeds only if nothing changed since the version it was given.
type fakeState struct {
	mu      sync.Mutex
	pr      *wire.PendingRecovery
	starts  []wire.HistoryStart
	leaving map[string]bool
	version uint64

	reads    int
	readErrs []error            // returned by the first reads, in order
	onRead   func(s *fakeState) // called under mu before each read answers
	attempts []commit           // every Commit call
	applied  []commit           // the commits that took effect
	onCommit func(s *fakeState, c commit) error
	waits    []wire.RecoveryWait
}

type commit struct {
	transition, version uint64
	a                   wire.Assignment
	start               wire.HistoryStart
	traceParent         string
}

func (s *fakeState) Read(ctx context.Context, stream string) (*wire.PendingRecovery, []wire.HistoryStart, map[string]bool, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if len(s.readErrs) > 0 {
		err := s.readErrs[0]
		s.readErrs = s.readErrs[1:]
		return nil, nil, nil, 0, err
	}
	if s.onRead != nil {
		s.onRead(s)
	}
	if s.pr == nil {
		return nil, slices.Clone(s.starts), nil, s.version, nil
	}
	pr := *s.pr
	return &pr, slices.Clone(s.starts), s.leaving, s.version, nil
}

func (s *fakeState) Commit(ctx context.Context, stream string, transition, version uint64, a wire.Assignment, start wire.HistoryStart, tp string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := commit{transition, version, a, start, tp}
	s.attempts = append(s.attempts, c)
	if s.onCommit != nil {
		if err := s.onCommit(s, c); err != nil {
			return err
		}
	}
	if version != s.version || s.pr == nil || s.pr.Transition != transition {
		return fmt.Errorf("commit %s at version %d (now %d): %w", stream, version, s.version, ErrConflict)
	}
	s.apply(c)
	return nil
}

func (s *fakeState) apply(c commit) {
	s.applied = append(s.applied, c)
	s.pr = nil
	s.starts = append(s.starts, c.start)
	s.version++
}

func (s *fakeState) RecordWait(ctx context.Context, stream string, transition uint64, w wire.RecoveryWait) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, w)
	if s.pr != nil && s.pr.Transition == transition {
		s.pr.Wait = &w
	}
	return nil
}

// fakeSealer answers each node with its behaviour, or the node's tails.
type fakeSealer struct {
	mu    sync.Mutex
	reqs  map[string][]wire.SealRequest
	tails map[string][2]uint64
	// act, if set for a node, replaces the plain answer.
	act map[string]func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error)
	// budgets are the budgets of every seal, in call order.
	budgets []time.Duration
}

func newSealer(tails map[string][2]uint64) *fakeSealer {
	return &fakeSealer{reqs: map[string][]wire.SealRequest{}, tails: tails, act: map[string]func(context.Context, wire.SealRequest, int) (*wire.SealReply, error){}}
}

func (f *fakeSealer) reply(node string, req wire.SealRequest) *wire.SealReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tails[node]
	return &wire.SealReply{Node: node, Stream: req.Stream, FenceEpoch: req.FenceEpoch, Transition: req.Transition, RecordTail: t[0], CursorTail: t[1]}
}

func (f *fakeSealer) Seal(ctx context.Context, node string, req wire.SealRequest, budget time.Duration) (*wire.SealReply, error) {
	f.mu.Lock()
	f.budgets = append(f.budgets, budget)
	f.reqs[node] = append(f.reqs[node], req)
	call := len(f.reqs[node])
	act := f.act[node]
	f.mu.Unlock()
	if act != nil {
		return act(ctx, req, call)
	}
	return f.reply(node, req), nil
}

func (f *fakeSealer) calls(node string) []wire.SealRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs[node])
}

// blockUntilDone is a copy that never answers but respects its context.
func blockUntilDone(ctx context.Context, _ wire.SealRequest, _ int) (*wire.SealReply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// sleeps records backoff pauses without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
	// then, if set, runs on each pause (n is 1-based).
	then func(n int) error
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	n := len(s.d)
	s.mu.Unlock()
	if s.then != nil {
		if err := s.then(n); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newWorker(st State, se Sealer, sl *sleeps) *Worker {
	return &Worker{Sealer: se, State: st, SealTimeout: 50 * time.Millisecond, Now: func() time.Time { return now }, sleep: sl.sleep}
}

func TestWorkerSealsAndCommits(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 30, starts: []wire.HistoryStart{{Epoch: 2, RecordTail: 5, Node: "a"}}}
	se := newSealer(map[string][2]uint64{"b": {10, 3}, "c": {12, 1}})
	se.act["a"] = blockUntilDone
	sl := &sleeps{}
	if err := newWorker(st, se, sl).Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(st.applied) != 1 || len(st.attempts) != 1 {
		t.Fatalf("applied %d of %d commits, want exactly 1", len(st.applied), len(st.attempts))
	}
	c := st.applied[0]
	if c.transition != 17 || c.version != 30 || c.a.Owner != "c" || !slices.Equal(c.a.Followers, []string{"b"}) || c.a.Epoch != 5 {
		t.Errorf("commit = %+v; want transition 17 at version 30, owner c, followers [b], epoch 5", c)
	}
	if c.start != (wire.HistoryStart{Epoch: 5, RecordTail: 12, CursorTail: 1, Node: "c"}) {
		t.Errorf("start = %+v", c.start)
	}
	for _, n := range []string{"a", "b", "c"} {
		reqs := se.calls(n)
		if len(reqs) != 1 {
			t.Fatalf("%s sealed %d times, want 1", n, len(reqs))
		}
		want := wire.SealRequest{Stream: "s", StreamID: 9, FenceEpoch: 5, Transition: 17}
		got := reqs[0]
		got.TraceParent = ""
		if got != want {
			t.Errorf("seal %s = %+v, want %+v", n, got, want)
		}
	}
	if len(sl.d) != 0 {
		t.Errorf("paused %v before a commit that needed no retry", sl.d)
	}
}

// TestWorkerSealsInParallel: every seal is in flight at once (each waits at a
// barrier for the others), and a copy that ignores its context and never
// answers does not hold the round past SealTimeout: the recovery commits
// while that seal is still blocked, leaving the copy out.
func TestWorkerSealsInParallel(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c", "d", "e")
	st := &fakeState{pr: &pr, version: 1}
	se := newSealer(map[string][2]uint64{"b": {7, 0}, "c": {8, 0}, "d": {9, 0}})
	// All four copies that reach Seal (a, b, c, d) must be in flight before
	// b, c and d answer; a sequential fan-out never gets there.
	var (
		mu      sync.Mutex
		arrived int
		allIn   = make(chan struct{})
	)
	arrive := func() {
		mu.Lock()
		defer mu.Unlock()
		if arrived++; arrived == 4 {
			close(allIn)
		}
	}
	barrier := func(node string) func(context.Context, wire.SealRequest, int) (*wire.SealReply, error) {
		return func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
			arrive()
			select {
			case <-allIn:
				return se.reply(node, req), nil
			case <-time.After(2 * time.Second):
				t.Error("seals were not sent in parallel")
				return nil, errors.New("barrier timeout")
			}
		}
	}
	for _, n := range []string{"b", "c", "d"} {
		se.act[n] = barrier(n)
	}
	stuck := make(chan struct{})
	defer close(stuck)
	se.act["a"] = func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
		arrive()
		<-stuck // ignores ctx on purpose
		return nil, errors.New("released")
	}
	se.act["e"] = blockUntilDone
	w := newWorker(st, se, &sleeps{})
	w.SealTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, "s") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run is held by a seal that ignores its context")
	}
	if len(st.applied) != 1 {
		t.Fatalf("applied %d commits, want 1", len(st.applied))
	}
	// One round: b, c and d all answered the first fan-out, while a was stuck.
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if got := len(se.calls(n)); got != 1 {
			t.Errorf("%s sealed %d times, want once (one round)", n, got)
		}
	}
	a := st.applied[0].a
	if a.Owner != "d" || !slices.Equal(a.Followers, []string{"b", "c"}) {
		t.Errorf("assignment %+v; want owner d, followers b, c (a and e left out)", a)
	}
}

// TestWorkerRetriesWithBackoff: only one of the two needed copies answers for
// several rounds; the worker records the wait once (it does not change),
// pauses 50ms doubling to 2s, re-reads each round, and commits when the
// second copy answers.
func TestWorkerRetriesWithBackoff(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 3}
	se := newSealer(map[string][2]uint64{"b": {10, 0}, "c": {11, 0}})
	se.act["a"] = blockUntilDone
	const failing = 8
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call <= failing {
			return nil, errors.New("nats: no responders available for request")
		}
		return se.reply("c", req), nil
	}
	sl := &sleeps{}
	if err := newWorker(st, se, sl).Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ms := time.Millisecond
	want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}
	if !slices.Equal(sl.d, want) {
		t.Errorf("backoff = %v, want %v", sl.d, want)
	}
	if st.reads != failing+1 {
		t.Errorf("reads = %d, want a fresh read per round (%d)", st.reads, failing+1)
	}
	if len(st.waits) != 1 {
		t.Errorf("recorded %d waits, want 1 (an unchanged wait is not rewritten)", len(st.waits))
	} else if w := st.waits[0]; w.Kind != WaitKindAnswers || w.Answered != 1 || w.Needed != 2 || !slices.Equal(w.Unanswered, []string{"a", "c"}) {
		t.Errorf("wait = %+v", w)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "c" {
		t.Errorf("applied = %+v, want one commit promoting c", st.applied)
	}
}

// TestWorkerRecordsChangedWait: a wait that changes (answers, then the
// confirmed prefix) is recorded again.
func TestWorkerRecordsChangedWait(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 3, starts: []wire.HistoryStart{{Epoch: 4, RecordTail: 20, Node: "a"}}}
	se := newSealer(map[string][2]uint64{"b": {10, 0}, "c": {11, 0}, "a": {25, 0}})
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call == 1 {
			return nil, errors.New("timeout")
		}
		return se.reply("c", req), nil
	}
	se.act["a"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call <= 3 {
			return nil, context.DeadlineExceeded
		}
		return se.reply("a", req), nil // the owner of the latest start comes back
	}
	sl := &sleeps{}
	if err := newWorker(st, se, sl).Run(testCtx(t), "s"); err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, w := range st.waits {
		kinds = append(kinds, w.Kind)
	}
	if !slices.Equal(kinds, []string{WaitKindAnswers, WaitKindPrefix}) {
		t.Errorf("recorded waits %v, want [answers confirmed_prefix]", kinds)
	}
	if p := st.waits[1]; p.Start == nil || p.Start.RecordTail != 20 || p.Start.Node != "a" || p.BestTail != 11 || p.BestNode != "c" {
		t.Errorf("prefix wait = %+v", p)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "a" || st.applied[0].start.RecordTail != 25 {
		t.Errorf("applied = %+v, want a promoted at 25", st.applied)
	}
}

func TestWorkerStopsWhenWithdrawnOrReplaced(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(s *fakeState)
	}{
		{"withdrawn", func(s *fakeState) { s.pr = nil }},
		{"replaced", func(s *fakeState) { p := *s.pr; p.Transition = 18; p.Wait = nil; s.pr = &p }},
	} {
		t.Run(c.name, func(t *testing.T) {
			pr := pending("majority_durable", "a", "b", "c")
			st := &fakeState{pr: &pr, version: 3}
			st.onRead = func(s *fakeState) {
				if s.reads == 3 {
					c.change(s)
					s.version++
				}
			}
			se := newSealer(map[string][2]uint64{"b": {10, 0}})
			se.act["a"], se.act["c"] = blockUntilDone, blockUntilDone
			if err := newWorker(st, se, &sleeps{}).Run(testCtx(t), "s"); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(st.attempts) != 0 {
				t.Errorf("committed %+v after the recovery was %s", st.attempts, c.name)
			}
			for _, req := range se.calls("b") {
				if req.Transition != 17 {
					t.Errorf("sealed for transition %d; the worker must leave the new one alone", req.Transition)
				}
			}
			// b answered in round 1: round 2 seals only a and c again.
			if n := len(se.calls("b")); n != 1 {
				t.Errorf("sealed b %d times, want 1 (its answer is kept for round 2)", n)
			}
			if n := len(se.calls("a")); n != 2 {
				t.Errorf("sealed a %d times, want 2 (rounds before the change)", n)
			}
		})
	}
}

// TestWorkerConflictRereads: the guarded commit loses to a concurrent change
// (here a new history start from elsewhere). The worker re-reads and decides
// against the new state rather than committing twice or on stale data.
func TestWorkerConflictRereads(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 3}
	st.onCommit = func(s *fakeState, c commit) error {
		if len(s.attempts) == 1 {
			s.version = 4
			s.starts = append(s.starts, wire.HistoryStart{Epoch: 4, RecordTail: 11, Node: "c"})
		}
		return nil
	}
	se := newSealer(map[string][2]uint64{"b": {12, 0}, "c": {11, 5}})
	se.act["a"] = blockUntilDone
	if err := newWorker(st, se, &sleeps{}).Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(st.attempts) != 2 || len(st.applied) != 1 {
		t.Fatalf("attempts %d applied %d, want 2 attempts and 1 applied", len(st.attempts), len(st.applied))
	}
	if st.attempts[0].version != 3 || st.attempts[1].version != 4 {
		t.Errorf("commit versions %d, %d; want 3 then the re-read 4", st.attempts[0].version, st.attempts[1].version)
	}
	// The round after the conflict decides afresh on the new state, with
	// the answers kept: the copies are fenced, their tails cannot grow.
	// Only the chosen b is sealed again, as a kept answer is never the
	// promoted one (Worker.decideFresh).
	if len(se.calls("b")) != 2 || len(se.calls("c")) != 1 {
		t.Errorf("b, c sealed %d, %d times, want 2 (chosen again) and 1 (answer kept across the conflict)", len(se.calls("b")), len(se.calls("c")))
	}
	if len(se.calls("a")) != 2 {
		t.Errorf("a sealed %d times, want 2 (unanswered, asked again)", len(se.calls("a")))
	}
}

// TestWorkerNoDoubleCommit: a commit whose outcome is unknown (it applied, but
// the call failed, e.g. a proposal timeout) is not repeated: the re-read shows
// the recovery gone and the worker stops.
func TestWorkerNoDoubleCommit(t *testing.T) {
	for _, fail := range []error{fmt.Errorf("propose: %w", ErrConflict), errors.New("dragonboat: timeout")} {
		pr := pending("majority_durable", "a", "b", "c")
		st := &fakeState{pr: &pr, version: 3}
		st.onCommit = func(s *fakeState, c commit) error {
			s.apply(c) // e.g. another leader's worker, or this one's lost reply
			return fail
		}
		se := newSealer(map[string][2]uint64{"b": {12, 0}, "c": {11, 5}})
		if err := newWorker(st, se, &sleeps{}).Run(testCtx(t), "s"); err != nil {
			t.Fatalf("%v: Run: %v", fail, err)
		}
		if len(st.attempts) != 1 || len(st.applied) != 1 || st.reads != 2 {
			t.Errorf("%v: attempts %d applied %d reads %d; want 1, 1, 2", fail, len(st.attempts), len(st.applied), st.reads)
		}
	}
}

func TestWorkerReadErrorRetries(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 3, readErrs: []error{errors.New("no leader"), errors.New("no leader")}}
	se := newSealer(map[string][2]uint64{"b": {12, 0}, "c": {11, 5}})
	sl := &sleeps{}
	if err := newWorker(st, se, sl).Run(testCtx(t), "s"); err != nil {
		t.Fatal(err)
	}
	if len(st.applied) != 1 || len(sl.d) != 2 {
		t.Errorf("applied %d after %v pauses; want 1 after 2", len(st.applied), sl.d)
	}
}

func TestWorkerStopsOnCancel(t *testing.T) {
	t.Run("while waiting", func(t *testing.T) {
		pr := pending("majority_durable", "a", "b", "c")
		st := &fakeState{pr: &pr, version: 3}
		se := newSealer(nil)
		// c refuses (a round whose seals only time out does not pause).
		se.act["a"], se.act["b"], se.act["c"] = blockUntilDone, blockUntilDone, noResponders
		ctx, cancel := context.WithCancel(testCtx(t))
		sl := &sleeps{then: func(n int) error {
			if n == 2 {
				cancel()
			}
			return nil
		}}
		if err := newWorker(st, se, sl).Run(ctx, "s"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		if len(st.attempts) != 0 || len(sl.d) != 2 {
			t.Errorf("attempts %d pauses %d; want 0, 2", len(st.attempts), len(sl.d))
		}
	})
	t.Run("mid seal", func(t *testing.T) {
		pr := pending("local_durable", "a", "b", "c")
		st := &fakeState{pr: &pr, version: 3}
		se := newSealer(map[string][2]uint64{"b": {3, 0}})
		ctx, cancel := context.WithCancel(testCtx(t))
		se.act["a"] = func(c context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
			cancel() // leadership lost while sealing
			<-c.Done()
			return nil, c.Err()
		}
		w := newWorker(st, se, &sleeps{})
		w.SealTimeout = 10 * time.Second
		if err := w.Run(ctx, "s"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		if len(st.attempts) != 0 || len(st.waits) != 0 {
			t.Errorf("acted after losing leadership: commits %v waits %v", st.attempts, st.waits)
		}
	})
}

// TestWorkerIgnoresStaleReply: a reply fenced at another epoch does not count.
func TestWorkerIgnoresStaleReply(t *testing.T) {
	pr := pending("local_durable", "a", "b")
	st := &fakeState{pr: &pr, version: 3}
	se := newSealer(map[string][2]uint64{"b": {3, 0}})
	se.act["a"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		r := se.reply("a", req)
		r.RecordTail = 100
		r.FenceEpoch = req.FenceEpoch - 1
		return r, nil
	}
	if err := newWorker(st, se, &sleeps{}).Run(testCtx(t), "s"); err != nil {
		t.Fatal(err)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "b" || len(st.applied[0].a.Followers) != 0 {
		t.Errorf("applied %+v, want b alone (a's reply is for another fence)", st.applied)
	}
}

// TestWorkerDoesNotWaitForGoneNodesOnceRAnswered: the lost owner's node is
// gone, but something still subscribes to its seal subject and never
// answers (a debugging "nats sub"). Once R copies answered, the round ends
// without it instead of waiting the whole seal timeout. A slow copy on a
// live node is still waited for, and becomes a follower.
func TestWorkerDoesNotWaitForGoneNodesOnceRAnswered(t *testing.T) {
	// E=5 majority: W=3, R=3. a is gone and never answers; b, c, d answer
	// at once; e is live and answers once released.
	pr := pending("majority_durable", "a", "b", "c", "d", "e")
	st := &fakeState{pr: &pr, version: 1}
	se := newSealer(map[string][2]uint64{"b": {7, 0}, "c": {9, 0}, "d": {8, 0}, "e": {6, 0}})
	se.act["a"] = blockUntilDone
	release := make(chan struct{})
	waitedForE := make(chan struct{})
	var once sync.Once
	se.act["e"] = func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
		select {
		case <-release:
			return se.reply("e", req), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w := newWorker(st, se, &sleeps{})
	w.SealTimeout = time.Minute // a round that waits for a cannot finish within the test
	var goneCalls sync.Map
	w.Gone = func(node string) bool {
		goneCalls.Store(node, true)
		if node == "e" {
			// The round asked about e, so it had R answers and was about to
			// decide whether to wait for e: e answers now.
			once.Do(func() { close(waitedForE); close(release) })
		}
		return node == "a"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.Run(ctx, "s"); err != nil {
		t.Fatalf("Run: %v (the round waited for the gone node)", err)
	}
	select {
	case <-waitedForE:
	default:
		t.Fatal("the round never considered the live copy e before ending")
	}
	if len(st.applied) != 1 {
		t.Fatalf("applied %d commits, want 1", len(st.applied))
	}
	a := st.applied[0].a
	if a.Owner != "c" || !slices.Equal(a.Followers, []string{"b", "d", "e"}) {
		t.Errorf("assignment %+v; want owner c, followers b, d, e (live e waited for, gone a left out)", a)
	}
	if _, asked := goneCalls.Load("b"); asked {
		t.Error("asked whether an answered copy is gone")
	}
}

// TestWorkerWaitsForGoneNodesBelowR: with fewer than R answers the round
// waits for every copy, gone or not: an answer from a copy on a node the
// liveness counts as gone still counts toward R.
func TestWorkerWaitsForGoneNodesBelowR(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 1}
	se := newSealer(map[string][2]uint64{"a": {12, 0}, "b": {10, 0}})
	se.act["c"] = blockUntilDone
	bAnswered := make(chan struct{})
	se.act["b"] = func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
		defer close(bAnswered)
		return se.reply("b", req), nil
	}
	se.act["a"] = func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
		// Answers after b, so the round has 1 of the R=2 answers while
		// the gone a and c are outstanding; the pause only makes a round
		// that wrongly ends there likely to do so (the test passes either
		// way for a correct round, so it asserts nothing about timing).
		<-bAnswered
		time.Sleep(20 * time.Millisecond)
		return se.reply("a", req), nil
	}
	w := newWorker(st, se, &sleeps{})
	w.SealTimeout = 5 * time.Second
	w.Gone = func(node string) bool { return node == "a" || node == "c" }
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "a" || !slices.Equal(st.applied[0].a.Followers, []string{"b"}) {
		t.Fatalf("applied %+v; want a (gone but answered) promoted with b", st.applied)
	}
}

// TestWorkerWaitsForAGoneCopyWhileBelowThePrefix: R copies answered but
// their furthest tail is below the latest history start, so they do not
// promote: the round keeps waiting for the copy on the gone node, which may
// be the one holding the confirmed prefix, and promotes it when it answers.
func TestWorkerWaitsForAGoneCopyWhileBelowThePrefix(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 1, starts: []wire.HistoryStart{{Epoch: 4, RecordTail: 20, Node: "a"}}}
	se := newSealer(map[string][2]uint64{"a": {25, 0}, "b": {10, 0}, "c": {11, 0}})
	cAnswered := make(chan struct{})
	var cOnce sync.Once
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
		defer cOnce.Do(func() { close(cAnswered) })
		return se.reply("c", req), nil
	}
	var asked sync.Once
	askedGone := make(chan struct{})
	se.act["a"] = func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
		// a answers only after b and c did, and after the round had the
		// chance to give up on it.
		<-cAnswered
		select {
		case <-askedGone:
		case <-time.After(100 * time.Millisecond):
		}
		return se.reply("a", req), nil
	}
	w := newWorker(st, se, &sleeps{})
	w.SealTimeout = 10 * time.Second
	w.Gone = func(node string) bool {
		asked.Do(func() { close(askedGone) })
		return node == "a"
	}
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner != "a" || st.applied[0].start.RecordTail != 25 {
		t.Fatalf("applied %+v; want a promoted at 25 in the first round", st.applied)
	}
	if len(st.waits) != 0 || len(se.calls("a")) != 1 {
		t.Errorf("waits %+v, seals of a %d; want one round that waited for a", st.waits, len(se.calls("a")))
	}
}

// TestWorkerSealQueueTimeIsNotItsBudget (issue 17): SealTimeout is a
// seal's time once it is sent; a Sealer that queues seals (the
// coordinator's batcher, under a mass failover) may hold one for a while
// before sending it. Here every copy's seal waits in such a queue for
// longer than SealTimeout and is then answered at once: the round gets
// the answers and commits in one round. Bounded by SealTimeout from the
// call, every seal timed out in the queue, and the next rounds' too.
func TestWorkerSealQueueTimeIsNotItsBudget(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 30}
	se := newSealer(map[string][2]uint64{"a": {10, 0}, "b": {10, 3}, "c": {12, 1}})
	const timeout = 100 * time.Millisecond
	queued := func(node string) func(context.Context, wire.SealRequest, int) (*wire.SealReply, error) {
		return func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
			select {
			case <-time.After(timeout * 3 / 2):
				return se.reply(node, req), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	commitsInTheFirstRound(t, st, se, timeout, queued)
	se.mu.Lock()
	defer se.mu.Unlock()
	for _, b := range se.budgets {
		if b != timeout {
			t.Errorf("a seal's budget was %v, want SealTimeout %v", b, timeout)
		}
	}
}

// TestWorkerSealMayWaitAMassFailoversQueue (issue 17): at 10,000 streams
// about 1,900 seals wait for each surviving host at once, sent 8 batches
// of 64 at a time, so the last of them wait three or four batch rounds
// before they are sent. Here each copy's Sealer holds its seal for three
// budgets in its queue before sending it (and answers it at once): the
// caller's context must leave it that long plus its budget, or the seal
// ends in the queue, as it did with a bound of twice SealTimeout, and the
// round waits and seals again at the back of the queue.
func TestWorkerSealMayWaitAMassFailoversQueue(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	st := &fakeState{pr: &pr, version: 30}
	se := newSealer(map[string][2]uint64{"a": {10, 0}, "b": {10, 3}, "c": {12, 1}})
	const timeout = time.Second
	queued := func(node string) func(context.Context, wire.SealRequest, int) (*wire.SealReply, error) {
		return func(ctx context.Context, req wire.SealRequest, _ int) (*wire.SealReply, error) {
			// Three batch rounds in the queue, then the budget once sent:
			// a caller that leaves before that loses its seal in the queue.
			if d, ok := ctx.Deadline(); ok && time.Until(d) < (3+1)*timeout {
				return nil, context.DeadlineExceeded
			}
			return se.reply(node, req), nil
		}
	}
	commitsInTheFirstRound(t, st, se, timeout, queued)
}

// commitsInTheFirstRound runs a worker with every copy's seal answered by
// queued(node) and checks that it commits in its first round.
func commitsInTheFirstRound(t *testing.T, st *fakeState, se *fakeSealer, timeout time.Duration, queued func(string) func(context.Context, wire.SealRequest, int) (*wire.SealReply, error)) {
	t.Helper()
	for _, n := range []string{"a", "b", "c"} {
		se.act[n] = queued(n)
	}
	sl := &sleeps{then: func(n int) error {
		if n >= 3 {
			return errors.New("still waiting after 3 rounds")
		}
		return nil
	}}
	w := newWorker(st, se, sl)
	w.SealTimeout = timeout
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v (backoffs %v)", err, sl.d)
	}
	if len(st.applied) != 1 || len(sl.d) != 0 {
		t.Errorf("applied %d commits after %d waits, want 1 in the first round", len(st.applied), len(sl.d))
	}
}
