package host

import (
	"bytes"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// fetchCluster starts three hosts holding the same stored records, n1
// owning the stream, and waits until the watermark covers them all.
func fetchCluster(t *testing.T, stream string, stored [][]byte) *miniCluster {
	t.Helper()
	const id = 1
	c := newMiniCluster(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.prepareCopy(n, stream, id, 1, stored)
	}
	c.assign(assignment(stream, id, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n, nil)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b := c.fetch(stream, wire.FetchRequest{Start: "latest"}); b.Confirmed == uint64(len(stored)) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watermark never reached %d", len(stored))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A fetch returns each record's payload as published, its envelope
// (plain or with a producer) stripped, within the record and byte bounds
// (bytes counted as stored), with next just past what it returned.
func TestFetchStripsEnvelopesWithinBounds(t *testing.T) {
	const stream = "strip"
	var stored, want [][]byte
	for i := range 40 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 100+i)
		want = append(want, p)
		if i%2 == 0 {
			stored = append(stored, envelope.Append(nil, "", 0, p))
		} else {
			stored = append(stored, envelope.Append(nil, "producer-x", uint64(i), p))
		}
	}
	c := fetchCluster(t, stream, stored)
	for _, q := range []struct {
		req  wire.FetchRequest
		from int
		n    int
	}{
		{wire.FetchRequest{Start: "earliest"}, 0, 40},
		{wire.FetchRequest{Start: "offset", Offset: 5, MaxRecords: 7}, 5, 7},
		// Records 10, 11 and 12 are stored in 111, 124 and 113 bytes (their
		// payloads are 110, 111 and 112): the third would pass 340.
		{wire.FetchRequest{Start: "offset", Offset: 10, MaxBytes: 340}, 10, 2},
		{wire.FetchRequest{Start: "offset", Offset: 39, MaxRecords: 5}, 39, 1},
	} {
		b := c.fetch(stream, q.req)
		if len(b.Records) != q.n || b.Next != uint64(q.from+q.n) {
			t.Fatalf("fetch %+v: %d records, next %d; want %d, next %d", q.req, len(b.Records), b.Next, q.n, q.from+q.n)
		}
		for k, r := range b.Records {
			if r.Offset != uint64(q.from+k) || !bytes.Equal(r.Data, want[q.from+k]) || r.TimeNS == 0 {
				t.Fatalf("fetch %+v: record %d is offset %d, %d bytes, time %d; want offset %d, payload %d bytes",
					q.req, k, r.Offset, len(r.Data), r.TimeNS, q.from+k, len(want[q.from+k]))
			}
		}
	}
}

// A stored record that does not decode fails the fetch with an internal
// error instead of sending a reader its stored bytes.
func TestFetchOfAMalformedStoredRecord(t *testing.T) {
	const stream = "bad"
	stored := [][]byte{envelope.Append(nil, "", 0, []byte("ok")), {0x07, 'x'}}
	c := fetchCluster(t, stream, stored)
	if b := c.fetch(stream, wire.FetchRequest{Start: "earliest", MaxRecords: 1}); len(b.Records) != 1 || string(b.Records[0].Data) != "ok" {
		t.Fatalf("the good record: %+v", b.Records)
	}
	m := c.fetchReply(stream, wire.FetchRequest{Start: "earliest"})
	if e := replyError(m); e == nil || e.Code != wire.CodeInternal {
		t.Fatalf("fetch over a malformed stored record answered %v, want %s", e, wire.CodeInternal)
	}
}
