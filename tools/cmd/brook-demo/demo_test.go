package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// confirmsAt returns confirms of publisher 0, sequence i at offset i.
func confirmsAt(n int) map[brookload.ID]confirmed {
	c := map[brookload.ID]confirmed{}
	for i := range n {
		c[brookload.ID{Seq: uint64(i)}] = confirmed{Offset: uint64(i)}
	}
	return c
}

// readAt returns deliveries of publisher 0, sequence i at offset i.
func readAt(n int) []delivery {
	var r []delivery
	for i := range n {
		r = append(r, delivery{Offset: uint64(i), ID: brookload.ID{Seq: uint64(i)}, OK: true})
	}
	return r
}

func TestJudge(t *testing.T) {
	clean := judge(confirmsAt(10), readAt(10), 0, 10)
	if !clean.OK() || clean.Read != 10 || clean.Unconfirmed != 0 {
		t.Fatalf("clean read judged %+v", clean)
	}
	for _, c := range []struct {
		name  string
		read  func([]delivery) []delivery
		end   uint64
		check func(verification) bool
		ok    bool
	}{
		{"lost", func(r []delivery) []delivery { return r[:9] }, 9, func(v verification) bool { return v.Lost == 1 }, false},
		{"moved", func(r []delivery) []delivery { r[3].ID, r[4].ID = r[4].ID, r[3].ID; return r }, 10,
			func(v verification) bool { return v.Moved == 2 }, false},
		{"duplicate", func(r []delivery) []delivery {
			return append(r, delivery{Offset: 10, ID: r[2].ID, OK: true})
		}, 11, func(v verification) bool { return v.Duplicates == 1 && v.Moved == 0 }, false},
		{"hole", func(r []delivery) []delivery { return append(r[:5:5], r[6:]...) }, 10,
			func(v verification) bool { return v.Missing == 1 && v.Lost == 1 }, false},
		{"malformed", func(r []delivery) []delivery { return append(r, delivery{Offset: 10}) }, 11,
			func(v verification) bool { return v.Malformed == 1 }, false},
		{"unconfirmed is allowed", func(r []delivery) []delivery {
			return append(r, delivery{Offset: 10, ID: brookload.ID{Pub: 9}, OK: true})
		}, 11, func(v verification) bool { return v.Unconfirmed == 1 }, true},
	} {
		v := judge(confirmsAt(10), c.read(readAt(10)), 0, c.end)
		if v.OK() != c.ok || !c.check(v) {
			t.Errorf("%s: judged %+v (OK %v), want OK %v", c.name, v, v.OK(), c.ok)
		}
	}
}

func TestSummarizeRecords(t *testing.T) {
	start := time.Unix(1000, 0)
	kill := start.Add(2 * time.Second)
	c := map[brookload.ID]confirmed{}
	for i := range 100 {
		sent := start.Add(time.Duration(i) * 10 * time.Millisecond)
		c[brookload.ID{Seq: uint64(i)}] = confirmed{Offset: uint64(i), Sent: sent, At: sent.Add(time.Duration(i+1) * time.Millisecond)}
	}
	// Sent before the kill, confirmed after it: does not end the outage.
	c[brookload.ID{Pub: 1}] = confirmed{Offset: 100, Sent: kill.Add(-time.Millisecond), At: kill.Add(100 * time.Millisecond), Resolved: true}
	c[brookload.ID{Pub: 1, Seq: 1}] = confirmed{Offset: 101, Sent: kill.Add(300 * time.Millisecond), At: kill.Add(350 * time.Millisecond)}
	var s summary
	summarizeRecords(&s, c, 3, start, start.Add(4*time.Second), kill, kill.Add(350*time.Millisecond))
	if s.Records != 102 || s.Errors != 3 || s.Resolved != 1 {
		t.Errorf("records %d errors %d resolved %d, want 102, 3, 1", s.Records, s.Errors, s.Resolved)
	}
	if s.Rate != 25.5 {
		t.Errorf("rate %v, want 25.5", s.Rate)
	}
	// Latencies 1..100 ms, 101 ms and 50 ms: nearest rank below.
	if s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond {
		t.Errorf("p50 %v p99 %v, want 50ms, 99ms", s.P50, s.P99)
	}
	if !s.UnavailableKnown || s.Unavailable != 350*time.Millisecond || s.KilledAt != 2*time.Second {
		t.Errorf("unavailable %v (%v) killed at %v, want 350ms at 2s", s.Unavailable, s.UnavailableKnown, s.KilledAt)
	}
}

func TestRecorderFirstConfirmAfterKill(t *testing.T) {
	start := time.Now()
	r := newRecorder(start)
	var got []time.Duration
	r.onFirstAfter = func(at, kill time.Time) { got = append(got, at.Sub(kill)) }
	kill := start.Add(time.Second)
	r.confirm(brookload.ID{Seq: 0}, confirmed{Sent: start, At: start.Add(time.Millisecond)})
	r.markKill(kill)
	r.confirm(brookload.ID{Seq: 1}, confirmed{Sent: kill.Add(-time.Millisecond), At: kill.Add(200 * time.Millisecond)})
	r.confirm(brookload.ID{Seq: 2}, confirmed{Sent: kill.Add(10 * time.Millisecond), At: kill.Add(300 * time.Millisecond)})
	r.confirm(brookload.ID{Seq: 3}, confirmed{Sent: kill.Add(20 * time.Millisecond), At: kill.Add(310 * time.Millisecond)})
	if len(got) != 1 || got[0] != 300*time.Millisecond {
		t.Errorf("first confirm after the kill reported %v, want once at 300ms", got)
	}
	p := r.tick(kill.Add(time.Second), 250*time.Millisecond)
	if p.Confirmed != 4 || !p.Killed || p.SinceKill != time.Second || p.Rate != 16 {
		t.Errorf("progress %+v, want 4 confirmed in one 250ms tick (16/s)", p)
	}
	// The rate covers the last ticks: 4 confirms over two, then over four.
	if p2 := r.tick(kill.Add(2*time.Second), 250*time.Millisecond); p2.Rate != 8 {
		t.Errorf("rate over two ticks %v, want 8/s", p2.Rate)
	}
	r.tick(kill.Add(3*time.Second), 250*time.Millisecond)
	if p4 := r.tick(kill.Add(4*time.Second), 250*time.Millisecond); p4.Rate != 4 {
		t.Errorf("rate over four ticks %v, want 4/s", p4.Rate)
	}
	if p5 := r.tick(kill.Add(5*time.Second), 250*time.Millisecond); p5.Rate != 0 || p5.Confirmed != 4 {
		t.Errorf("once the confirms left the window: %+v, want rate 0", p5)
	}
}

func passing() summary {
	return summary{
		Records: 10, Duration: time.Second, Victim: "h1", FailoverDone: true, UnavailableKnown: true,
		Unavailable: 340 * time.Millisecond, NewOwner: "h2", OldEpoch: 1, Epoch: 2, TraceID: "abc",
		Verify: verification{Read: 10, End: 10},
		Rejoin: brookload.Rejoin{Node: "h1", Follower: true, EpochBefore: 2, Epoch: 2, StartsBefore: 1, StartsAfter: 1},
	}
}

func TestVerdict(t *testing.T) {
	s := passing()
	if !s.Pass() || len(s.Problems()) != 0 {
		t.Fatalf("a clean run fails: %v", s.Problems())
	}
	var b bytes.Buffer
	if err := s.write(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"verdict      PASS", "unavailable  340 ms", "trace        abc", "serving again under h2 at epoch 2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	for name, mod := range map[string]func(*summary){
		"duplicate":      func(s *summary) { s.Verify.Duplicates = 1 },
		"read failed":    func(s *summary) { s.VerifyErr = "timeout" },
		"no failover":    func(s *summary) { s.FailoverDone = false },
		"never writable": func(s *summary) { s.UnavailableKnown = false },
		"rejoin failed":  func(s *summary) { s.RejoinErr = "timeout" },
		"new recovery":   func(s *summary) { s.Rejoin.Epoch = 3 },
	} {
		s := passing()
		mod(&s)
		var b bytes.Buffer
		_ = s.write(&b)
		if s.Pass() || len(s.Problems()) == 0 || !strings.Contains(b.String(), "verdict      FAIL") {
			t.Errorf("%s: judged PASS or printed no FAIL:\n%s", name, b.String())
		}
	}
}

// The failover as the watcher sees it, poll by poll.
func TestDescribe(t *testing.T) {
	kill := time.UnixMilli(10_000)
	a1 := wire.Assignment{Stream: "demo", Epoch: 1, Owner: "h1", Followers: []string{"h2", "h3"}, Policy: "majority_durable"}
	base := view{victimState: wire.NodeLive, info: wire.StreamInfo{Stream: "demo", Status: wire.StatusServing, R: 2, Assignment: a1}}

	detected := base
	detected.victimState = wire.NodeExpired
	detected.info.Status = wire.StatusRecovering
	detected.info.Recovery = &wire.PendingRecovery{Stream: "demo", Transition: 4, Old: a1, Reason: "expired", Since: 10_310, TraceID: "t1"}
	lines := describe(base, detected, "h1", kill)
	wantLines(t, lines, "h1 is expired", "serving -> recovering", "owner h1 lost (expired)", "fence epoch 2", "need R=2", "recorded at +310 ms", "failover trace id t1")

	waiting := detected
	waiting.info.Recovery = &wire.PendingRecovery{Stream: "demo", Transition: 4, Old: a1, Reason: "expired", TraceID: "t1",
		Wait: &wire.RecoveryWait{Kind: "answers", Answered: 1, Needed: 2, Unanswered: []string{"h3"}}}
	lines = describe(detected, waiting, "h1", kill)
	wantLines(t, lines, "1 of the 2 seal answers", "[h3]")
	if len(lines) != 1 {
		t.Errorf("a new wait only: %q", lines)
	}
	if again := describe(waiting, waiting, "h1", kill); len(again) != 0 {
		t.Errorf("no change, yet lines: %q", again)
	}

	done := waiting
	done.info.Status = wire.StatusServing
	done.info.Recovery = nil
	done.info.LastTraceID = "t1"
	done.info.Assignment = wire.Assignment{Stream: "demo", Epoch: 2, Owner: "h2", Followers: []string{"h3"}}
	done.info.Starts = []wire.HistoryStart{{Epoch: 2, RecordTail: 500, CursorTail: 7, Node: "h2"}}
	lines = describe(waiting, done, "h1", kill)
	wantLines(t, lines, "recovering -> serving", "owner h2, followers [h3], epoch 1 -> 2", "record tail 500, cursor tail 7 on h2")
	for _, l := range lines {
		if strings.Contains(l, "trace") {
			t.Errorf("the trace id printed twice: %q", l)
		}
	}

	readd := done
	readd.victimState = wire.NodeLive
	readd.info.Assignment.Followers = []string{"h3", "h1"}
	lines = describe(done, readd, "h1", kill)
	wantLines(t, lines, "h1 is live", "without recovery: followers [h3] -> [h3 h1], epoch 2 kept")
}

func wantLines(t *testing.T, lines []string, want ...string) {
	t.Helper()
	all := strings.Join(lines, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("lines lack %q:\n%s", w, all)
		}
	}
}

func TestDescribeCopy(t *testing.T) {
	follower := wire.CopyStatus{Stream: "demo", Role: wire.RoleFollower, Epoch: 1, RecordTail: 100}
	if l := describeCopy("h2", follower, true, follower); l != "" {
		t.Errorf("no change, yet %q", l)
	}
	sealed := follower
	sealed.Role, sealed.Sealed = wire.RoleNone, true
	if l := describeCopy("h2", follower, true, sealed); !strings.Contains(l, "h2 sealed its copy") || !strings.Contains(l, "record tail 100") {
		t.Errorf("seal shown as %q", l)
	}
	owner := wire.CopyStatus{Stream: "demo", Role: wire.RoleOwner, Epoch: 2, RecordTail: 100}
	if l := describeCopy("h2", sealed, true, owner); !strings.Contains(l, "owner at epoch 2") {
		t.Errorf("promotion shown as %q", l)
	}
	longer := wire.CopyStatus{Stream: "demo", Role: wire.RoleNone, Epoch: 1, RecordTail: 112}
	cut := wire.CopyStatus{Stream: "demo", Role: wire.RoleFollower, Epoch: 2, RecordTail: 100}
	if l := describeCopy("h1", longer, true, cut); !strings.Contains(l, "cut back from 112") {
		t.Errorf("the cut of a returning copy shown as %q", l)
	}
}

func TestChoiceLine(t *testing.T) {
	sealed := map[string]wire.CopyStatus{
		"h3": {RecordTail: 90, CursorTail: 5},
		"h2": {RecordTail: 90, CursorTail: 5},
		"h4": {RecordTail: 80, CursorTail: 9},
	}
	l := choiceLine("h2", sealed, 2)
	if !strings.Contains(l, "chose h2: the furthest") || !strings.Contains(l, "h2 90/5, h3 90/5, h4 80/9") {
		t.Errorf("choice shown as %q", l)
	}
	if l := choiceLine("h4", sealed, 2); !strings.Contains(l, "not the furthest") {
		t.Errorf("an unexpected choice shown as %q", l)
	}
	if l := choiceLine("h2", nil, 2); !strings.Contains(l, "chose h2") {
		t.Errorf("choice without reports shown as %q", l)
	}
}

// TestConsoleInLineMode: off a terminal (here a buffer, as for a log or a
// pipe) the console prints each progress report as a line of its own and
// never writes a carriage return.
func TestConsoleInLineMode(t *testing.T) {
	var b bytes.Buffer
	c := consoleFor(&b)
	kill := time.Unix(100, 0)
	c.Printf("started")
	c.Progress("progress one")
	c.setKill(kill)
	c.Event(kill.Add(312*time.Millisecond), "sealed")
	c.Progress("two")
	c.EndProgress()
	c.Printf("done")
	out := b.String()
	if strings.Contains(out, "\r") {
		t.Fatalf("console wrote a carriage return off a terminal: %q", out)
	}
	if want := "started\nprogress one\n+   312 ms  sealed\ntwo\ndone\n"; out != want {
		t.Errorf("console wrote\n%q\nwant\n%q", out, want)
	}
	if c.progressStride() != 4 || newConsole(&b).progressStride() != 1 {
		t.Errorf("line mode reports every %d ticks, a terminal every %d; want 4 and 1", c.progressStride(), newConsole(&b).progressStride())
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	if isTerminal(f) || !consoleFor(f).lines {
		t.Error("a file counted as a terminal")
	}
}

func TestConsoleKeepsProgressAtTheBottom(t *testing.T) {
	var b bytes.Buffer
	c := newConsole(&b)
	kill := time.Unix(100, 0)
	c.Progress("progress one")
	c.setKill(kill)
	c.Event(kill.Add(312*time.Millisecond), "sealed")
	c.Progress("two")
	c.EndProgress()
	out := b.String()
	// The event replaces the progress line, which is drawn again below it;
	// a shorter progress line blanks the rest of the longer one.
	want := "\rprogress one" + "\r" + strings.Repeat(" ", 12) + "\r" + "+   312 ms  sealed\n" + "progress one" +
		"\rtwo" + strings.Repeat(" ", 9) + "\rtwo" + "\n"
	if out != want {
		t.Errorf("console wrote\n%q\nwant\n%q", out, want)
	}
	if p := progressLine(progress{Elapsed: 1500 * time.Millisecond, Confirmed: 42, Rate: 1000, P50: 2 * time.Millisecond, Killed: true, SinceKill: time.Second}); !strings.Contains(p, "42 confirmed") || !strings.Contains(p, "1000 rec/s") || !strings.Contains(p, "p50  2.0 ms") || !strings.Contains(p, "owner killed 1.0s ago") {
		t.Errorf("progress line %q", p)
	}
}
