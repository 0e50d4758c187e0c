package client

import (
	"testing"
	"time"
)

// Stats counts a failover as it happened: the owner dies holding a
// publish, probes find nobody serving, the new owner's notice has the
// attempt probed and abandoned, and the retry goes to the new owner. A
// first publish to a live owner is one attempt and nothing else.
func TestStatsCountAFailover(t *testing.T) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, WithRequestTimeout(3*time.Second), WithBackoff(time.Second, time.Second))
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	first := c.Stats()
	if first.PublishAttempts != 1 || first.Retries != 0 || first.Probes != 0 || first.StatusChecks != 0 || first.Notices != 0 {
		t.Fatalf("after one confirmed publish: %+v, want one attempt and nothing else", first)
	}
	a.mu.Lock()
	a.hold = true
	a.mu.Unlock()
	started := make(chan *standInOwner, 1)
	go func() {
		<-a.held
		time.Sleep(400 * time.Millisecond)
		b := startOwner(t, url, 2)
		announce(t, b, "h2")
		started <- b
	}()
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("two")); err != nil || pc.Epoch != 2 {
		t.Fatalf("publish across the failover: %+v %v", pc, err)
	}
	<-started
	d := c.Stats().Sub(first)
	if d.PublishAttempts < 2 || d.Retries != d.PublishAttempts-1 {
		t.Errorf("across the failover: %d attempts and %d retries, want at least 2 attempts, each but the first a retry", d.PublishAttempts, d.Retries)
	}
	if d.Probes < 1 {
		t.Errorf("across the failover: %d probes, want at least 1 (the held attempt was abandoned by one)", d.Probes)
	}
	if d.StatusChecks > d.Retries {
		t.Errorf("across the failover: %d status checks for %d retries, want at most one each", d.StatusChecks, d.Retries)
	}
	if d.Notices != 1 {
		t.Errorf("across the failover: %d notices heard, want 1", d.Notices)
	}
	if c.Stats().NoticeSubscribes < 1 {
		t.Errorf("no notice subscription counted: %+v", c.Stats())
	}
}
