package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/cluster"
)

// diskFullSize is the tmpfs the owner's data directory is put on: a few
// hundred 64 KiB records fill it.
const diskFullSize = "16m"

// TestOwnerDiskFull: the owner's data directory fills up under a load of
// 64 KiB records. The owner's store fails (no space left on device) and
// latches the error; the host stops its roles and beats leaving with the
// error, so the stream fails over within seconds without an operator and
// serves at the next epoch on another host. /healthz of the failed host
// answers 503, its log names the error, and attention lists it
// (host_store_failed) with the error. The publishes that met the failure
// are retried by the client at the new owner (none fails as internal),
// and every confirmed record is read back at its offset.
//
// It catches: a host whose store failed but that goes on heartbeating as
// healthy (its streams would never fail over), a store that confirms
// something after a failed write or sync, and an error that reaches
// neither the log nor attention.
//
// The data directory is a tmpfs mount: the test needs root (or
// CAP_SYS_ADMIN) and skips where mounting is not allowed.
func TestOwnerDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("TestOwnerDiskFull mounts a tmpfs on a host's data directory and needs root")
	}
	e := newEnv(t, opts{attention: true})

	// Put h1's data directory on a small tmpfs.
	p := e.c.Host(0)
	node := p.Node
	dir, err := e.tmpfsDataDir(p, diskFullSize)
	if err != nil {
		t.Skip(err)
	}
	if err := e.c.WaitNodesLive(e.ctx, e.c.Hosts()); err != nil {
		t.Fatal(err)
	}
	e.logf("%s runs on a %s tmpfs at %s", node, diskFullSize, dir)

	// A stream owned by h1: placement is the coordinator's, so create
	// streams until one lands there.
	var stream string
	var before wire.StreamInfo
	for i := range 8 {
		name := fmt.Sprintf("disk-full-%d", i)
		info := e.createStream(name, 3)
		if info.Assignment.Owner == node {
			stream, before = name, info
			break
		}
	}
	if stream == "" {
		t.Fatalf("none of 8 streams was placed with %s as owner", node)
	}
	epoch := before.Assignment.Epoch

	led := workload.NewLedger()
	ld := workload.StartLoad(e.ctx, e.cl, stream, led, workload.LoadConfig{Name: "df", Size: 64 << 10})
	defer func() { _ = ld.Stop() }()

	// The store fails once the disk is full.
	var failedAt time.Time
	e.poll(node+" logs its store failure", waitLong, func(context.Context) (bool, string, error) {
		log := p.LogTail(400)
		if strings.Contains(log, "store failed") {
			failedAt = time.Now()
			return true, "", nil
		}
		return false, led.Stats().String(), nil
	})
	e.logf("%s's store failed: %v", node, led.Stats())

	after := e.waitServingAt(stream, epoch+1, node)
	took := time.Since(failedAt)
	e.logf("failover %s -> %s at epoch %d, %v after the store failure was logged",
		node, after.Assignment.Owner, after.Assignment.Epoch, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the failover took %v after the store failed, want a few seconds (TTL %v)", took, ttl)
	}
	if after.Assignment.Includes(node) {
		t.Errorf("the host with the failed store %s is still in the assignment %+v", node, after.Assignment)
	}
	e.waitConfirms(led, 20, epoch+1)

	// The error is in the log, in /healthz and in attention.
	log := p.LogTail(2000)
	if !strings.Contains(log, "no space left on device") {
		t.Errorf("%s's log does not name the error (no space left on device):\n%s", node, p.LogTail(40))
	}
	if p.Healthy(e.ctx) {
		t.Errorf("%s's /healthz answers 200 with a failed store", node)
	}
	if !p.Running() {
		t.Errorf("%s exited; it should keep beating with the error", node)
	}
	var entry wire.AttentionEntry
	e.poll("attention lists "+node+" with its store error", waitLong, func(ctx context.Context) (bool, string, error) {
		l, err := e.attention(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, en := range l.Entries {
			if en.Kind == wire.AttentionStoreFailed && en.Node == node {
				entry = en
				return true, "", nil
			}
		}
		return false, entryKinds(l), nil
	})
	if msg, _ := entry.Figures["error"].(string); !strings.Contains(msg, "no space left on device") ||
		entry.Severity != wire.SeverityCritical {
		t.Errorf("attention entry %+v does not carry the error", entry)
	}
	e.logf("attention: %s", entry.Headline)

	e.stopLoad(ld, led)
	// The publishes that met the failure were answered unavailable and
	// retried by the client at the new owner, not failed as internal.
	if n := led.Count(func(o workload.Outcome) bool {
		we := wireError(o.Err)
		return !o.Confirmed && we != nil && we.Code == wire.CodeInternal
	}); n != 0 {
		t.Errorf("%d publishes failed as internal instead of being retried at the new owner: %v", n, led.Stats())
	}
	rd := workload.NewReader(e.cl, stream, "disk-full-reader")
	rep := e.verify(stream, led, rd, workload.CheckConfig{})
	if n := led.Count(func(o workload.Outcome) bool { return o.Confirmed && o.Confirm.Epoch == epoch }); n == 0 {
		t.Errorf("nothing was confirmed before the disk filled up: %v", rep)
	}
}

// tmpfsDataDir puts stream host p's data directory on a tmpfs of size
// (mount's size= syntax, such as "16m"): it stops p gracefully, copies its
// store aside, mounts the tmpfs on the directory, copies the store back and
// starts p again, so p keeps its data. The mount is detached when the test
// ends. Where mounting is not allowed, p starts again on its old directory
// and the error says why. It needs root (or CAP_SYS_ADMIN).
func (e *env) tmpfsDataDir(p *cluster.Proc, size string) (string, error) {
	t := e.t
	t.Helper()
	dir := dataDir(t, p.Args())
	if err := e.c.Terminate(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(t.TempDir(), "saved")
	run(t, "cp", "-a", dir, saved)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		e.restart(p)
		return "", fmt.Errorf("cannot mount a tmpfs on %s (mounting is not allowed here): %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		// The host may still hold files open there: detach lazily, the
		// memory goes once the process is gone.
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	run(t, "cp", "-a", saved+"/.", dir)
	e.restart(p)
	return dir, nil
}

// dataDir returns the --data-dir of a process's arguments.
func dataDir(t *testing.T, args []string) string {
	t.Helper()
	if i := slices.Index(args, "--data-dir"); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	t.Fatalf("no --data-dir in %v", args)
	return ""
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}
