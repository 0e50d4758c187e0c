package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// builtBins builds the binaries once per test binary run, into a directory
// removed by TestMain.
var builtBins = sync.OnceValues(func() (Bins, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := RepoRoot(ctx)
	if err != nil {
		return Bins{}, err
	}
	return Build(ctx, root, filepath.Join(testBinDir, "bin"))
})

// startBuiltCluster builds the binaries and starts a cluster, or skips the
// test when the services do not build yet.
func startBuiltCluster(t *testing.T, ctx context.Context, cfg Config) *Cluster {
	t.Helper()
	bins, err := builtBins()
	if bins.Coordinator == "" || bins.StreamHost == "" {
		t.Skipf("skipping: the service binaries do not build yet:\n%v", err)
	}
	if err != nil {
		t.Logf("some binaries did not build (continuing without them):\n%v", err)
	}
	cfg.Bins = bins
	if bins.Attention == "" {
		cfg.Attention = false
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:\n%s", c.LogTails(40))
		}
		_ = c.Stop()
	})
	return c
}

// The smoke test: a 3-coordinator, 4-host cluster forms, a 3-copy stream
// takes 100 records (half sync, half through the async window) and a
// durable consumer reads them all back at the offsets they were confirmed
// at; then everything stops gracefully. NATS is a cluster of three
// servers.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx := ctxTimeout(t, 3*time.Minute)
	c := startBuiltCluster(t, ctx, Config{Attention: true, NATSServers: 3})

	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatalf("leader: %v", err)
	}
	t.Logf("coordinator leader: replica %d", leader)
	if err := c.WaitNodesLive(ctx, 4); err != nil {
		t.Fatalf("nodes: %v", err)
	}

	cl, err := client.Connect(ctx, c.NATSURL(), append(c.ClientOptions(auth.Admin), client.WithName("brook-smoke"), client.WithRetry(0, 30*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.Close(); err != nil {
			t.Error(err)
		}
	}()

	const stream, total = "smoke", 100
	info, err := cl.CreateStream(ctx, wire.StreamCreate{Stream: stream, Copies: 3})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Logf("created: %+v", info)
	if info, err = c.WaitServing(ctx, stream); err != nil {
		t.Fatalf("stream serving: %v", err)
	}
	a := info.Assignment
	if len(a.Copies()) != 3 {
		t.Fatalf("assignment %+v has %d copies, want 3", a, len(a.Copies()))
	}
	w := policy.StampW(a.Policy, len(a.Copies()))

	sent := make(map[uint64]string, total) // offset -> record
	record := func(i int) string { return fmt.Sprintf("smoke-%03d", i) }
	confirmed := func(i int, pc wire.PublishConfirm) {
		if prev, dup := sent[pc.Offset]; dup {
			t.Fatalf("records %q and %q both confirmed at offset %d", prev, record(i), pc.Offset)
		}
		if pc.Copies < w {
			t.Fatalf("record %d confirmed with %d copies, below W=%d", i, pc.Copies, w)
		}
		sent[pc.Offset] = record(i)
	}
	for i := range total / 2 {
		pc, err := cl.Publish(ctx, stream, []byte(record(i)), client.WithProducer("smoke", uint64(i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		confirmed(i, pc)
	}
	pub, err := cl.NewAsyncPublisher(stream, client.AsyncConfig{Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	futs := make([]*client.Future, 0, total/2)
	for i := total / 2; i < total; i++ {
		f, err := pub.PublishAsync(ctx, []byte(record(i)), client.WithProducer("smoke", uint64(i)))
		if err != nil {
			t.Fatalf("publish async %d: %v", i, err)
		}
		futs = append(futs, f)
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("async publisher close: %v", err)
	}
	for j, f := range futs {
		pc, err := f.Result()
		if err != nil {
			t.Fatalf("publish async %d: %v", total/2+j, err)
		}
		confirmed(total/2+j, pc)
	}

	cn, err := cl.NewConsumer(stream, client.ConsumerConfig{Cursor: "smoke-reader", MaxRecords: 32, Wait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range total {
		rec, err := cn.Next(ctx)
		if err != nil {
			t.Fatalf("consume: %v", err)
		}
		want, ok := sent[rec.Offset]
		if !ok {
			t.Fatalf("consumed offset %d that no publish was confirmed at (%q)", rec.Offset, rec.Data)
		}
		if string(rec.Data) != want {
			t.Fatalf("offset %d holds %q, want %q", rec.Offset, rec.Data, want)
		}
		delete(sent, rec.Offset)
	}
	if len(sent) != 0 {
		t.Fatalf("%d confirmed records not consumed", len(sent))
	}
	if err := cn.Close(ctx); err != nil {
		t.Fatalf("consumer close (commit): %v", err)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, p := range c.Procs() {
		if st := p.ExitState(); st == nil || st.ExitCode() != 0 {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v", p.Name, st)
		}
	}
}

// With Config.NATSBin the three nats-servers are processes of their own
// with the generated deployment's accounts: the cluster forms (the
// coordinators' system-account connections authenticate), a publish is
// confirmed by three copies, and Stop leaves no server process.
func TestNATSProcessesCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx := ctxTimeout(t, 3*time.Minute)
	c := startBuiltCluster(t, ctx, Config{NATSServers: 3, NATSBin: natsServerBin(t), DirectHosts: true})
	for i := range c.NATSServers() {
		if ns := c.NATSServer(i); ns.Server() != nil || ns.proc == nil {
			t.Fatalf("nats-server %d is embedded", i)
		}
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatalf("leader: %v", err)
	}
	if err := c.WaitNodesLive(ctx, c.Hosts()); err != nil {
		t.Fatalf("nodes: %v", err)
	}
	const stream = "procs"
	if _, err := c.Client().CreateStream(ctx, wire.StreamCreate{Stream: stream, Copies: 3}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := c.WaitServing(ctx, stream); err != nil {
		t.Fatalf("stream serving: %v", err)
	}
	cl, err := client.Connect(ctx, c.NATSURL(), append(c.ClientOptions(auth.Client), client.WithRetry(0, 30*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := cl.Publish(ctx, stream, []byte("hello"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if pc.Copies < 2 {
		t.Fatalf("confirmed with %d copies", pc.Copies)
	}
	if err := cl.Close(); err != nil {
		t.Error(err)
	}
	// The services connect to the servers as processes do: their
	// connections show up in the servers' monitoring.
	if i, err := c.NATSServerOf("brook-streamhost:h1"); err != nil || i < 0 {
		t.Errorf("no server holds h1's connection: %d, %v", i, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	for i := range c.NATSServers() {
		assertGone(t, c.NATSServer(i).proc)
	}
}
