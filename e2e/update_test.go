package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestStreamUpdate changes a live 3-copy stream under load with
// stream.update:
//
//   - majority_durable (W=2) to local_durable (W=3) needs more copies to
//     confirm, so it goes through a recovery (reason policy): the stream
//     serves at the next epoch, and confirms there name W=3 on 3 copies;
//   - back to majority_durable needs fewer, so it is stamped at once: no
//     recovery, the same epoch, and later confirms at that epoch name W=2;
//   - min_copies 3, then the owner is SIGKILLed: on 2 copies the new owner
//     refuses publishes (not_enough_copies) and confirms nothing; min_copies
//     lowered to 2 lets the same assignment confirm again, without a copy
//     coming back;
//   - retention reaches the hosts: a second stream's copy drops its
//     records below the new bound.
//
// Every confirmed record of the loaded stream is read back.
func TestStreamUpdate(t *testing.T) {
	e := newEnv(t, opts{coordArgs: []string{"--replace-after", "5m"}, timeout: 2 * time.Minute})
	const stream = "update"
	first := e.createStream(stream, 3)
	epoch := first.Assignment.Epoch

	led := workload.NewLedger()
	ld := e.load(stream, "up", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, epoch)

	// More copies to confirm: through a recovery.
	info, err := e.cl.UpdateStream(e.ctx, wire.StreamUpdate{Stream: stream, Policy: "local_durable"})
	if err != nil {
		t.Fatal(err)
	}
	if r := info.Recovery; (r == nil || r.Reason != "policy") && info.Assignment.Epoch == epoch {
		t.Fatalf("local_durable answered without a recovery at epoch %d: %s", epoch, describe(info))
	}
	every := e.waitInfo(stream, stream+" serving under local_durable", func(i wire.StreamInfo) (bool, error) {
		return i.Status == wire.StatusServing && i.Recovery == nil && i.Assignment.Epoch == epoch+1, nil
	})
	if every.Policy != "local_durable" || every.W != 3 || every.R != 1 || len(every.Assignment.Copies()) != 3 {
		t.Fatalf("after the policy recovery: %s W=%d R=%d", describe(every), every.W, every.R)
	}
	e.logf("%s serves under local_durable at epoch %d (owner %s)", stream, every.Assignment.Epoch, every.Assignment.Owner)
	e.waitConfirms(led, 100, every.Assignment.Epoch)
	w3 := led.Count(func(o workload.Outcome) bool {
		return o.Confirmed && o.Confirm.Epoch == every.Assignment.Epoch && o.Confirm.W == 3 && o.Confirm.Copies == 3
	})
	if w3 == 0 {
		t.Fatalf("no confirm at epoch %d named W=3 on 3 copies: %v", every.Assignment.Epoch, led.Stats())
	}

	// Fewer copies to confirm: stamped at once, same epoch.
	before := time.Now()
	info, err = e.cl.UpdateStream(e.ctx, wire.StreamUpdate{Stream: stream, Policy: "majority_durable"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Recovery != nil || info.Assignment.Epoch != every.Assignment.Epoch || info.W != 2 || len(info.Starts) != len(every.Starts) {
		t.Fatalf("majority_durable did not commit at once: %s W=%d", describe(info), info.W)
	}
	ctx, cancel := context.WithTimeout(e.ctx, waitLong)
	err = led.WaitCount(ctx, 50, func(o workload.Outcome) bool {
		return o.Confirmed && o.Sent.After(before.Add(time.Second)) && o.Confirm.Epoch == every.Assignment.Epoch && o.Confirm.W == 2
	})
	cancel()
	if err != nil {
		t.Fatalf("confirms under W=2 at epoch %d: %v; %v", every.Assignment.Epoch, err, led.Stats())
	}

	// A floor above what the next failover leaves.
	if info, err = e.cl.UpdateStream(e.ctx, wire.StreamUpdate{Stream: stream, MinCopies: ptr(3)}); err != nil || info.MinCopies != 3 {
		t.Fatalf("min_copies 3: %v, %s", err, describe(info))
	}
	owner := every.Assignment.Owner
	e.signal(e.host(owner), syscall.SIGKILL)
	short := e.waitServingAt(stream, every.Assignment.Epoch+1, owner)
	if u := short.UnderReplicated; u == nil || u.Copies != 2 || !u.PublishesRefused {
		t.Fatalf("2 copies under min_copies 3: %s, %+v", describe(short), u)
	}
	e.refusedBelowFloor(stream)
	if n := led.Count(func(o workload.Outcome) bool { return o.Confirmed && o.Confirm.Epoch == short.Assignment.Epoch }); n != 0 {
		t.Fatalf("%d publishes confirmed on 2 copies under min_copies 3", n)
	}
	if info, err = e.cl.UpdateStream(e.ctx, wire.StreamUpdate{Stream: stream, MinCopies: ptr(2)}); err != nil || info.MinCopies != 2 ||
		info.Assignment.Epoch != short.Assignment.Epoch || info.UnderReplicated == nil || info.UnderReplicated.PublishesRefused {
		t.Fatalf("min_copies 2: %v, %s", err, describe(info))
	}
	e.waitConfirms(led, 100, short.Assignment.Epoch)
	e.stopLoad(ld, led)
	rd := workload.NewReader(e.cl, stream, "update-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})

	e.retentionReachesTheHost()
}

// retentionReachesTheHost updates the retention of a one-copy stream that
// holds 20 records to 5: its owner drops the oldest 15 (retention runs
// every 2 s).
func (e *env) retentionReachesTheHost() {
	e.t.Helper()
	const stream = "update-retention"
	e.createStream(stream, 1)
	for i := range 20 {
		if _, err := e.cl.Publish(e.ctx, stream, fmt.Appendf(nil, "r%d", i)); err != nil {
			e.t.Fatal(err)
		}
	}
	info, err := e.cl.UpdateStream(e.ctx, wire.StreamUpdate{Stream: stream, Retention: &wire.Retention{MaxRecords: 5}})
	if err != nil || info.Retention.MaxRecords != 5 {
		e.t.Fatalf("retention update: %v, %+v", err, info.Retention)
	}
	e.poll(stream+" keeping its last 5 records", waitLong, func(ctx context.Context) (bool, string, error) {
		b, err := e.cl.Fetch(ctx, stream, wire.FetchRequest{Start: "earliest", MaxRecords: 1})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(b.Records) == 0 {
			return false, "no records", nil
		}
		return b.Records[0].Offset == 15, fmt.Sprintf("earliest offset %d", b.Records[0].Offset), nil
	})
	e.logf("%s keeps offsets 15..19 after its retention was set to 5 records", stream)
}

func ptr[T any](v T) *T { return &v }
