package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/bench"
)

// Owner balance (--balance-streams): n streams of three copies on the
// local cluster's four hosts, each written by one synchronous publisher
// every balancePeriod (light load); the host owning the most is SIGKILLed,
// its streams fail over, and once they all serve it is restarted. The
// balancer then moves ownership back with planned moves. The bench reports
// how long after the restart every host owned within balanceMargin of the
// even share, the owner counts over time, and the write gap of the moved
// streams: the longest a publish of theirs took from its first attempt to
// its confirm (it is retried across the move) after the restart, and the
// one publish of each that was first confirmed at the new epoch. Then it
// reads every stream back: every confirmed record, in order.

// balancePeriod is how often each stream's publisher publishes.
const balancePeriod = 250 * time.Millisecond

// balanceMargin is the goal: every host within 10% of the even
// share.
const balanceMargin = 0.1

// balanceWait bounds the wait for balance after the restart.
const balanceWait = 90 * time.Second

// balanceProducer is the producer id of every stream's publisher.
const balanceProducer = "balance"

// balanceResult is what one owner-balance run measured.
type balanceResult struct {
	Streams int
	Killed  string
	// Owned is how many streams the killed host owned.
	Owned int
	// Balanced is how long after the restart every host first owned
	// within the margin (zero if it never did within balanceWait).
	Balanced time.Duration
	// Timeline holds the owner counts sampled after the restart.
	Timeline []ownerSample
	// Moved holds, per stream whose owner changed after the restart, the
	// longest publish (first attempt to confirm) after the restart,
	// ascending; Stayed the same for the others (the noise floor).
	Moved, Stayed []time.Duration
	// Across holds, per moved stream, the publish first confirmed at the
	// new epoch (the one that spanned the move): its write gap as its
	// writer saw it, ascending.
	Across []time.Duration
	// Confirmed counts the confirmed records read back.
	Confirmed int
}

// ownerSample is the owner count per host at one time after the restart.
type ownerSample struct {
	At     time.Duration
	Owners map[string]int
}

func (r balanceResult) write(w io.Writer) {
	ignoreWrite(fmt.Fprintf(w, "owner balance: %d streams of %d copies on 4 hosts, one publish per stream every %v; SIGKILL of %s (owned %d), then restart\n",
		r.Streams, benchCopies, balancePeriod, r.Killed, r.Owned))
	for _, s := range r.Timeline {
		hosts := slices.Sorted(maps.Keys(s.Owners))
		line := ""
		for _, h := range hosts {
			line += fmt.Sprintf(" %s=%d", h, s.Owners[h])
		}
		ignoreWrite(fmt.Fprintf(w, "  +%5.1fs owners%s\n", s.At.Seconds(), line))
	}
	if r.Balanced > 0 {
		ignoreWrite(fmt.Fprintf(w, "balanced (every host within %.0f%% of the even share) %.1f s after the restart\n", 100*balanceMargin, r.Balanced.Seconds()))
	} else {
		ignoreWrite(fmt.Fprintf(w, "NOT balanced within %v of the restart\n", balanceWait))
	}
	line := func(what string, ds []time.Duration) {
		ignoreWrite(fmt.Fprintf(w, "%-34s %5d  p50 %4d ms  p90 %4d ms  p99 %4d ms  max %4d ms\n", what, len(ds),
			bench.Quantile(ds, 0.5).Milliseconds(), bench.Quantile(ds, 0.9).Milliseconds(),
			bench.Quantile(ds, 0.99).Milliseconds(), bench.Quantile(ds, 1).Milliseconds()))
	}
	line("publish across the move, moved", r.Across)
	line("longest publish, moved streams", r.Moved)
	line("longest publish, other streams", r.Stayed)
	ignoreWrite(fmt.Fprintf(w, "confirmed records read back: %d\n", r.Confirmed))
}

// balanceLoad is the publishers' record: per stream, the last sequence
// confirmed and the longest publish started after mark.
type balanceLoad struct {
	mu        sync.Mutex
	confirmed map[string]uint64
	longest   map[string]time.Duration
	// epoch is the epoch of each stream's last confirm; across holds,
	// per stream, the longest publish after mark that was the first
	// confirmed at a new epoch (it spanned the move or failover).
	epoch  map[string]uint64
	across map[string]time.Duration
	// acrossAt is when each stream's publish in across began, so that
	// the slowest can be found in the hosts' logs.
	acrossAt map[string]time.Time
	mark     time.Time
}

// publish publishes to stream every balancePeriod until ctx ends, each
// record retried until confirmed.
func (l *balanceLoad) publish(ctx context.Context, c *client.Client, stream string, log *slog.Logger) {
	tick := time.NewTicker(balancePeriod)
	defer tick.Stop()
	for seq := uint64(1); ctx.Err() == nil; seq++ {
		began := time.Now()
		var pc wire.PublishConfirm
		for {
			var err error
			pc, err = c.Publish(ctx, stream, balanceRecord(stream, seq), client.WithProducer(balanceProducer, seq))
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			log.Debug("publish failed; retrying", "stream", stream, "seq", seq, "err", err)
		}
		took := time.Since(began)
		l.mu.Lock()
		l.confirmed[stream] = seq
		if !l.mark.IsZero() && began.After(l.mark) {
			l.longest[stream] = max(l.longest[stream], took)
			if pc.Epoch > l.epoch[stream] && took >= l.across[stream] {
				l.across[stream], l.acrossAt[stream] = took, began
			}
		}
		l.epoch[stream] = max(l.epoch[stream], pc.Epoch)
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// balanceRecord is the payload of stream's seq-th record.
func balanceRecord(stream string, seq uint64) []byte {
	return fmt.Appendf(nil, "%s/%d", stream, seq)
}

// runBalance runs the owner-balance measure (see the comment at the top).
func runBalance(ctx context.Context, o options, n int, log *slog.Logger) (balanceResult, error) {
	res := balanceResult{Streams: n}
	cl, err := startLocalCluster(ctx, o, log)
	if err != nil {
		return res, err
	}
	defer func() { _ = cl.Stop() }()
	c, err := connectRetrying(ctx, cl, "brook-bench-balance", o.busPublish, log)
	if err != nil {
		return res, err
	}
	defer closeClient(c, log)
	streams := make([]string, n)
	for i := range streams {
		streams[i] = fmt.Sprintf("bal-%05d", i)
	}
	if _, err := createStreams(ctx, c, streams, o.createConcurrency, log); err != nil {
		return res, err
	}
	if err := forEach(ctx, streams, 64, func(ctx context.Context, s string) error {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := cl.WaitServing(wctx, s)
		return err
	}); err != nil {
		return res, err
	}
	load := &balanceLoad{confirmed: map[string]uint64{}, longest: map[string]time.Duration{},
		epoch: map[string]uint64{}, across: map[string]time.Duration{}, acrossAt: map[string]time.Time{}}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() { load.publish(lctx, c, s, log) })
	}
	owners, err := ownersOf(ctx, c)
	if err != nil {
		return res, err
	}
	for _, h := range slices.Sorted(maps.Values(owners)) {
		if k := countOwned(owners, h); k > res.Owned {
			res.Killed, res.Owned = h, k
		}
	}
	victim := cl.HostByNode(res.Killed)
	if victim == nil {
		return res, fmt.Errorf("no process for node %s", res.Killed)
	}
	time.Sleep(3 * time.Second) // the load runs before the kill
	log.Info("killing the host that owns the most streams", "node", res.Killed, "owned", res.Owned)
	if err := cl.Kill(victim, syscall.SIGKILL); err != nil {
		return res, err
	}
	// Wait until the killed host owns nothing and every stream serves.
	for ctx.Err() == nil {
		o, err := ownersOf(ctx, c)
		if err == nil && len(o) == n && countOwned(o, res.Killed) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	log.Info("the killed host's streams failed over; restarting it in 2 s", "node", res.Killed)
	time.Sleep(2 * time.Second)
	if err := cl.Restart(ctx, victim); err != nil {
		return res, err
	}
	restarted := time.Now()
	load.mu.Lock()
	load.mark = restarted
	load.mu.Unlock()
	log.Info("restarted the killed host", "node", res.Killed)
	before, err := ownersOf(ctx, c)
	if err != nil {
		return res, err
	}
	var last map[string]string
	for time.Since(restarted) < balanceWait && ctx.Err() == nil {
		time.Sleep(time.Second)
		o, err := ownersOf(ctx, c)
		if err != nil {
			log.Warn("stream list failed", "err", err)
			continue
		}
		last = o
		counts := map[string]int{}
		for i := range cl.Hosts() {
			counts[cl.Host(i).Node] = 0
		}
		for _, h := range o {
			counts[h]++
		}
		at := time.Since(restarted)
		res.Timeline = append(res.Timeline, ownerSample{At: at, Owners: counts})
		if len(o) == n && withinMargin(counts, n, balanceMargin) {
			res.Balanced = at
			break
		}
	}
	time.Sleep(2 * time.Second) // publishes across the last moves complete
	stopLoad()
	wg.Wait()
	load.mu.Lock()
	defer load.mu.Unlock()
	for _, s := range streams {
		d := load.longest[s]
		if before[s] != last[s] {
			res.Moved = append(res.Moved, d)
			res.Across = append(res.Across, load.across[s])
		} else {
			res.Stayed = append(res.Stayed, d)
		}
	}
	logSlowestAcross(load, before, last, log)
	slices.Sort(res.Moved)
	slices.Sort(res.Stayed)
	slices.Sort(res.Across)
	var mu sync.Mutex
	err = forEach(ctx, streams, 32, func(ctx context.Context, s string) error {
		k, err := checkConfirmed(ctx, c, s, load.confirmed[s])
		mu.Lock()
		res.Confirmed += k
		mu.Unlock()
		return err
	})
	if err == nil && res.Balanced == 0 {
		err = fmt.Errorf("owners not within %.0f%% of the even share %v after the restart", 100*balanceMargin, balanceWait)
	}
	return res, err
}

// logSlowestAcross logs the moved streams whose publish across the move
// took longest, with when it began and the owners before and after, so
// that they can be laid against the hosts' logs (--dir).
func logSlowestAcross(load *balanceLoad, before, last map[string]string, log *slog.Logger) {
	var moved []string
	for s, d := range load.across {
		if d > 0 && before[s] != last[s] {
			moved = append(moved, s)
		}
	}
	slices.SortFunc(moved, func(a, b string) int { return cmp.Compare(load.across[b], load.across[a]) })
	for _, s := range moved[:min(len(moved), 5)] {
		log.Info("slow publish across a move", "stream", s, "took", load.across[s],
			"began", load.acrossAt[s].UTC().Format("15:04:05.000"), "owner_before", before[s], "owner_after", last[s])
	}
}

// ownersOf lists the streams that serve with no recovery pending, each
// with its owner.
func ownersOf(ctx context.Context, c *client.Client) (map[string]string, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := c.ListStreams(lctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Streams {
		if s.Status == wire.StatusServing && s.Recovery == nil {
			out[s.Stream] = s.Assignment.Owner
		}
	}
	return out, nil
}

// countOwned counts the streams node owns in owners.
func countOwned(owners map[string]string, node string) int {
	n := 0
	for _, h := range owners {
		if h == node {
			n++
		}
	}
	return n
}

// withinMargin reports whether every count is within margin of the even
// share of total.
func withinMargin(counts map[string]int, total int, margin float64) bool {
	even := float64(total) / float64(len(counts))
	for _, k := range counts {
		if f := float64(k); f < even*(1-margin) || f > even*(1+margin) {
			return false
		}
	}
	return true
}

// checkConfirmed reads stream from its start and demands records 1 to
// confirmed in order, each once (a record published but not confirmed
// when the load stopped may follow), and returns how many it read back.
func checkConfirmed(ctx context.Context, c *client.Client, stream string, confirmed uint64) (int, error) {
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var next, offset uint64 = 1, 0
	for next <= confirmed {
		b, err := c.Fetch(fctx, stream, wire.FetchRequest{Start: "offset", Offset: offset, MaxRecords: 500, WaitMS: 200})
		if err != nil {
			return int(next - 1), fmt.Errorf("read %s back at offset %d: %w", stream, offset, err)
		}
		for _, r := range b.Records {
			if next > confirmed {
				break
			}
			if want := balanceRecord(stream, next); !bytes.Equal(r.Data, want) {
				return int(next - 1), fmt.Errorf("%s offset %d holds %q, want %q (confirmed up to %d)", stream, r.Offset, r.Data, want, confirmed)
			}
			next++
		}
		offset = b.Next
	}
	return int(next - 1), nil
}
