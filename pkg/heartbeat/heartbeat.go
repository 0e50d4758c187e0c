// Package heartbeat splits a stream host's heartbeat into parts that each
// fit in one NATS message, and puts the parts back together where
// heartbeats are read (the coordinators and the attention service).
//
// A full report lists every copy its host holds (report.go: the reports
// between list only what changed), so its size grows with the host: one
// message for all of them would pass the server's payload limit
// (1 MiB by default) somewhere past a few thousand copies, and the host
// would then look dead to the coordinators. Split bounds every part by an
// upper bound of a copy's encoded size, computed from the longest name and
// the largest numbers the wire allows, so no part can exceed the limit
// whatever the copies hold.
//
// Every part of one beat carries the beat's number and the part count. Any
// part is proof of life; the copies change only when every part of a beat
// has arrived, so a reader never sees half a host's copies as all of them.
// A liveness beat (Live, no copies) is proof of life only: the Assembler
// never takes it for a beat whose copies are none.
package heartbeat

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/brook-streams/brook/pkg/wire"
)

// MaxParts bounds the parts of one beat an Assembler accepts, and so the
// memory a misbehaving or forged heartbeat can make it hold per node.
const MaxParts = 1024

// MaxConnServer bounds the length of a heartbeat's ConnServer (a NATS
// server id is a 56-character public key); Split leaves a longer one out.
const MaxConnServer = 128

// maxCopyBytes and maxHeaderBytes are upper bounds of the JSON encoding of
// one CopyStatus (with the comma that separates it from the next) and of a
// heartbeat with no copies.
var maxCopyBytes, maxHeaderBytes = bounds()

func bounds() (int, int) {
	name := strings.Repeat("n", wire.MaxNameLen)
	cs := wire.CopyStatus{
		Stream: name, StreamID: math.MaxUint64, Role: wire.RoleFollower,
		Epoch: math.MaxUint64, RecordTail: math.MaxUint64, CursorTail: math.MaxUint64,
		Confirmed: math.MaxUint64, Sealed: true,
	}
	for _, r := range []string{wire.RoleOwner, wire.RoleNone} {
		if len(r) > len(cs.Role) {
			cs.Role = r
		}
	}
	c, err1 := json.Marshal(cs)
	h, err2 := json.Marshal(wire.Heartbeat{
		Node: name, Incarnation: math.MaxUint64, Leaving: true, AtMS: math.MaxInt64,
		Beat: math.MaxUint64, Part: MaxParts, Parts: MaxParts,
		ConnServer: strings.Repeat("S", MaxConnServer), ConnID: math.MaxUint64, Live: true,
		// A control byte is escaped as \u00XX: the longest encoding of a
		// byte.
		StoreError: strings.Repeat("\x01", wire.MaxStoreErrorLen),
	})
	if err1 != nil || err2 != nil {
		panic("heartbeat: cannot encode the size bounds")
	}
	return len(c) + 1, len(h)
}

// Split returns hb as parts whose JSON encodings are at most maxBytes each
// (the server's payload limit), every part with hb's node, incarnation,
// leaving flag, time and beat. A heartbeat that fits is returned whole, as
// one part. It returns nil when maxBytes cannot hold even one copy, or the
// copies would need more than MaxParts parts (the caller logs it: such a
// host cannot report its copies at this payload limit).
func Split(hb wire.Heartbeat, maxBytes int) []wire.Heartbeat {
	per := (maxBytes - maxHeaderBytes) / maxCopyBytes
	if per < 1 {
		return nil
	}
	n := max(1, (len(hb.Copies)+per-1)/per)
	if n > MaxParts {
		return nil
	}
	if len(hb.ConnServer) > MaxConnServer {
		hb.ConnServer, hb.ConnID = "", 0
	}
	hb.StoreError = wire.CutStoreError(hb.StoreError)
	parts := make([]wire.Heartbeat, n)
	for i := range parts {
		p := hb
		p.Part, p.Parts = i, n
		p.Copies = hb.Copies[i*per : min(len(hb.Copies), (i+1)*per)]
		parts[i] = p
	}
	return parts
}

// Assembler puts the parts of each node's beats back together. It keeps at
// most one unfinished beat per node: a part of a newer beat (or of a new
// incarnation) replaces it, and parts of older beats are ignored. It is
// not safe for concurrent use; its owner serializes calls.
type Assembler struct {
	pending map[string]*partial
}

type partial struct {
	incarnation, beat uint64
	parts             [][]wire.CopyStatus
	have              []bool
	got               int
}

// NewAssembler returns an empty assembler.
func NewAssembler() *Assembler { return &Assembler{pending: map[string]*partial{}} }

// Add takes one part. When it completes a beat, Add returns the whole
// heartbeat (Part 0 of 1) and true; otherwise false, and the caller should
// treat the part as proof of life only. A heartbeat of one part (or from a
// host that does not split, Parts 0) is whole at once. A liveness beat
// (Live) is never whole: it reports no copies, and leaves a beat being
// assembled as it is.
func (a *Assembler) Add(hb wire.Heartbeat) (wire.Heartbeat, bool) {
	if hb.Live {
		return wire.Heartbeat{}, false
	}
	if hb.Parts <= 1 {
		delete(a.pending, hb.Node)
		hb.Part, hb.Parts = 0, 1
		return hb, true
	}
	if hb.Parts > MaxParts || hb.Part < 0 || hb.Part >= hb.Parts {
		return wire.Heartbeat{}, false
	}
	p := a.pending[hb.Node]
	switch {
	case p == nil, p.incarnation != hb.Incarnation, p.beat < hb.Beat:
		p = &partial{incarnation: hb.Incarnation, beat: hb.Beat,
			parts: make([][]wire.CopyStatus, hb.Parts), have: make([]bool, hb.Parts)}
		a.pending[hb.Node] = p
	case p.beat > hb.Beat:
		return wire.Heartbeat{}, false // a late part of an older beat
	}
	if len(p.parts) != hb.Parts || p.have[hb.Part] {
		return wire.Heartbeat{}, false // inconsistent or repeated part
	}
	p.parts[hb.Part], p.have[hb.Part] = hb.Copies, true
	p.got++
	if p.got < len(p.parts) {
		return wire.Heartbeat{}, false
	}
	delete(a.pending, hb.Node)
	total := 0
	for _, cs := range p.parts {
		total += len(cs)
	}
	whole := hb
	whole.Part, whole.Parts = 0, 1
	whole.Copies = make([]wire.CopyStatus, 0, total)
	for _, cs := range p.parts {
		whole.Copies = append(whole.Copies, cs...)
	}
	return whole, true
}
