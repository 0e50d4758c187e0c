package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/connwatch"
)

// TestBlackholeOwner: partition the owner from NATS silently (its proxy
// keeps the connections open and drops every byte, both ways), so that
// neither the NATS server nor the host sees a disconnect: only the
// missing heartbeats tell the coordinator. The stream serves again at the
// next epoch; the write unavailability (from the blackhole to the first
// confirm of a publish begun after it) is logged. Healed, the old owner
// rejoins as a follower, catches up, and every confirmed record reads back
// at its offset.
//
// The blackhole cuts the bus alone: the suite's client publishes on its
// client link to the owner's host, which the blackhole does not cut, so
// the old owner may go on confirming its publishes until the failover
// seals its followers. Then nothing is confirmed at the old epoch any
// more: the test fails on a confirm at the old epoch after the first one
// at the new epoch, and reports how long the load took to move.
//
// It catches: a failure detector that waits for a disconnect advisory that
// never comes, an owner that keeps confirming once its followers are
// sealed, a client that stays with the old owner on its link, and an
// old owner that does not come back as a follower once its connections
// are closed and it reconnects.
func TestBlackholeOwner(t *testing.T) {
	// BROOK_BLACKHOLE_TTL overrides the coordinators' TTL (default the
	// suites' ttl), to measure a shorter one.
	d, err := envDuration("BROOK_BLACKHOLE_TTL", ttl)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, opts{coordArgs: []string{"--ttl", d.String()}})
	const stream = "blackhole-owner"
	before := e.createStream(stream, 3)
	epoch, oldOwner := before.Assignment.Epoch, before.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(stream, "bh", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	holedAt := time.Now()
	e.c.BlackholeHost(e.hostIndex(oldOwner))
	e.logf("blackholed %s", oldOwner)
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	servingIn := time.Since(holedAt)
	e.waitConfirms(led, 100, epoch+1)
	gap, _, ok := confirmGap(led, holedAt)
	if !ok {
		t.Fatal("no publish begun after the blackhole was confirmed")
	}
	first := holedAt.Add(gap)
	e.logf("write unavailability after blackholing the owner: %v; serving at the new epoch seen after %v (ttl %v; failover %s -> %s at epoch %d, starts %v)",
		first.Sub(holedAt).Round(time.Millisecond), servingIn.Round(time.Millisecond), d, oldOwner, after.Assignment.Owner, after.Assignment.Epoch, after.Starts)
	var firstNew time.Time
	for _, o := range led.Outcomes() {
		if o.Confirmed && o.Confirm.Epoch > epoch && (firstNew.IsZero() || o.Done.Before(firstNew)) {
			firstNew = o.Done
		}
	}
	e.logf("the new owner's first confirm %v after the blackhole", firstNew.Sub(holedAt).Round(time.Millisecond))
	if n := led.Count(func(o workload.Outcome) bool {
		return o.Confirmed && o.Confirm.Epoch == epoch && o.Done.After(firstNew)
	}); n != 0 {
		t.Fatalf("%d confirms at the old epoch %d after the new owner confirmed", n, epoch)
	}

	e.c.HealHost(e.hostIndex(oldOwner))
	e.logf("healed %s", oldOwner)
	e.waitFollower(stream, oldOwner, epoch+1)
	e.waitConfirms(led, 150, epoch+1)

	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, oldOwner)
	rd := workload.NewReader(e.cl, stream, "blackhole-owner-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
}

// TestSilentPartitionFoundByPings: a host partitioned from NATS silently
// finds out by itself. Its connections stay open and nothing gets
// through, so no disconnect comes; its pings go unanswered, it closes its
// connections as stale (and says so in its log), and its /healthz says
// down within (MaxPingsOut+1) x PingInterval of the partition (8 s), plus
// a margin for the health watch and a loaded machine. Healed, it is
// healthy again.
//
// It catches: pings left at nats.go's default (every 2 minutes), which
// left a partitioned host healthy, and on the server it could not reach,
// for minutes; and a health watch that went on saying up while nats.go
// held the connection's lock for its attempts to connect again (2 s
// each; connwatch.Watch.Lost), which took this to 9.3-9.9 s here and
// 12.7 s on a loaded machine.
func TestSilentPartitionFoundByPings(t *testing.T) {
	e := newEnv(t, opts{})
	const i = 0
	p := e.c.Host(i)
	e.poll(p.Name+"'s /healthz says up", waitLong, func(ctx context.Context) (bool, string, error) {
		return p.Healthy(ctx), "", nil
	})
	holedAt := time.Now()
	e.c.BlackholeHost(i)
	bound := time.Duration(connwatch.MaxPingsOut+1)*connwatch.PingInterval + 4*time.Second
	e.poll(p.Name+"'s /healthz says down", 2*bound, func(ctx context.Context) (bool, string, error) {
		return !p.Healthy(ctx), "", nil
	})
	took := time.Since(holedAt)
	e.logf("%s's /healthz said down %v after the blackhole", p.Name, took.Round(time.Millisecond))
	if took > bound {
		t.Errorf("%s found the partition after %v, want within %v", p.Name, took, bound)
	}
	if log := p.LogTail(400); !strings.Contains(log, nats.ErrStaleConnection.Error()) {
		t.Errorf("%s's log does not say its connection went stale:\n%s", p.Name, p.LogTail(30))
	}
	e.c.HealHost(i)
	e.poll(p.Name+"'s /healthz says up once healed", waitLong, func(ctx context.Context) (bool, string, error) {
		return p.Healthy(ctx), "", nil
	})
}
