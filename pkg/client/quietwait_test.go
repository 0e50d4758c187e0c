package client

// A request that waits for a new owner while nobody serves the stream, and
// its notices are heard, costs the cluster requests in proportion to what
// changes: its retries and the owner watch's probes slow down after their
// first second (the new owner's notice wakes both at once), and its
// questions to the coordinators stop once they said the stream is
// recovering. In a mass failover thousands of streams wait like this at
// once, on the cores that fail them over.

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/brook-streams/brook/pkg/wire"
)

// noOwnerFor publishes to "s" while nobody serves it for 3 s, then starts
// an owner at epoch 2 that announces itself, and returns the publish
// attempts the client made in its first 0.9 s and in 1.5-3 s, and the
// publish's confirm. ownerURL and clientURL are the connections' URLs.
func noOwnerFor(t *testing.T, ownerURL, clientURL string) (dense, quiet uint64, pc wire.PublishConfirm, err error) {
	t.Helper()
	c := connectClient(t, clientURL, WithRetry(0, time.Minute))
	var o *standInOwner
	st, pc, err := statsWhilePublishing(t, c, nil, []time.Duration{0, 900 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}, func() {
		o = startOwner(t, ownerURL, 2)
		announce(t, o, "h2")
	})
	if n := o.pubs.Load(); err == nil && n != 1 {
		t.Errorf("the new owner saw %d publishes, want 1", n)
	}
	return st[1].Sub(st[0]).PublishAttempts, st[3].Sub(st[2]).PublishAttempts, pc, err
}

// statsWhilePublishing publishes to "s" on c and, once began is closed (at
// once if nil), takes c's Stats at each of the times at after it; then it
// calls newOwner and returns the Stats and the publish's outcome.
func statsWhilePublishing(t *testing.T, c *Client, began <-chan struct{}, at []time.Duration, newOwner func()) ([]Stats, wire.PublishConfirm, error) {
	t.Helper()
	type result struct {
		pc  wire.PublishConfirm
		err error
	}
	done := make(chan result, 1)
	go func() {
		pc, err := c.Publish(ctxTimeout(t, 20*time.Second), "s", []byte("waits"))
		done <- result{pc, err}
	}()
	if began != nil {
		<-began
	}
	start := time.Now()
	st := make([]Stats, len(at))
	for i, d := range at {
		time.Sleep(time.Until(start.Add(d)))
		st[i] = c.Stats()
	}
	newOwner()
	r := <-done
	return st, r.pc, r.err
}

// Nobody serves the stream for 3 s: its retries (1-5 ms apart here) keep
// their pace for the first second, then wait up to a second each, as the
// new owner's notice would wake them. Before, they kept their pace: as
// many attempts in 1.5 s as in the first 0.9 s or more.
func TestRetriesSlowDownWhileNobodyServesAndNoticesAreHeard(t *testing.T) {
	url := startNATS(t)
	dense, quiet, pc, err := noOwnerFor(t, url, url)
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if paced(t, "attempts", "the first 0.9 s", dense, quiet, 20)*10 > dense {
		t.Fatalf("%d attempts in 1.5-3 s against %d in the first 0.9 s; want under a tenth once the notices are heard", quiet, dense)
	}
}

// A client whose NATS user may not hear owner notices (its subscription is
// refused) keeps its retries' pace: no notice could wake them.
func TestRetriesKeepTheirPaceWhenNoticesAreRefused(t *testing.T) {
	ownerURL, clientURL := startNATSDenyingNotices(t)
	dense, quiet, pc, err := noOwnerFor(t, ownerURL, clientURL)
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	if paced(t, "attempts", "the first 0.9 s", dense, quiet, 20)*2 < dense {
		t.Fatalf("%d attempts in 1.5-3 s against %d in the first 0.9 s with the notices refused; want the pace kept", quiet, dense)
	}
}

// paced logs the requests of kind made in the window dense (the first
// second) and in 1.5-3 s (quiet), skips the test when the first are under
// minDense (too slow a machine to tell), and returns quiet.
func paced(t *testing.T, kind, window string, dense, quiet, minDense uint64) uint64 {
	t.Helper()
	t.Logf("%d %s in %s, %d in 1.5-3 s", dense, kind, window, quiet)
	if dense < minDense {
		t.Skipf("only %d %s in %s: too slow a machine to tell", dense, kind, window)
	}
	return quiet
}

// startNATSDenyingNotices runs an embedded nats-server with two users: o
// may do anything, c may not subscribe to owner notices (the client
// principal of TestRestrictedClient may; another deployment's may not).
// It returns their URLs.
func startNATSDenyingNotices(t *testing.T) (ownerURL, clientURL string) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "c", Password: "c", Permissions: &server.Permissions{
				Subscribe: &server.SubjectPermission{Deny: []string{"brook.s.*.owner.*"}},
			}},
			{Username: "o", Password: "o"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	t.Cleanup(s.Shutdown)
	return fmt.Sprintf("nats://o:o@%s", s.Addr().String()), fmt.Sprintf("nats://c:c@%s", s.Addr().String())
}

// The owner dies holding a publish and nobody serves the stream for 3 s:
// the owner watch probes every 100 ms for the first second of the wait,
// then backs off to a probe a second, as the new owner's notice kicks a
// probe at once (which abandons the held attempt; its retry is confirmed
// by the new owner). Before, it probed every 100 ms throughout: more
// probes in 1.5-3 s than in 0.25-1.25 s.
func TestProbesSlowDownWhileNobodyServesAndNoticesAreHeld(t *testing.T) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, WithRequestTimeout(10*time.Second))
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	a.holdNext()
	var b *standInOwner
	st, pc, err := statsWhilePublishing(t, c, a.held, []time.Duration{250 * time.Millisecond, 1250 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}, func() {
		b = startOwner(t, url, 2)
		announce(t, b, "h2")
	})
	if err != nil || pc.Epoch != 2 || b.pubs.Load() != 1 {
		t.Fatalf("publish: %+v %v; the new owner saw %d publishes, want 1", pc, err, b.pubs.Load())
	}
	dense, quiet := st[1].Sub(st[0]).Probes, st[3].Sub(st[2]).Probes
	if paced(t, "probes", "0.25-1.25 s", dense, quiet, 4)*2 > dense {
		t.Fatalf("%d probes in 1.5-3 s against %d in 0.25-1.25 s; want under half once nobody served for a second", quiet, dense)
	}
}

// The coordinators said the stream is recovering: the retries ask them
// again only every infoSettled intervals (here 320 ms), not at the
// doubling wait's bound (80 ms), since the failover's end comes as the new
// owner's notice and a confirmed retry.
func TestRetryAsksNoMoreOnceTheStreamIsRecovering(t *testing.T) {
	a, i := retryRecovering(t, 10*time.Millisecond, 1200*time.Millisecond, 100)
	// At 0, then every 320 ms: 4 or 5; at the 80 ms bound it was 16 or so.
	if i < 2 || i > 6 {
		t.Fatalf("%d stream.info requests for %d attempts over 1.2 s, want 2 to 6 (every 320 ms once recovering)", i, a)
	}
}
