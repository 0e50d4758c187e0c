// Package raftstore runs the coordinator's replicated state (package state)
// in one Dragonboat Raft shard: one NodeHost per coordinator process, its
// Raft log and snapshots under the coordinator's data directory. It offers
// guarded proposals (Propose) and linearizable reads (Read) and reports who
// leads.
package raftstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	"github.com/lni/dragonboat/v4/config"
	dblog "github.com/lni/dragonboat/v4/logger"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// ShardID is the one Raft shard that holds the coordinator state.
const ShardID uint64 = 1

// Raft tuning. The Raft clock ticks every RTTMillisecond (default 50 ms).
// A follower starts an election after 30 to 60 ticks (randomized), 1.5 to
// 3 s at the default, of silence from the leader, and a leader steps down
// (CheckQuorum) when a majority was silent for as long. On a loaded 2-core
// machine every coordinator process, followers as much as the leader, goes
// unscheduled for 0.2 to 1.2 s hundreds of times in a 10,000-stream run
// (docs/benchmarks.md, "Session 26: coordinator under a mass failover"):
// with 300 to 600 ms the leadership moved 13 times in one run, and every
// new leader re-sealed what was in flight, so the failover did not
// converge. 1.5 s is more than the longest stall seen, so a stall no
// longer costs the leadership; a leader that really died is replaced 1.5
// to 3 s after its last heartbeat, plus a (pre-)vote round. An operator
// does not wait for that to hear that the coordinators lost their quorum:
// a request the shard does not answer in time is checked with a read-index
// round of its own (ConfirmQuorum).
//
// The leader beats every 2 ticks (100 ms), 15 times per election timeout.
// Nothing else waits for a tick: proposals and their replication, the
// commit index's broadcast to the followers and a read-index round are
// sent when they happen. The clock was 10 ms with a beat every tick until
// 2026-12-05; each tick and beat wakes Dragonboat's workers and transport
// in all three processes, and at 50 ms with a beat every other tick an
// idle coordinator's CPU about halved (docs/benchmarks.md, "Session 41").
const DefaultRTTMillisecond = 50

const (
	electionRTT        = 30
	heartbeatRTT       = 2
	compactionOverhead = 1024
	defaultOpTimeout   = 5 * time.Second
)

// Snapshot cadence. Dragonboat's own (SnapshotEntries) is a fixed number
// of entries: at 4,096 a 10,000-stream state (4.8 MB) was snapshotted in
// the middle of a mass failover on all three replicas at once. The store
// takes its snapshots itself instead, once the entries applied since the
// state was last saved or loaded reach snapshotDue of the state's size,
// so the Raft log kept between two snapshots stays in proportion to the
// state (about as many bytes as a snapshot) and a restart replays at most
// that much. The count lives in the state machine (machine.since): it
// starts at zero on a fresh replica and when a snapshot is recovered, and
// counts every entry applied after it, replayed ones included, so after a
// restart it is the entries since the last snapshot on disk.
const (
	// snapshotMinEntries is the fewest entries between two snapshots
	// (Dragonboat's former fixed cadence).
	snapshotMinEntries = 4096
	// snapshotEntriesPerStream scales the cadence with the state: a
	// stream's share of a snapshot is about 480 bytes, a command about
	// 150 to 300.
	snapshotEntriesPerStream = 4
	// snapshotCheck is how often the store looks at the count.
	snapshotCheck = 250 * time.Millisecond
	// snapshotTimeout bounds one snapshot's save.
	snapshotTimeout = time.Minute
)

// snapshotDue is how many entries applied since the last snapshot make the
// next one due, for a state of streams streams.
func snapshotDue(streams int, minEntries uint64) uint64 {
	return max(minEntries, uint64(max(streams, 0))*snapshotEntriesPerStream)
}

// Config configures a Store.
type Config struct {
	ReplicaID uint64
	// RaftAddr is this replica's Raft address (host:port).
	RaftAddr string
	// Peers maps every initial replica id to its Raft address.
	Peers map[uint64]string
	// DataDir holds the NodeHost's Raft log and snapshots.
	DataDir string
	// RTTMillisecond is the Raft clock's tick (0: DefaultRTTMillisecond);
	// the election timeout and the heartbeat are counted in ticks.
	RTTMillisecond uint64
	// TLS, when set, runs the Raft transport over mutual TLS.
	TLS    *TLSFiles
	Logger *slog.Logger
	// OnPropose, if set, is told of every Propose: the command's op, how
	// long it took (retries included) and its error (nil when committed,
	// refused or not). It must return at once (record a metric).
	OnPropose func(op string, took time.Duration, err error)
	// SnapshotMinEntries is the fewest entries between two snapshots
	// (0: snapshotMinEntries); tests lower it.
	SnapshotMinEntries uint64
}

// TLSFiles are the PEM files of Dragonboat's mutual TLS between Raft
// peers: every replica listens with Cert and demands a client certificate
// signed by CA, and dials its peers presenting Cert and checking theirs
// against CA and the host of the peer's Raft address. So Cert must be
// valid for both server and client authentication and name every peer's
// Raft host (tools/auth's coordinator-raft-cert.pem is).
type TLSFiles struct {
	CA   string
	Cert string
	Key  string
}

// Validate checks that all three files are named and that Cert and Key
// form a pair and CA holds a certificate, so a mistake fails the start
// instead of every peer connection.
func (f TLSFiles) Validate() error {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return errors.New("raftstore: mutual TLS needs a CA, a certificate and a key")
	}
	if _, err := tls.LoadX509KeyPair(f.Cert, f.Key); err != nil {
		return fmt.Errorf("raftstore: raft certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return fmt.Errorf("raftstore: raft CA: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("raftstore: raft CA %s holds no PEM certificate", f.CA)
	}
	return nil
}

// Store is one coordinator's replica of the state.
type Store struct {
	nh      *dragonboat.NodeHost
	session *client.Session
	cfg     Config
	log     *slog.Logger

	// m is the replica's state machine, once Dragonboat made it.
	m atomic.Pointer[machine]
	// snapshots counts the snapshots snapshotLoop took.
	snapshots atomic.Uint64
	stopSnap  context.CancelFunc
	snapDone  chan struct{}

	probeMu sync.Mutex
	probe   *quorumProbe // the read-index round in flight, if any
}

// quietOnce sets Dragonboat's log levels once per process: the library's
// loggers are process-wide, and setting a level races with NodeHosts that
// are already logging.
var quietOnce sync.Once

// quietDragonboat turns Dragonboat's package loggers down to warnings, and
// its Raft package to errors: it logs every vote of every election as a
// warning, and the coordinator logs leadership changes itself. They are the
// library's process-wide loggers.
func quietDragonboat() {
	quietOnce.Do(setDragonboatLevels)
}

func setDragonboatLevels() {
	for _, name := range []string{"raftpb", "rsm", "transport", "logdb", "LogDB",
		"settings", "server", "registry", "gossip", "grpc", "tan", "pebblekv", "tools", "raft-mt"} {
		dblog.GetLogger(name).SetLevel(dblog.WARNING)
	}
	// "config" warns on every start that mutual TLS is off, and
	// "dragonboat" on every stale read, which coordinators do on purpose.
	for _, name := range []string{"raft", "config", "dragonboat"} {
		dblog.GetLogger(name).SetLevel(dblog.ERROR)
	}
}

// Open starts the NodeHost and the replica. On a first start the replica
// bootstraps the shard with Peers; on a restart Dragonboat reloads its log
// and snapshot from DataDir (the same Peers validate against what it saved).
func Open(cfg Config) (*Store, error) {
	if cfg.ReplicaID == 0 {
		return nil, errors.New("raftstore: replica id must be at least 1")
	}
	if _, ok := cfg.Peers[cfg.ReplicaID]; !ok {
		return nil, fmt.Errorf("raftstore: replica %d is not among the peers %v", cfg.ReplicaID, cfg.Peers)
	}
	if cfg.RTTMillisecond == 0 {
		cfg.RTTMillisecond = DefaultRTTMillisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	quietDragonboat()
	if cfg.TLS != nil {
		if err := cfg.TLS.Validate(); err != nil {
			return nil, err
		}
	}
	logdb := config.GetTinyMemLogDBConfig()
	// One LogDB shard: the coordinator runs one Raft shard, and the default
	// 16 would only multiply memory and files.
	logdb.Shards = 1
	dir := filepath.Join(cfg.DataDir, "raft")
	nhc := config.NodeHostConfig{
		NodeHostDir:    dir,
		WALDir:         dir,
		RTTMillisecond: cfg.RTTMillisecond,
		RaftAddress:    cfg.RaftAddr,
		Expert: config.ExpertConfig{
			Engine: config.GetDefaultEngineConfig(),
			LogDB:  logdb,
		},
	}
	if cfg.TLS != nil {
		nhc.MutualTLS = true
		nhc.CAFile, nhc.CertFile, nhc.KeyFile = cfg.TLS.CA, cfg.TLS.Cert, cfg.TLS.Key
	}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return nil, fmt.Errorf("raftstore: start node host at %s: %w", cfg.RaftAddr, err)
	}
	if cfg.SnapshotMinEntries == 0 {
		cfg.SnapshotMinEntries = snapshotMinEntries
	}
	// SnapshotEntries 0: Dragonboat takes no snapshot on its own;
	// snapshotLoop does, at a cadence scaled to the state.
	rc := config.Config{
		ReplicaID:          cfg.ReplicaID,
		ShardID:            ShardID,
		ElectionRTT:        electionRTT,
		HeartbeatRTT:       heartbeatRTT,
		CheckQuorum:        true,
		PreVote:            true,
		CompactionOverhead: compactionOverhead,
	}
	members := make(map[uint64]dragonboat.Target, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		members[id] = addr
	}
	s := &Store{nh: nh, session: nh.GetNoOPSession(ShardID), cfg: cfg, log: log, snapDone: make(chan struct{})}
	create := func(shardID, replicaID uint64) sm.IConcurrentStateMachine {
		m := newMachine(shardID, replicaID).(*machine)
		s.m.Store(m)
		return m
	}
	if err := nh.StartConcurrentReplica(members, false, create, rc); err != nil {
		nh.Close()
		return nil, fmt.Errorf("raftstore: start replica %d: %w", cfg.ReplicaID, err)
	}
	if cfg.TLS != nil {
		log.Info("raft transport uses mutual TLS", "ca", cfg.TLS.CA, "cert", cfg.TLS.Cert)
	}
	log.Info("raft replica started", "replica_id", cfg.ReplicaID, "raft_addr", cfg.RaftAddr, "dir", dir,
		"mutual_tls", cfg.TLS != nil)
	ctx, cancel := context.WithCancel(context.Background())
	s.stopSnap = cancel
	go s.snapshotLoop(ctx)
	return s, nil
}

// Close stops the replica and the NodeHost.
func (s *Store) Close() {
	s.stopSnap()
	<-s.snapDone
	s.nh.Close()
}

// snapshotLoop takes a snapshot whenever the entries applied since the
// last one reach snapshotDue of the state's size (see snapshotMinEntries),
// until ctx ends.
func (s *Store) snapshotLoop(ctx context.Context) {
	defer close(s.snapDone)
	t := time.NewTicker(snapshotCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := s.m.Load()
		if m == nil {
			continue
		}
		since, streams := m.since.Load(), int(m.streams.Load())
		due := snapshotDue(streams, s.cfg.SnapshotMinEntries)
		if since < due {
			continue
		}
		began := time.Now()
		sctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		idx, err := s.nh.SyncRequestSnapshot(sctx, ShardID, dragonboat.DefaultSnapshotOption)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// One in progress (a test's or an operator's) is rejected;
			// the count stands and the next look tries again.
			s.log.Warn("raft snapshot failed", "entries", since, "due", due, "err", err)
			continue
		}
		s.snapshots.Add(1)
		s.log.Info("raft snapshot taken", "index", idx, "entries", since, "due", due, "streams", streams,
			"took", time.Since(began).Round(time.Millisecond).String())
	}
}

// Snapshots is how many snapshots the store took on its own.
func (s *Store) Snapshots() uint64 { return s.snapshots.Load() }

// SnapshotIndex is the index of this replica's newest snapshot on disk (0
// if none), as Dragonboat's log reader knows it.
func (s *Store) SnapshotIndex() (uint64, error) {
	lr, err := s.nh.GetLogReader(ShardID)
	if err != nil {
		return 0, err
	}
	return lr.Snapshot().Index, nil
}

// ReplicaID is this replica's id.
func (s *Store) ReplicaID() uint64 { return s.cfg.ReplicaID }

// Peers returns the replicas in id order.
func (s *Store) Peers() []wire.CoordinatorInfo {
	leader, _ := s.Leader()
	out := make([]wire.CoordinatorInfo, 0, len(s.cfg.Peers))
	for id, addr := range s.cfg.Peers {
		out = append(out, wire.CoordinatorInfo{ReplicaID: id, Address: addr, Leader: id == leader})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ReplicaID < out[j].ReplicaID })
	return out
}

// Leader returns the leader's replica id as this replica knows it.
func (s *Store) Leader() (uint64, bool) {
	id, _, ok, err := s.nh.GetLeaderID(ShardID)
	if err != nil || !ok {
		return 0, false
	}
	return id, true
}

// IsLeader reports whether this replica leads.
func (s *Store) IsLeader() bool {
	id, ok := s.Leader()
	return ok && id == s.cfg.ReplicaID
}

// Unavailable wraps Raft errors that mean "no quorum or no leader right
// now" as wire CodeUnavailable, so admin replies carry a stable code.
func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w", op, &wire.Error{Code: wire.CodeUnavailable, Message: err.Error()})
}

// proposeFailed maps a failed proposal to its wire error: outcome_unknown
// when the entry may be in the log and commit later (a timeout, a
// cancellation, an abort or a shard closed while it waited), so that no
// client repeats a write that may have been applied (pkg/client repeats
// writes answered unavailable); unavailable otherwise (refused before it
// reached the log).
func proposeFailed(op string, err error) error {
	if errors.Is(err, dragonboat.ErrTimeout) || errors.Is(err, dragonboat.ErrCanceled) ||
		errors.Is(err, dragonboat.ErrAborted) || errors.Is(err, dragonboat.ErrShardClosed) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, &wire.Error{Code: wire.CodeOutcomeUnknown,
			Message: err.Error() + "; the write may or may not have been applied: read the state before repeating it"})
	}
	return unavailable(op, err)
}

// retryable reports errors after which the request was certainly not
// applied: Dragonboat dropped it (no leader yet) or its queue was full.
// A timeout is not among them: the entry may still commit.
func retryable(err error) bool {
	return errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, dragonboat.ErrSystemBusy)
}

// notProposed reports errors of SyncPropose after which its entry is
// certainly not in the log: dropped or refused (retryable), refused for a
// budget under one tick, or for a context already past its deadline
// (Dragonboat checks both before it queues the entry).
func notProposed(err error) bool {
	return retryable(err) || errors.Is(err, dragonboat.ErrTimeoutTooSmall) ||
		errors.Is(err, dragonboat.ErrInvalidDeadline) || errors.Is(err, dragonboat.ErrDeadlineNotSet)
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultOpTimeout)
}

// pause waits before a retry; false if ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Propose commits c and returns how the state machine applied it. A refused
// command is not an error here: the caller reads Result.Code (or
// Result.Err). Errors mean the outcome is unknown or the shard unavailable.
func (s *Store) Propose(ctx context.Context, c state.Command) (r state.Result, err error) {
	g, _ := ctx.Value(proposeGateKey{}).(*ProposeGate)
	if s.cfg.OnPropose != nil {
		began := time.Now()
		defer func() { s.cfg.OnPropose(c.Op, time.Since(began), err) }()
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	cmd := c.Encode()
	wait := 10 * time.Millisecond
	for {
		if g != nil && !g.send() {
			return state.Result{}, unavailable("propose "+c.Op, errors.New("the request was answered unavailable for want of a quorum"))
		}
		res, err := s.nh.SyncPropose(ctx, s.session, cmd)
		if g != nil {
			g.settle(err != nil && notProposed(err))
		}
		if err == nil {
			var r state.Result
			if err := json.Unmarshal(res.Data, &r); err != nil {
				return state.Result{}, fmt.Errorf("propose %s: decode result: %w", c.Op, err)
			}
			return r, nil
		}
		if retryable(err) && pause(ctx, wait) {
			wait = min(wait*2, 200*time.Millisecond)
			continue
		}
		return state.Result{}, proposeFailed("propose "+c.Op, err)
	}
}

// readAttempt bounds one read-index round: a read issued while the replica
// had no leader can be dropped without an answer, and reads, unlike
// proposals, are safe to repeat.
const readAttempt = time.Second

// Read runs q as a linearizable read: it sees every change committed
// before it started.
func (s *Store) Read(ctx context.Context, q state.Query) (any, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	wait := 10 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, readAttempt)
		v, err := s.nh.SyncRead(actx, ShardID, q)
		acancel()
		if err == nil {
			return v, nil
		}
		if (retryable(err) || errors.Is(err, dragonboat.ErrTimeout)) && ctx.Err() == nil && pause(ctx, wait) {
			wait = min(wait*2, 200*time.Millisecond)
			continue
		}
		return nil, unavailable(fmt.Sprintf("read %T", q), err)
	}
}

// ProposeGate settles, for one request, whether its proposals or its
// quorum check decide the answer: once a proposal may be in the log, only
// its own result may answer the request (it may have committed), and once
// the request was answered unavailable for want of a quorum, no proposal
// is sent for it.
type ProposeGate struct {
	mu        sync.Mutex
	pending   int  // proposals sent and not yet answered
	mayApply  bool // a proposal committed or ended with its outcome unknown
	abandoned bool // answered unavailable: no proposal may be sent
}

type proposeGateKey struct{}

// WithProposeGate returns ctx carrying a new gate that Propose passes
// before each proposal it sends under ctx.
func WithProposeGate(ctx context.Context) (context.Context, *ProposeGate) {
	g := &ProposeGate{}
	return context.WithValue(ctx, proposeGateKey{}, g), g
}

// send counts a proposal about to be sent; false if g was abandoned.
func (g *ProposeGate) send() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		return false
	}
	g.pending++
	return true
}

// settle counts a proposal answered: dropped means Dragonboat dropped or
// refused it before it reached the log, so it was not applied.
func (g *ProposeGate) settle(dropped bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending--
	g.mayApply = g.mayApply || !dropped
}

// Proposed reports whether a proposal sent under g may be in the log: one
// in flight, or one that committed or whose outcome is unknown. A
// proposal Dragonboat dropped or refused is not.
func (g *ProposeGate) Proposed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pending > 0 || g.mayApply
}

// Abandon closes g to proposals unless one may be in the log, and reports
// whether it did: after true no proposal is sent under g (Propose answers
// unavailable), after false one may have been and committed.
func (g *ProposeGate) Abandon() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending > 0 || g.mayApply {
		return false
	}
	g.abandoned = true
	return true
}

// quorumProbe is one read-index round, shared by every ConfirmQuorum that
// asks while it runs.
type quorumProbe struct {
	done chan struct{}
	err  error
}

// ConfirmQuorum runs a read-index round, or joins the one in flight, and
// returns nil if it completed within budget: the leader this replica knows
// heard from a majority after the round began, and this replica applied
// what it had committed. It fails (within budget) when the leader is gone
// or cut off, even while this replica still takes it for the leader,
// which with the election timeout above lasts 1.5 to 3 s; or, under load,
// when the leader or this replica was held up for budget.
func (s *Store) ConfirmQuorum(budget time.Duration) error {
	s.probeMu.Lock()
	p := s.probe
	if p == nil {
		p = &quorumProbe{done: make(chan struct{})}
		s.probe = p
		go func() {
			p.err = s.readIndex(budget)
			s.probeMu.Lock()
			s.probe = nil
			s.probeMu.Unlock()
			close(p.done)
		}()
	}
	s.probeMu.Unlock()
	<-p.done
	return p.err
}

// readIndex runs a read-index round and waits for it up to budget. A
// round Dragonboat drops or refuses at once (as it does right after an
// election, or while the replica is busy) is run again while at least two
// ticks of budget remain, rather than judged failed.
func (s *Store) readIndex(budget time.Duration) error {
	tick := time.Duration(s.cfg.RTTMillisecond) * time.Millisecond
	return retryRounds(budget, tick, s.readIndexOnce)
}

// retryRounds runs round with what is left of budget until it succeeds,
// fails for good, or less than two ticks are left. Dragonboat counts a
// round's timeout in whole ticks, rounded down, and refuses one under a
// tick (ErrTimeoutTooSmall); a round of one tick may time out at the next
// tick, however soon that comes. So a dropped round is retried only while
// it can still get an answer, and the error returned is the drop itself.
func retryRounds(budget, tick time.Duration, round func(time.Duration) error) error {
	deadline := time.Now().Add(budget)
	for {
		err := round(time.Until(deadline))
		if err == nil || !errors.Is(err, errRoundDropped) && !retryable(err) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
		if time.Until(deadline) < 2*tick {
			return err
		}
	}
}

// errRoundDropped marks a read-index round Dragonboat dropped.
var errRoundDropped = errors.New("dropped")

// readIndexOnce runs one read-index round and waits for it up to budget.
func (s *Store) readIndexOnce(budget time.Duration) error {
	rs, err := s.nh.ReadIndex(ShardID, budget)
	if err != nil {
		return fmt.Errorf("read index: %w", err)
	}
	t := time.NewTimer(budget)
	defer t.Stop()
	var r dragonboat.RequestResult
	select {
	case r = <-rs.ResultC():
	case <-t.C:
		select {
		case r = <-rs.ResultC():
		default:
			return fmt.Errorf("read index: no answer within %v", budget)
		}
	}
	rs.Release()
	if r.Dropped() {
		return fmt.Errorf("read index: %w", errRoundDropped)
	}
	if !r.Completed() {
		return fmt.Errorf("read index: not completed (timeout %v, dropped %v, terminated %v)", r.Timeout(), r.Dropped(), r.Terminated())
	}
	return nil
}

// State reads a deep copy of the whole state.
func (s *Store) State(ctx context.Context) (*state.State, error) {
	v, err := s.Read(ctx, state.QueryAll{})
	if err != nil {
		return nil, err
	}
	return v.(*state.State), nil
}

// RecoveryView reads the recovery worker's view of stream.
func (s *Store) RecoveryView(ctx context.Context, stream string) (state.RecoveryView, error) {
	v, err := s.Read(ctx, state.QueryRecovery{Stream: stream})
	if err != nil {
		return state.RecoveryView{}, err
	}
	return v.(state.RecoveryView), nil
}

// LocalState reads this replica's nodes and load counts (a state.Partial
// view without streams) without a quorum round, for views that may lag
// (cluster.info without a quorum); never for decisions.
func (s *Store) LocalState() (*state.State, error) {
	v, err := s.nh.StaleRead(ShardID, state.QueryPlacement{})
	if err != nil {
		return nil, fmt.Errorf("stale read: %w", err)
	}
	return v.(*state.State), nil
}

// LocalRecoveryView reads the recovery worker's view of stream from this
// replica without a quorum round. It may lag, except behind a Propose of
// this replica, which returns once this replica applied it: a planned move
// reads the recovery it just recorded this way (the worker's commit is
// guarded on the version and transition whatever it read).
func (s *Store) LocalRecoveryView(stream string) (state.RecoveryView, error) {
	v, err := s.nh.StaleRead(ShardID, state.QueryRecovery{Stream: stream})
	if err != nil {
		return state.RecoveryView{}, fmt.Errorf("stale read of the recovery of %s: %w", stream, err)
	}
	return v.(state.RecoveryView), nil
}

// LocalStream reads one stream from this replica without a quorum round.
// It may lag, except behind a Propose of this replica (applied here when
// it returns).
func (s *Store) LocalStream(stream string) (state.StreamView, error) {
	v, err := s.nh.StaleRead(ShardID, state.QueryStream{Stream: stream})
	if err != nil {
		return state.StreamView{}, fmt.Errorf("stale read of stream %s: %w", stream, err)
	}
	return v.(state.StreamView), nil
}

// LocalNodeState reads node's state from this replica without a quorum
// round ("" if unknown). It may lag; the recovery worker uses it only to
// stop waiting for copies on gone nodes once R copies answered, which is
// safe whatever it says.
func (s *Store) LocalNodeState(node string) (string, error) {
	v, err := s.nh.StaleRead(ShardID, state.QueryNodeState{Node: node})
	if err != nil {
		return "", fmt.Errorf("stale read of node %s: %w", node, err)
	}
	return v.(string), nil
}

// LocalNodes reads the ids of all known nodes, sorted, from this replica
// without a quorum round. It may lag; it is for choosing whom to notify.
func (s *Store) LocalNodes() ([]string, error) {
	v, err := s.nh.StaleRead(ShardID, state.QueryNodes{})
	if err != nil {
		return nil, fmt.Errorf("stale read of the nodes: %w", err)
	}
	return v.([]string), nil
}

// Snapshot asks Dragonboat to take a snapshot of the state now (the store
// also takes them on its own, see snapshotMinEntries); used by tests and
// operators to exercise the save and recover path.
func (s *Store) Snapshot(ctx context.Context) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	idx, err := s.nh.SyncRequestSnapshot(ctx, ShardID, dragonboat.DefaultSnapshotOption)
	if err != nil {
		return 0, fmt.Errorf("request snapshot: %w", err)
	}
	return idx, nil
}

// TransferLeadership hands leadership to another replica and waits for it
// to take over, so a coordinator that stops gracefully does not leave the
// shard to wait out an election timeout. It tries the other replicas in id
// order, each for a short while (one may be down), until ctx ends. It does
// nothing if this replica does not lead.
func (s *Store) TransferLeadership(ctx context.Context) error {
	ids := make([]uint64, 0, len(s.cfg.Peers))
	for id := range s.cfg.Peers {
		if id != s.cfg.ReplicaID {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var last error
	for _, target := range ids {
		if !s.IsLeader() {
			return nil
		}
		if err := s.nh.RequestLeaderTransfer(ShardID, target); err != nil {
			last = fmt.Errorf("transfer leadership to %d: %w", target, err)
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		for s.IsLeader() && pause(tctx, 10*time.Millisecond) {
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
	}
	if s.IsLeader() {
		if last == nil {
			last = errors.New("no replica took over")
		}
		return fmt.Errorf("transfer leadership: %w", last)
	}
	return nil
}
