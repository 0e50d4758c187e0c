package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/cluster"
)

// failovers tells the failovers TestChaos needed from spurious ones. A
// fault that acts on a stream host (SIGKILL, SIGSTOP, a NATS cut or
// blackhole, a store failure, a graceful stop) touches that host; a fault
// on a coordinator or a nats-server touches none. Two things are watched:
//
//   - owner changes, from the stream's history starts (each committed
//     recovery appends one naming the new owner at the new epoch, so the
//     chain of starts gives every old and new owner, however short-lived),
//     and when each was committed, from the coordinators' logs;
//   - node expiries and leaves, from the coordinators' own logs ("node
//     expired", "node left"), which every coordinator appends to across its
//     restarts; the line's time tells whether it came after the touch.
//
// A change of an owner, or an expiry or leave of a host, that a fault of
// the episode touched before it is needed; any other is spurious (a
// healthy host declared dead: the failure detector was wrong).
type failovers struct {
	// read is how far each coordinator log has been read.
	read map[string]int64
	// owner is the stream's owner after the starts seen so far.
	owner  string
	starts int
	// touched are the hosts the current episode's faults touched, and
	// when first.
	touched map[string]time.Time

	neededOwner, spuriousOwner int
	neededNode, spuriousNode   int
	// kept counts new epochs that kept the owner (a recovery that grew
	// the stream back from one copy, or a re-promoted owner).
	kept int
}

func newFailovers(e *env, info wire.StreamInfo) *failovers {
	f := &failovers{read: map[string]int64{}, owner: info.Assignment.Owner, starts: len(info.Starts), touched: map[string]time.Time{}}
	// What the coordinators logged before (the cluster forming, the
	// hosts moving onto their tmpfs) is no episode's.
	f.logEvents(e)
	return f
}

// touch records that a fault is about to act on node.
func (f *failovers) touch(node string) {
	if _, ok := f.touched[node]; !ok {
		f.touched[node] = time.Now()
	}
}

// logEvent is one node expiry or leave, or one committed recovery of a
// stream, as a coordinator logged it.
type logEvent struct {
	at time.Time
	// node is the host expired or left, or the new owner of a commit.
	node   string
	what   string
	stream string
	epoch  uint64
	coord  string
}

const commitMsg = "recovery committed"

var (
	logEventRE  = regexp.MustCompile(`msg="(node expired|node left: failing its streams over|` + commitMsg + `)"`)
	logTimeRE   = regexp.MustCompile(`^time=(\S+)`)
	logNodeRE   = regexp.MustCompile(` (?:node|owner)=(\S+)`)
	logHowRE    = regexp.MustCompile(` how=(\S+)`)
	logStreamRE = regexp.MustCompile(` stream=(\S+)`)
	logEpochRE  = regexp.MustCompile(` epoch=(\d+)`)
)

// logEvents returns the node expiries and leaves and the committed
// recoveries the coordinators logged since the last call.
func (f *failovers) logEvents(e *env) []logEvent {
	e.t.Helper()
	var evs []logEvent
	for i := range e.c.Coordinators() {
		p := e.c.Coordinator(i)
		for _, line := range f.newLines(e, p.LogPath) {
			m := logEventRE.FindStringSubmatch(line)
			n := logNodeRE.FindStringSubmatch(line)
			if m == nil || n == nil {
				continue
			}
			ev := logEvent{at: time.Now(), node: n[1], what: strings.TrimSuffix(m[1], ": failing its streams over"), coord: p.Name}
			if h := logHowRE.FindStringSubmatch(line); h != nil {
				ev.what += " (" + h[1] + ")"
			}
			if s := logStreamRE.FindStringSubmatch(line); s != nil {
				ev.stream = s[1]
			}
			if ep := logEpochRE.FindStringSubmatch(line); ep != nil {
				ev.epoch, _ = strconv.ParseUint(ep[1], 10, 64)
			}
			if t := logTimeRE.FindStringSubmatch(line); t != nil {
				if at, err := time.Parse(time.RFC3339Nano, t[1]); err == nil {
					ev.at = at
				}
			}
			evs = append(evs, ev)
		}
	}
	return evs
}

// newLines returns the whole lines appended to the file at path since the
// last call (a line still being written waits for the next).
func (f *failovers) newLines(e *env, path string) []string {
	e.t.Helper()
	fh, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = fh.Close() }()
	if _, err := fh.Seek(f.read[path], io.SeekStart); err != nil {
		e.t.Fatal(err)
	}
	b, err := io.ReadAll(fh)
	if err != nil {
		e.t.Fatal(err)
	}
	end := bytes.LastIndexByte(b, '\n') + 1
	f.read[path] += int64(end)
	return strings.Split(string(b[:end]), "\n")
}

// settle classifies what happened since the last settle, as info (taken
// once the stream was whole again) and the coordinators' logs tell, and
// forgets the touches. A spurious failover fails the test.
func (f *failovers) settle(e *env, when string, info wire.StreamInfo) {
	e.t.Helper()
	touchedBefore := func(node string, at time.Time) bool {
		t, ok := f.touched[node]
		// The log's time has millisecond precision.
		return ok && !at.Before(t.Truncate(time.Millisecond))
	}
	evs := f.logEvents(e)
	// When each new epoch of the stream was committed: an owner change
	// is needed only if a fault touched the old owner before that.
	committed := map[uint64]time.Time{}
	for _, ev := range evs {
		if ev.what == commitMsg && ev.stream == info.Stream {
			committed[ev.epoch] = ev.at
		}
	}
	for _, s := range info.Starts[min(f.starts, len(info.Starts)):] {
		at, ok := committed[s.Epoch]
		if !ok {
			// Not logged (its coordinator killed right after the
			// commit, say): any touch of the episode counts.
			at = time.Now()
			e.logf("%s: no coordinator logged the commit of epoch %d", when, s.Epoch)
		}
		switch {
		case s.Node == f.owner:
			f.kept++
			e.logf("%s: epoch %d kept the owner %s", when, s.Epoch, s.Node)
		case touchedBefore(f.owner, at):
			f.neededOwner++
			e.logf("%s: needed failover %s -> %s at epoch %d at %s", when, f.owner, s.Node, s.Epoch, at.Format("15:04:05.000"))
		default:
			f.spuriousOwner++
			e.t.Errorf("%s: spurious failover %s -> %s at epoch %d at %s: no fault touched %s before", when, f.owner, s.Node, s.Epoch,
				at.Format("15:04:05.000"), f.owner)
		}
		f.owner = s.Node
	}
	f.starts = len(info.Starts)
	for _, ev := range evs {
		if ev.what == commitMsg {
			continue
		}
		at := ev.at.Format("15:04:05.000")
		if touchedBefore(ev.node, ev.at) {
			f.neededNode++
			e.logf("%s: %s %s at %s (%s), after a fault touched it", when, ev.node, ev.what, at, ev.coord)
			continue
		}
		f.spuriousNode++
		e.t.Errorf("%s: spurious %s of %s at %s (logged by %s): no fault touched it before", when, ev.what, ev.node, at, ev.coord)
		// The evidence: what the host and the coordinator logged in the
		// TTL and more before.
		for _, p := range []*cluster.Proc{e.c.HostByNode(ev.node), e.procByName(ev.coord)} {
			if p != nil {
				e.t.Logf("%s's log from %s to %s:\n%s", p.Name, ev.at.Add(-2*time.Second).Format("15:04:05.000"), at,
					logWindow(p.LogPath, ev.at.Add(-2*time.Second), ev.at.Add(100*time.Millisecond)))
			}
		}
	}
	clear(f.touched)
}

// procByName returns the process named name, or nil.
func (e *env) procByName(name string) *cluster.Proc {
	for _, p := range e.c.Procs() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// logWindow returns the lines of the log at path stamped from from to to
// (at most 200 of them).
func logWindow(path string, from, to time.Time) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		m := logTimeRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		if out = append(out, line); len(out) == 200 {
			break
		}
	}
	return strings.Join(out, "\n")
}

func (f *failovers) String() string {
	return fmt.Sprintf("owner changes: %d needed, %d spurious; node expiries and leaves: %d of hosts a fault touched, %d spurious; %d new epochs kept the owner",
		f.neededOwner, f.spuriousOwner, f.neededNode, f.spuriousNode, f.kept)
}
