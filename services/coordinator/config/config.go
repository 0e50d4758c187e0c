// Package config loads brook-coordinator's configuration with
// pkg/svcconfig: defaults (the flags' defaults) < an optional YAML file
// (--config) < BROOK_* environment variables (BROOK_DATA_DIR sets data-dir)
// < flags.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/raftstore"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/server"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// EnvPrefix marks the environment variables read.
const EnvPrefix = svcconfig.EnvPrefix

// Config is the coordinator's configuration; keys are the flag names.
type Config struct {
	ReplicaID     uint64 `koanf:"replica-id"`
	RaftAddr      string `koanf:"raft-addr"`
	Peers         string `koanf:"peers"`
	DataDir       string `koanf:"data-dir"`
	NATSURL       string `koanf:"nats-url"`
	NATSSystemURL string `koanf:"nats-system-url"`
	// NATSSystemNkey is the nkey seed file of the system-account
	// connection; the TLS settings are NATSAuth's.
	NATSSystemNkey string `koanf:"nats-system-nkey"`
	// HostKeys is a JSON file mapping each node to its host's public
	// nkey; when set, a disconnect advisory counts only if the closed
	// connection authenticated with the key of the node it names.
	HostKeys        string        `koanf:"host-keys"`
	TTL             time.Duration `koanf:"ttl"`
	DisconnectGrace time.Duration `koanf:"disconnect-grace"`
	ProbeTimeout    time.Duration `koanf:"probe-timeout"`
	DefaultPolicy   string        `koanf:"default-policy"`
	ReplaceAfter    time.Duration `koanf:"replace-after"`
	SealTimeout     time.Duration `koanf:"seal-timeout"`
	// Balance: the owner balancer (on unless --balance=false), its
	// period, its moves in flight at most and its margin.
	Balance         bool          `koanf:"balance"`
	BalanceInterval time.Duration `koanf:"balance-interval"`
	BalanceMoves    int           `koanf:"balance-moves"`
	BalanceMargin   float64       `koanf:"balance-margin"`
	BalanceSettle   time.Duration `koanf:"balance-settle"`
	BalancePerHost  int           `koanf:"balance-moves-per-host"`
	RTTMillisecond  uint64        `koanf:"rtt-ms"`
	// MaxStreams and MaxCopiesPerHost are the cluster's limits: a create
	// past either is refused (stream_limit, host_limit).
	MaxStreams       int `koanf:"max-streams"`
	MaxCopiesPerHost int `koanf:"max-copies-per-host"`
	// MaxInflight caps the admin requests a replica serves at once, and
	// apart from them the hosts' pulls and leaves; one more is answered
	// overloaded.
	MaxInflight int `koanf:"max-inflight"`
	// RaftCA, RaftCert and RaftKey (all three or none) run the Raft
	// transport over Dragonboat's mutual TLS.
	RaftCA   string `koanf:"raft-ca"`
	RaftCert string `koanf:"raft-cert"`
	RaftKey  string `koanf:"raft-key"`
	HTTPAddr string `koanf:"http-addr"`
	PProf    bool   `koanf:"pprof"`
	// NATSAuth is --nats-nkey, --nats-ca, --nats-cert and --nats-key.
	svcconfig.NATSAuth `koanf:",squash"`
	// Logging is --log-level and --log-format; Logger builds the logger.
	svcconfig.Logging `koanf:",squash"`
}

// FlagSet returns the coordinator's flags; their defaults are the
// configuration's defaults.
func FlagSet(name string) *pflag.FlagSet {
	fs := svcconfig.NewFlagSet(name) // with --config
	fs.Uint64("replica-id", 1, "this coordinator's Raft replica id (one of --peers)")
	fs.String("raft-addr", "", "this replica's Raft address (default: its address in --peers)")
	fs.String("peers", "1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103", "every replica as id=host:port, comma separated")
	fs.String("data-dir", "", "directory of the Raft log and snapshots (required)")
	fs.String("nats-url", "nats://127.0.0.1:4222", "NATS URL(s) of account BROOK, comma separated")
	svcconfig.AddNATSAuthFlags(fs)
	fs.String("nats-system-url", "", "NATS URL(s) of the system account; enables disconnect advisories")
	fs.String("nats-system-nkey", "", "nkey seed file of the system-account connection (e.g. .brook-auth/coordinator-sys.nk); TLS as --nats-ca etc.")
	fs.String("host-keys", "", "JSON file of each node's host public nkey ({\"h1\":\"U...\"}); when set, a disconnect advisory counts only for the node's own key")
	fs.Duration("ttl", wire.DefaultHostTTL, "a stream host unheard for this long is probed, and expired if it does not answer (hosts send a liveness beat every 100 ms)")
	fs.Duration("disconnect-grace", wire.DefaultDisconnectGrace, "after a disconnect advisory, how long to wait for a heartbeat or liveness beat")
	fs.Duration("probe-timeout", wire.DefaultProbeTimeout, "before a ttl expiry the leader asks the host whether it is alive: the longest it waits for the answer (the wait adapts to how late beats arrive lately, from a small floor on a quiet machine up to this; no responders expires at once)")
	fs.String("default-policy", policy.Default, "confirm policy stamped on replicated assignments")
	fs.Duration("replace-after", controller.DefaultReplaceAfter, "how long a stream may miss a copy before a new node replaces it")
	fs.Duration("seal-timeout", recovery.DefaultSealTimeout, "how long recovery waits for each seal, from when it is sent")
	fs.Int("max-streams", state.DefaultMaxStreams, "most streams the cluster holds; a create past it is refused with stream_limit")
	fs.Int("max-copies-per-host", state.DefaultMaxCopiesPerHost, "most stream copies a create places on one host; a create that finds too few hosts below it is refused with host_limit (failovers may exceed it)")
	fs.Int("max-inflight", server.DefaultMaxInflight, "most admin requests this replica serves at once, and apart from them most hosts' assignment pulls and leaves; one more is answered overloaded (clients and hosts retry after a backoff)")
	fs.Bool("balance", true, "move stream ownership back toward an even share across live hosts with planned moves")
	fs.Duration("balance-interval", controller.DefaultBalanceInterval, "least time between two balancing rounds")
	fs.Int("balance-moves", controller.DefaultBalanceMoves, "planned moves of the balancer (and operators) in flight at most")
	fs.Float64("balance-margin", controller.DefaultBalanceMargin, "how far (a fraction of the even share) a host's owned streams may be off it before streams move")
	fs.Duration("balance-settle", controller.DefaultBalanceSettle, "quiet period after a failover pending or a change of the hosts that may own before the balancer moves anything")
	fs.Int("balance-moves-per-host", controller.DefaultBalanceMovesPerHost, "planned moves of the balancer in flight from one owner at most")
	fs.Uint64("rtt-ms", raftstore.DefaultRTTMillisecond, "the Raft clock's tick in milliseconds: a follower starts an election after 30 to 60 ticks of silence from the leader, which beats every 2")
	fs.String("raft-ca", "", "PEM file of the CA that signs every replica's Raft certificate (with --raft-cert and --raft-key: mutual TLS between Raft peers)")
	fs.String("raft-cert", "", "PEM certificate of this replica's Raft transport, for server and client use, naming every peer's Raft host (e.g. .brook-auth/coordinator-raft-cert.pem)")
	fs.String("raft-key", "", "PEM private key of --raft-cert")
	fs.String("http-addr", "", "address of the /healthz and /metrics endpoints; empty means off")
	svcconfig.AddPProfFlag(fs)
	svcconfig.AddLoggingFlags(fs)
	return fs
}

// Load parses args (without the program name) and merges the sources.
func Load(args []string) (Config, error) {
	var c Config
	if err := svcconfig.Load(FlagSet("brook-coordinator"), args, &c, svcconfig.Options{}); err != nil {
		return Config{}, err
	}
	if c.RaftAddr == "" {
		if peers, err := ParsePeers(c.Peers); err == nil {
			c.RaftAddr = peers[c.ReplicaID]
		}
	}
	return c, c.Validate()
}

// ReadHostKeys reads the --host-keys file: a JSON object mapping each node
// to the public user nkey ("U...") its stream host authenticates with.
func ReadHostKeys(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--host-keys: %w", err)
	}
	keys := map[string]string{}
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("--host-keys %s: want a JSON object of node to public nkey: %w", path, err)
	}
	var errs []error
	for node, key := range keys {
		if err := wire.ValidName("node", node); err != nil {
			errs = append(errs, fmt.Errorf("--host-keys %s: %w", path, err))
		}
		if !nkeys.IsValidPublicUserKey(key) {
			errs = append(errs, fmt.Errorf("--host-keys %s: node %s: %q is not a public user nkey", path, node, key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return keys, nil
}

// ParsePeers reads "1=host:port,2=host:port".
func ParsePeers(s string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if !ok || err != nil || n == 0 || strings.TrimSpace(addr) == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port with id >= 1", part)
		}
		if _, dup := peers[n]; dup {
			return nil, fmt.Errorf("peer id %d given twice", n)
		}
		peers[n] = strings.TrimSpace(addr)
	}
	if len(peers) == 0 {
		return nil, errors.New("no peers")
	}
	return peers, nil
}

// PeerIDs returns the ids of peers in order.
func PeerIDs(peers map[uint64]string) []uint64 {
	ids := make([]uint64, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// RaftTLS reports whether the Raft transport runs mutual TLS.
func (c Config) RaftTLS() bool { return c.RaftCA != "" && c.RaftCert != "" && c.RaftKey != "" }

func countSet(vs ...string) int {
	n := 0
	for _, v := range vs {
		if v != "" {
			n++
		}
	}
	return n
}

// Validate checks the values.
func (c Config) Validate() error {
	var errs []error
	peers, err := ParsePeers(c.Peers)
	if err != nil {
		errs = append(errs, fmt.Errorf("--peers: %w", err))
	} else if addr, ok := peers[c.ReplicaID]; !ok {
		errs = append(errs, fmt.Errorf("--replica-id %d is not in --peers", c.ReplicaID))
	} else if addr != c.RaftAddr {
		errs = append(errs, fmt.Errorf("--raft-addr %s differs from peer %d's address %s", c.RaftAddr, c.ReplicaID, addr))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("--nats-url is required"))
	}
	for name, d := range map[string]time.Duration{"--ttl": c.TTL, "--disconnect-grace": c.DisconnectGrace,
		"--probe-timeout": c.ProbeTimeout,
		"--replace-after": c.ReplaceAfter, "--seal-timeout": c.SealTimeout, "--balance-interval": c.BalanceInterval} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if _, err := policy.Parse(c.DefaultPolicy); err != nil {
		errs = append(errs, fmt.Errorf("--default-policy: %w", err))
	}
	if c.MaxStreams < 1 {
		errs = append(errs, errors.New("--max-streams must be at least 1"))
	}
	if c.MaxCopiesPerHost < 1 {
		errs = append(errs, errors.New("--max-copies-per-host must be at least 1"))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, errors.New("--max-inflight must be at least 1"))
	}
	if c.BalanceMoves < 1 || c.BalancePerHost < 1 || c.BalanceMargin <= 0 || c.BalanceSettle < 0 {
		errs = append(errs, fmt.Errorf("--balance-moves %d and --balance-moves-per-host %d must be at least 1, --balance-margin %g positive, --balance-settle %s not negative", c.BalanceMoves, c.BalancePerHost, c.BalanceMargin, c.BalanceSettle))
	}
	if c.RTTMillisecond == 0 {
		errs = append(errs, errors.New("--rtt-ms must be at least 1"))
	}
	if n := countSet(c.RaftCA, c.RaftCert, c.RaftKey); n != 0 && n != 3 {
		errs = append(errs, errors.New("--raft-ca, --raft-cert and --raft-key go together: give all three or none"))
	}
	if err := c.NATSAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.NATSSystemNkey != "" && c.NATSSystemURL == "" {
		errs = append(errs, errors.New("--nats-system-nkey needs --nats-system-url"))
	}
	if err := c.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
