package cluster

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// failoverCase loses the owner of a 3-copy majority_durable stream while a
// producer keeps publishing through the client's retries, then checks that
// every confirmed record is delivered at exactly one offset, that the
// stream serves again at a new epoch without an operator, and that the old
// owner, back again, follows without another recovery.
func failoverCase(t *testing.T, lose func(c *Cluster, owner int), restore func(c *Cluster, owner int)) {
	ctx := ctxTimeout(t, 3*time.Minute)
	// Three hosts: the stream's three copies can only be whole again when
	// the old owner rejoins.
	c := startBuiltCluster(t, ctx, Config{
		Hosts:     3,
		CoordArgs: []string{"--ttl", "1s"},
		HostArgs:  []string{"--heartbeat-interval", "200ms"},
	})
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesLive(ctx, 3); err != nil {
		t.Fatal(err)
	}
	cl, err := client.Connect(ctx, c.NATSURL(), append(c.ClientOptions(auth.Admin), client.WithName("brook-failover-test"),
		client.WithRequestTimeout(2*time.Second), client.WithRetry(0, time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.Close(); err != nil {
			t.Error(err)
		}
	}()

	const stream = "failover"
	if _, err := cl.CreateStream(ctx, wire.StreamCreate{Stream: stream, Copies: 3}); err != nil {
		t.Fatal(err)
	}
	before, err := c.WaitServing(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	ownerNode := before.Assignment.Owner
	owner := -1
	for i := range c.Hosts() {
		if c.Host(i).Node == ownerNode {
			owner = i
		}
	}
	if owner < 0 {
		t.Fatalf("owner %q is not a host of the cluster", ownerNode)
	}

	// A producer publishes until told to stop; every confirm is kept.
	var mu sync.Mutex
	confirmed := map[uint64]string{}
	var pubErr error
	stop := make(chan struct{})
	produced := make(chan struct{})
	progress := make(chan uint64, 1024) // the epoch of each confirm
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			data := fmt.Sprintf("rec-%05d", i)
			pc, err := cl.Publish(ctx, stream, []byte(data), client.WithProducer("failover", uint64(i)))
			if err != nil {
				if client.IsConfirmTimeout(err) {
					continue // not confirmed: no promise to keep
				}
				mu.Lock()
				pubErr = fmt.Errorf("publish %d: %w", i, err)
				mu.Unlock()
				return
			}
			mu.Lock()
			if prev, dup := confirmed[pc.Offset]; dup && prev != data {
				pubErr = fmt.Errorf("offset %d confirmed for %q and %q", pc.Offset, prev, data)
			}
			confirmed[pc.Offset] = data
			mu.Unlock()
			select {
			case progress <- pc.Epoch:
			default:
			}
		}
	}()
	// waitProgress waits for n confirms at minEpoch or later.
	waitProgress := func(n int, minEpoch uint64) {
		t.Helper()
		for got := 0; got < n; {
			select {
			case epoch := <-progress:
				if epoch >= minEpoch {
					got++
				}
			case <-produced:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("producer stopped: %v", pubErr)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	waitProgress(50, 0)
	t.Logf("losing owner %s", ownerNode)
	lose(c, owner)
	// The stream serves again under a new owner, through the client's
	// retries.
	waitProgress(50, before.Assignment.Epoch+1)
	close(stop)
	<-produced
	mu.Lock()
	if pubErr != nil {
		mu.Unlock()
		t.Fatal(pubErr)
	}
	want := len(confirmed)
	mu.Unlock()

	after, err := c.WaitServing(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if after.Assignment.Owner == ownerNode || after.Assignment.Epoch != before.Assignment.Epoch+1 {
		t.Fatalf("after failover: assignment %+v, before %+v", after.Assignment, before.Assignment)
	}
	t.Logf("new owner %s at epoch %d; %d records confirmed", after.Assignment.Owner, after.Assignment.Epoch, want)

	cn, err := cl.NewConsumer(stream, client.ConsumerConfig{Cursor: "reader", MaxRecords: 256, Wait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(seen) < want {
		rec, err := cn.Next(rctx)
		if err != nil {
			t.Fatalf("consume after %d records: %v", len(seen), err)
		}
		mu.Lock()
		exp, ok := confirmed[rec.Offset]
		mu.Unlock()
		if ok && exp != string(rec.Data) {
			t.Fatalf("offset %d holds %q, confirmed as %q", rec.Offset, rec.Data, exp)
		}
		if prev, dup := seen[string(rec.Data)]; dup {
			t.Fatalf("%q delivered at offsets %d and %d", rec.Data, prev, rec.Offset)
		}
		if ok {
			seen[string(rec.Data)] = rec.Offset
		}
	}

	// The old owner comes back and follows, without another recovery.
	restore(c, owner)
	err = c.poll(ctx, "old owner following", func(ctx context.Context) (bool, error) {
		info, err := c.StreamInfo(ctx, stream)
		if err != nil {
			return false, err
		}
		if info.Assignment.Epoch != after.Assignment.Epoch {
			return false, fmt.Errorf("epoch moved to %d: another recovery", info.Assignment.Epoch)
		}
		if !info.Assignment.Includes(ownerNode) || info.Status != wire.StatusServing {
			return false, nil
		}
		for _, ct := range info.CopyTails {
			if ct.Node == ownerNode && ct.Published && ct.Role == wire.RoleFollower && !ct.Sealed &&
				ct.Epoch == after.Assignment.Epoch {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFailoverKillOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	failoverCase(t,
		func(c *Cluster, owner int) {
			if err := c.Kill(c.Host(owner), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
		func(c *Cluster, owner int) {
			if err := c.Restart(context.Background(), c.Host(owner)); err != nil {
				t.Fatal(err)
			}
		})
}

func TestFailoverCutOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	failoverCase(t,
		func(c *Cluster, owner int) { c.CutHost(owner) },
		func(c *Cluster, owner int) { c.HealHost(owner) })
}
