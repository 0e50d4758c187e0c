package host

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestSealBatchLogsOneLine: a batch's seals are logged in the batch's one
// line, which counts them (sealed, stale, not found) and the roles they
// stopped, and not one info line per seal or per role stopped (a mass
// failover seals thousands of copies, again each recovery round); a seal
// alone still logs its own line.
func TestSealBatchLogsOneLine(t *testing.T) {
	c := newMiniCluster(t)
	for i := range 3 {
		c.prepareCopy("n1", fmt.Sprintf("s%d", i), uint64(10+i), 1, nil)
	}
	th := startOwning(c, "n1", nil, "s0", "s1", "s2")
	r, e := c.sealBatch("n1", mustJSON(t, wire.SealBatch{Seals: []wire.SealRequest{
		{Stream: "s0", StreamID: 10, FenceEpoch: 2, Transition: 1},
		{Stream: "s1", StreamID: 11, FenceEpoch: 2, Transition: 1},
		{Stream: "nope", StreamID: 1, FenceEpoch: 2, Transition: 1},
		{Stream: "s2", StreamID: 12, FenceEpoch: 1, Transition: 1},
	}}))
	if e != nil || len(r.Replies) != 4 || r.Replies[0].Reply == nil || r.Replies[1].Reply == nil {
		t.Fatalf("seal batch: %+v %v", r, e)
	}
	// The line is logged once the reply is sent.
	th.log.waitFor(t, `msg="seal batch answered"`)
	log := th.log.String()
	if n := strings.Count(log, `msg="seal batch answered"`); n != 1 {
		t.Fatalf("%d batch lines, want 1:\n%s", n, log)
	}
	for _, want := range []string{"seals=4", "sealed=2", "stale=1", "not_found=1", "owners_stopped=2", "followers_stopped=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("batch line without %s:\n%s", want, log)
		}
	}
	for _, per := range []string{"msg=sealed", `msg="owner role stopped"`} {
		if strings.Contains(log, per) {
			t.Errorf("a batch's seal logged %s at info:\n%s", per, log)
		}
	}
	if _, e := c.seal("n1", "s2", 12, 2, 1); e != nil {
		t.Fatalf("seal alone: %v", e)
	}
	th.log.waitFor(t, "msg=sealed")
	th.log.waitFor(t, `msg="owner role stopped"`)
}

// TestPullOfManyFollowersReleasesDurably: one pull that has many sealed
// copies (more than one apply's worth at once, maxConcurrentApplies) follow
// a new owner releases each seal durably before the copy follows: the
// host's store is on a crashable file system, and a crash clone taken once
// every copy is reported following (only what was synced) holds each copy
// at the new epoch and unsealed.
func TestPullOfManyFollowersReleasesDurably(t *testing.T) {
	const n = maxConcurrentApplies + 8
	c := newMiniCluster(t)
	mem := vfs.NewCrashableMem()
	syncedDir(t, mem, c.dataDir("n1"))
	names := make([]string, n)
	as := make([]wire.AssignedStream, n)
	for i := range names {
		names[i] = fmt.Sprintf("f%03d", i)
		as[i] = assignment(names[i], uint64(100+i), 1, "gone", []string{"n1"})
	}
	c.table.Set(as...)
	c.start("n1", func(cfg *Config) { cfg.StoreFS = mem })
	for _, name := range names {
		c.waitCopy("n1", name, "following at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	}
	for lo := 0; lo < n; lo += wire.MaxSealBatch {
		batch := wire.SealBatch{}
		for i := lo; i < min(lo+wire.MaxSealBatch, n); i++ {
			batch.Seals = append(batch.Seals, wire.SealRequest{Stream: names[i], StreamID: uint64(100 + i), FenceEpoch: 2, Transition: 1})
		}
		if r, e := c.sealBatch("n1", mustJSON(t, batch)); e != nil || len(r.Replies) != len(batch.Seals) {
			t.Fatalf("seal batch: %+v %v", r, e)
		}
	}
	for i, name := range names {
		as[i] = assignment(name, uint64(100+i), 2, "n2", []string{"n1"},
			wire.HistoryStart{Epoch: 1, Node: "gone"}, wire.HistoryStart{Epoch: 2, Node: "n2"})
	}
	c.assign(as...)
	for _, name := range names {
		c.waitCopy("n1", name, "following at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 2 })
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	st, err := streamlog.Open(streamlog.Options{Dir: c.dataDir("n1"), FS: crashed, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	for _, name := range names {
		cp := st.Get(name)
		if cp == nil {
			t.Fatalf("%s lost in the crash", name)
		}
		if _, sealed := cp.SealInfo(); sealed || cp.Epoch() != 2 {
			t.Errorf("%s on disk once reported following: sealed %v, epoch %d; want released at epoch 2", name, sealed, cp.Epoch())
		}
	}
}
