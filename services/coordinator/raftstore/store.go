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
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	"github.com/lni/dragonboat/v4/config"
	dblog "github.com/lni/dragonboat/v4/logger"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// ShardID is the one Raft shard that holds the coordinator state.
const ShardID uint64 = 1

// Raft tuning. With the default 10 ms RTT an election starts after 300 ms
// of silence from the leader. 100 ms (ElectionRTT 10) was measured to move
// the leadership in 2 of 5 runs of a 250-stream failover on a 2-core
// machine (CheckQuorum steps a leader down that a busy CPU kept from
// hearing its followers in time), which cost that failover about a
// second; 300 ms moved it in none of 4, and still elects a new leader
// well within the 2 s node TTL.
const (
	electionRTT        = 30
	heartbeatRTT       = 1
	snapshotEntries    = 4096
	compactionOverhead = 1024
	defaultOpTimeout   = 5 * time.Second
)

// Config configures a Store.
type Config struct {
	ReplicaID uint64
	// RaftAddr is this replica's Raft address (host:port).
	RaftAddr string
	// Peers maps every initial replica id to its Raft address.
	Peers map[uint64]string
	// DataDir holds the NodeHost's Raft log and snapshots.
	DataDir        string
	RTTMillisecond uint64
	// TLS, when set, runs the Raft transport over mutual TLS.
	TLS    *TLSFiles
	Logger *slog.Logger
	// OnPropose, if set, is told of every Propose: the command's op, how
	// long it took (retries included) and its error (nil when committed,
	// refused or not). It must return at once (record a metric).
	OnPropose func(op string, took time.Duration, err error)
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
		cfg.RTTMillisecond = 10
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
	rc := config.Config{
		ReplicaID:          cfg.ReplicaID,
		ShardID:            ShardID,
		ElectionRTT:        electionRTT,
		HeartbeatRTT:       heartbeatRTT,
		CheckQuorum:        true,
		PreVote:            true,
		SnapshotEntries:    snapshotEntries,
		CompactionOverhead: compactionOverhead,
	}
	members := make(map[uint64]dragonboat.Target, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		members[id] = addr
	}
	if err := nh.StartConcurrentReplica(members, false, newMachine, rc); err != nil {
		nh.Close()
		return nil, fmt.Errorf("raftstore: start replica %d: %w", cfg.ReplicaID, err)
	}
	if cfg.TLS != nil {
		log.Info("raft transport uses mutual TLS", "ca", cfg.TLS.CA, "cert", cfg.TLS.Cert)
	}
	log.Info("raft replica started", "replica_id", cfg.ReplicaID, "raft_addr", cfg.RaftAddr, "dir", dir,
		"mutual_tls", cfg.TLS != nil)
	return &Store{nh: nh, session: nh.GetNoOPSession(ShardID), cfg: cfg, log: log}, nil
}

// Close stops the replica and the NodeHost.
func (s *Store) Close() {
	s.nh.Close()
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

// retryable reports errors after which the request was certainly not
// applied: Dragonboat dropped it (no leader yet) or its queue was full.
// A timeout is not among them: the entry may still commit.
func retryable(err error) bool {
	return errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, dragonboat.ErrSystemBusy)
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
	if s.cfg.OnPropose != nil {
		began := time.Now()
		defer func() { s.cfg.OnPropose(c.Op, time.Since(began), err) }()
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	cmd := c.Encode()
	wait := 10 * time.Millisecond
	for {
		res, err := s.nh.SyncPropose(ctx, s.session, cmd)
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
		return state.Result{}, unavailable("propose "+c.Op, err)
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

// Snapshot asks Dragonboat to take a snapshot of the state now (it also
// takes them every few thousand entries on its own); used by tests and
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
