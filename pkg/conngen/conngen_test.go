package conngen

import "testing"

func TestReplacedEndsOnlyTheOldContext(t *testing.T) {
	g := New()
	first := g.Current()
	if first.Err() != nil || !g.Began().IsZero() {
		t.Fatal("a new generation's context is done, or it has a replacement time")
	}
	g.Replaced()
	if first.Err() == nil {
		t.Fatal("the replaced connection's context is not done")
	}
	if g.Current().Err() != nil || g.Current() == first {
		t.Fatal("the next connection's context is done or the same")
	}
	if g.Began().IsZero() {
		t.Fatal("a replacement has no time")
	}
}
