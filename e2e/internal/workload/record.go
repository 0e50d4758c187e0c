// Package workload is the load generator and the verifier of brook's process
// suites.
//
// Every record a Load publishes carries its own identity in its payload: the
// producer (a load name plus a publisher index) and that producer's sequence
// number, so that a reader can tell, for every offset it is handed, which
// publish put it there. A Ledger keeps the outcome of every publish (its
// confirm with offset and epoch, or the error). A Reader reads a stream
// through a durable cursor, possibly across failovers and reopenings, and
// remembers what each offset held. Check then holds the two against each
// other: every confirmed record is delivered at the offset it was confirmed
// at, no offset is delivered with two different contents, and no record
// shows up after the offset it was confirmed at.
package workload

import (
	"fmt"
	"strconv"
	"strings"
)

// ID identifies one publish of a Load: a producer and its sequence.
type ID struct {
	Producer string
	Seq      uint64
}

func (id ID) String() string { return id.Producer + "#" + strconv.FormatUint(id.Seq, 10) }

// sep separates the fields of a payload. Producer names never hold it.
const sep = "#"

// Payload returns the record bytes of id: "producer#seq#" padded with a
// deterministic filler to size bytes (never shorter than the id itself).
func Payload(id ID, size int) []byte {
	head := id.Producer + sep + strconv.FormatUint(id.Seq, 10) + sep
	b := make([]byte, max(size, len(head)))
	copy(b, head)
	for i := len(head); i < len(b); i++ {
		// The filler depends on the id, so that two records of the same
		// length but different ids differ in more than their head.
		b[i] = 'a' + byte((id.Seq+uint64(i))%26)
	}
	return b
}

// ParsePayload returns the id a payload was made for, and checks that the
// filler is intact, so a record whose bytes were damaged is reported.
func ParsePayload(p []byte) (ID, error) {
	s := string(p)
	prod, rest, ok := strings.Cut(s, sep)
	if !ok || prod == "" {
		return ID{}, fmt.Errorf("payload %.40q: no producer", s)
	}
	num, _, ok := strings.Cut(rest, sep)
	if !ok {
		return ID{}, fmt.Errorf("payload %.40q: no sequence", s)
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return ID{}, fmt.Errorf("payload %.40q: sequence: %w", s, err)
	}
	id := ID{Producer: prod, Seq: seq}
	if want := Payload(id, len(p)); string(want) != s {
		return ID{}, fmt.Errorf("payload of %s (%d bytes) is damaged", id, len(p))
	}
	return id, nil
}
