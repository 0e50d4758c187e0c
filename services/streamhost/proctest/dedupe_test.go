package proctest

import (
	"testing"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestDedupeAcrossFailover: a publish with a producer id and sequence is
// written by h1 and replicated; its reply is taken as lost. Every copy is
// sealed and h2 promoted at epoch 2 while its followers are down, so the
// record is held by the new owner but not confirmed under the new
// assignment. The retry of the same producer sequence reaching h2 waits
// for that confirm (it comes once a follower is back) and is answered with
// the first write's offset and duplicate=true, and the log holds the
// record once.
func TestDedupeAcrossFailover(t *testing.T) {
	const stream, id = "payments", 16
	c := startThree(t, stream, id)
	hdr := map[string]string{wire.HeaderProducer: "p1", wire.HeaderSequence: "41"}
	first := c.publish(stream, rec(0), hdr)
	if first.ok == nil || first.ok.Offset != 0 || first.ok.Duplicate {
		t.Fatalf("first write: %v; want offset 0", first)
	}
	c.mustPublish(stream, rec(1))
	for _, n := range three[1:] {
		c.waitCopy(n, stream, "holding both records", func(cs wire.CopyStatus) bool { return cs.RecordTail == 2 })
	}

	var s2 wire.SealReply
	for _, n := range three {
		r := c.mustSeal(n, stream, id, 2, 1)
		if n == "h2" {
			s2 = r
		}
	}
	c.hosts["h1"].kill()
	c.hosts["h3"].kill()
	c.assign(asg(stream, id, 2, "h2", []string{"h1", "h3"}, policy.MajorityDurable,
		wire.HistoryStart{Epoch: 1, Node: "h1"},
		wire.HistoryStart{Epoch: 2, RecordTail: s2.RecordTail, CursorTail: s2.CursorTail, Node: "h2"}))
	c.waitCopy("h2", stream, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })

	retry := make(chan pubResult, 1)
	go func() { retry <- c.publish(stream, rec(0), hdr) }()
	// The retry can only be answered once a follower acks the record
	// under epoch 2; h3 coming back provides that.
	select {
	case r := <-retry:
		t.Fatalf("retry answered before any follower of epoch 2 held the record: %v", r)
	default:
	}
	c.start("h3")
	r := <-retry
	if r.ok == nil || r.ok.Offset != 0 || !r.ok.Duplicate || r.ok.Epoch != 2 || r.ok.Copies < 2 {
		t.Fatalf("retry on the new owner: %v; want offset 0, duplicate, epoch 2, on at least 2 copies", r)
	}

	// A new sequence of the same producer is written at the next offset.
	next := c.publish(stream, rec(2), map[string]string{wire.HeaderProducer: "p1", wire.HeaderSequence: "42"})
	if next.ok == nil || next.ok.Offset != 2 || next.ok.Duplicate {
		t.Fatalf("next sequence: %v; want offset 2, not a duplicate", next)
	}
	b, err := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 0, 3)
}
