package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/bench"
)

// The brook target end to end on a local process cluster: a short run with
// the owner killed must verify, with a failover trace id and the old owner
// back as a follower without another recovery.
func TestBrookTargetKillOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	target, closer, err := startBrook(ctx, options{stream: "durable", workDir: dir}, log)
	if err != nil {
		t.Fatalf("start brook: %v\n%s", err, logs.String())
	}
	defer closer()
	res, err := bench.Run(ctx, target, bench.Config{
		Duration: 4 * time.Second, RecordSize: 64, Publishers: 2, Window: 4,
		Kill: true, KillAt: 1500 * time.Millisecond, FollowReaders: 1, Logger: log,
		SettleAfterStop: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, logs.String())
	}
	var text bytes.Buffer
	_ = res.WriteText(&text)
	t.Logf("result:\n%s", text.String())
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
	}
	if !res.Verify.OK || res.Confirmed == 0 || res.FollowedAt == 0 {
		fail("verification %+v with %d confirmed, %d followed", res.Verify, res.Confirmed, res.FollowedAt)
	}
	if res.Victim == "" || res.KillError != "" || res.UnavailableMS <= 0 || res.AfterKill.Records == 0 {
		fail("kill of %q (error %q): unavailable %d ms, %d records after", res.Victim, res.KillError, res.UnavailableMS, res.AfterKill.Records)
	}
	if id, _ := res.After["failover_trace_id"].(string); len(id) != 32 {
		fail("failover trace id %v", res.After["failover_trace_id"])
	}
	if ok, _ := res.After["old_owner_rejoined_ok"].(bool); !ok {
		fail("old owner rejoined: %v", res.After["old_owner_rejoined"])
	}
	if a, _ := res.After["final_assignment"].(string); !strings.Contains(a, res.Victim) || !strings.Contains(a, "epoch 2") {
		fail("final assignment %q: want the victim %s back as a follower at epoch 2", a, res.Victim)
	}
	if t.Failed() {
		t.Logf("bench log:\n%s", logs.String())
		if files, _ := filepath.Glob(filepath.Join(dir, "cluster", "logs", "*.log")); len(files) > 0 {
			for _, f := range files {
				b, _ := os.ReadFile(f)
				if len(b) > 1500 {
					b = b[len(b)-1500:]
				}
				t.Logf("----- %s\n%s", f, b)
			}
		}
	}
}

// The mass failover on a local process cluster, small: every stream the
// killed host owned must serve again, and every stream must hold both of
// its records once each (runMassFailover checks that and fails otherwise).
// Two clients publish (--failover-clients), and the window's counts are
// both clients' together: at least one attempt per stream.
func TestMassFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	res, err := runMassFailover(ctx, options{workDir: t.TempDir(), failoverClients: 2}, 24, log)
	var text bytes.Buffer
	res.write(&text)
	t.Logf("result:\n%s", text.String())
	if err != nil {
		t.Fatalf("mass failover: %v\n%s", err, logs.String())
	}
	if res.NoKill {
		t.Fatal("options' zero value ran the burst without a kill; want the mass failover")
	}
	if res.Owned == 0 || len(res.Serve) != res.Owned || len(res.Serve)+len(res.Others) != res.Streams {
		t.Fatalf("killed %s owning %d; %d owned and %d others served again, of %d", res.Killed, res.Owned, len(res.Serve), len(res.Others), res.Streams)
	}
	if res.Clients != 2 || res.Cost.Client.PublishAttempts < uint64(res.Streams) {
		t.Fatalf("%d clients made %d publish attempts in the window for %d streams; want 2 clients and at least one attempt a stream",
			res.Clients, res.Cost.Client.PublishAttempts, res.Streams)
	}
}
