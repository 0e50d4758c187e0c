package server

import (
	"fmt"
	"slices"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestCreateLimitsAndListPages: a create past --max-streams or onto hosts
// at --max-copies-per-host is refused with its code, and stream.list pages
// through every stream in name order.
func TestCreateLimitsAndListPages(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) {
		o.NATSSystemURL = ""
		o.MaxStreams = 5
		o.MaxCopiesPerHost = 3
	})
	for _, n := range []string{"h1", "h2", "h3"} {
		c.host(n)
	}
	c.liveHosts(3)
	for i := range 3 {
		c.create(fmt.Sprintf("s%d", i), 3)
	}
	// Every host holds three copies.
	if e := c.admin(wire.VerbStreamCreate, wire.StreamCreate{Stream: "full", Copies: 1}, nil); e == nil || e.Code != wire.CodeHostLimit {
		t.Fatalf("create onto full hosts: %v, want %s", e, wire.CodeHostLimit)
	}
	// A fourth host has room for two owner-only streams; the cluster then
	// holds its five.
	c.host("h4")
	c.liveHosts(4)
	c.create("s3", 1)
	c.create("s4", 1)
	if e := c.admin(wire.VerbStreamCreate, wire.StreamCreate{Stream: "s5", Copies: 1}, nil); e == nil || e.Code != wire.CodeStreamLimit {
		t.Fatalf("sixth create with --max-streams 5: %v, want %s", e, wire.CodeStreamLimit)
	}

	var names []string
	req := wire.StreamListRequest{Limit: 2}
	for pages := 1; ; pages++ {
		var page wire.StreamList
		if e := c.admin(wire.VerbStreamList, req, &page); e != nil {
			t.Fatal(e)
		}
		if len(page.Streams) > 2 || pages > 3 {
			t.Fatalf("page %d holds %d streams", pages, len(page.Streams))
		}
		for _, s := range page.Streams {
			names = append(names, s.Stream)
		}
		if page.Next == "" {
			break
		}
		req.Cursor = page.Next
	}
	if want := []string{"s0", "s1", "s2", "s3", "s4"}; !slices.Equal(names, want) {
		t.Fatalf("pages listed %v, want %v", names, want)
	}
	var all wire.StreamList
	if e := c.admin(wire.VerbStreamList, "", &all); e != nil || len(all.Streams) != 5 || all.Next != "" {
		t.Fatalf("list without a limit: %d streams next %q (%v)", len(all.Streams), all.Next, e)
	}
	if e := c.admin(wire.VerbStreamList, `{"limit":-1}`, nil); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("negative limit: %v, want bad_request", e)
	}
}
