package server

import (
	"slices"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestStreamListSince: stream.list with since lists only the streams
// changed after that version, in pages chained by next_since, and names
// the streams deleted; a version the coordinator cannot answer from (0 is
// a full listing, one ahead of its state another cluster's) gets the first
// page of a full listing, with since absent.
func TestStreamListSince(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.host("h1")
	c.host("h2")
	c.host("h3")
	c.liveHosts(3)
	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		c.create(s, 2)
	}
	var full wire.StreamList
	if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{}, &full); e != nil {
		t.Fatal(e)
	}
	if len(full.Streams) != 4 || full.Since != 0 {
		t.Fatalf("full listing: %+v", full)
	}
	if e := c.admin(wire.VerbStreamDelete, wire.StreamRef{Stream: "s2"}, nil); e != nil {
		t.Fatal(e)
	}
	for _, s := range []string{"s3", "s4"} {
		if e := c.admin(wire.VerbStreamUpdate, wire.StreamUpdate{Stream: s, Retention: &wire.Retention{MaxRecords: 10}}, nil); e != nil {
			t.Fatal(e)
		}
	}
	var changed, deleted []string
	var pages int
	var version uint64
	for since := full.Version; since != 0; pages++ {
		var page wire.StreamList
		if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{Since: since, Limit: 1}, &page); e != nil {
			t.Fatal(e)
		}
		if page.Since != since || len(page.Streams)+len(page.Deleted) > 1 || pages > 5 {
			t.Fatalf("page %d since %d: %+v", pages, since, page)
		}
		for _, s := range page.Streams {
			if s.Retention.MaxRecords != 10 {
				t.Errorf("%s listed as %+v, not as updated", s.Stream, s.Retention)
			}
			changed = append(changed, s.Stream)
		}
		deleted = append(deleted, page.Deleted...)
		since, version = page.NextSince, page.Version
	}
	if !slices.Equal(changed, []string{"s3", "s4"}) || !slices.Equal(deleted, []string{"s2"}) || pages != 3 {
		t.Fatalf("changes since %d in %d pages: changed %v, deleted %v", full.Version, pages, changed, deleted)
	}
	var none wire.StreamList
	if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{Since: version, Limit: 10}, &none); e != nil {
		t.Fatal(e)
	}
	if none.Since != version || len(none.Streams) != 0 || len(none.Deleted) != 0 {
		t.Fatalf("nothing changed since %d: %+v", version, none)
	}
	var ahead wire.StreamList
	if e := c.admin(wire.VerbStreamList, wire.StreamListRequest{Since: version + 100, Limit: 2}, &ahead); e != nil {
		t.Fatal(e)
	}
	if ahead.Since != 0 || len(ahead.Streams) != 2 || ahead.Next != "s3" {
		t.Fatalf("since a version ahead of the state: %+v", ahead)
	}
}
