package client

import (
	"fmt"
	"testing"
)

// TestLinkLearnsAFewAtATime: a client publishing to many streams at once
// asks at most maxLearns owners for their link at a time; the streams
// past that go over the bus and ask on a later batch.
func TestLinkLearnsAFewAtATime(t *testing.T) {
	url := startNATS(t)
	// Nobody answers the hellos here: each learn fails at once.
	c := connectClient(t, url, WithDirectLink(true))
	for i := range 200 {
		if hc := c.link.route(fmt.Sprintf("s%d", i)); hc != nil {
			t.Fatalf("stream %d has a way with no owner to answer", i)
		}
		c.link.mu.Lock()
		n := c.link.mu.learning
		c.link.mu.Unlock()
		if n > maxLearns {
			t.Fatalf("%d learns at once, at most %d", n, maxLearns)
		}
	}
	c.link.mu.Lock()
	asking := 0
	for _, r := range c.link.mu.routes {
		if r.asking {
			asking++
		}
	}
	c.link.mu.Unlock()
	if asking > maxLearns {
		t.Fatalf("%d routes asking, at most %d", asking, maxLearns)
	}
}
