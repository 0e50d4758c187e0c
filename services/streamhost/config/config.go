// Package config loads the configuration of brook-streamhost with
// pkg/svcconfig: built-in defaults, then an optional YAML file (--config),
// then BROOK_* environment variables, then command-line flags, each
// overriding the one before it.
package config

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
)

// EnvPrefix is the prefix of the environment variables read:
// BROOK_DATA_DIR sets data-dir.
const EnvPrefix = svcconfig.EnvPrefix

// Config is the stream host's configuration. Keys are the flag names.
type Config struct {
	Node              string        `koanf:"node"`
	DataDir           string        `koanf:"data-dir"`
	NATSURL           string        `koanf:"nats-url"`
	HeartbeatInterval time.Duration `koanf:"heartbeat-interval"`
	LivenessInterval  time.Duration `koanf:"liveness-interval"`
	// FullReportInterval is the longest time between two heartbeats that
	// list every copy; those between list only what changed.
	FullReportInterval time.Duration `koanf:"full-report-interval"`
	MaxPayload         int           `koanf:"max-payload"`
	ConfirmTimeout     time.Duration `koanf:"confirm-timeout"`
	HTTPAddr           string        `koanf:"http-addr"`
	PProf              bool          `koanf:"pprof"`
	// DedupeRebuildRecords and DedupeRebuildBytes bound the tail of the
	// log a new owner reads to rebuild its duplicate window.
	DedupeRebuildRecords int   `koanf:"dedupe-rebuild-records"`
	DedupeRebuildBytes   int64 `koanf:"dedupe-rebuild-bytes"`
	// MaxFetchWaits caps the long-poll fetches waiting at once on the
	// host; MaxInflight caps the request goroutines of each kind apart:
	// readers' (fetches, commit waits), host waits, seals (followers'
	// replication requests are bounded per owned stream). Past a cap a
	// request is answered overloaded.
	MaxFetchWaits int `koanf:"max-fetch-waits"`
	MaxInflight   int `koanf:"max-inflight"`
	// ReplListen, if set, is the address of the host's direct replication
	// link (followers' hosts replicate on one TLS connection per pair of
	// hosts instead of over the bus); ReplAdvertise is the address other
	// hosts dial (ReplListen's if empty, which must then name a host).
	ReplListen    string `koanf:"repl-listen"`
	ReplAdvertise string `koanf:"repl-advertise"`
	// NATSAuth is --nats-nkey, --nats-ca, --nats-cert and --nats-key.
	svcconfig.NATSAuth `koanf:",squash"`
	// Logging is --log-level and --log-format; Logger builds the logger.
	svcconfig.Logging `koanf:",squash"`
}

// FlagSet returns the flags of brook-streamhost with their defaults, which
// are also the configuration's defaults.
func FlagSet(name string) *pflag.FlagSet {
	fs := svcconfig.NewFlagSet(name) // with --config
	fs.String("node", "", "node id of this stream host (required)")
	fs.String("data-dir", "", "directory of the host's Pebble database (required)")
	fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	svcconfig.AddNATSAuthFlags(fs)
	fs.Duration("heartbeat-interval", wire.DefaultHeartbeatInterval, "how often to publish heartbeats")
	fs.Duration("liveness-interval", wire.DefaultLivenessInterval, "how often to publish a liveness beat (no copies) between heartbeats; 0 turns them off")
	fs.Duration("full-report-interval", wire.DefaultFullReportInterval, "the longest time between two heartbeats that list every copy; the heartbeats between list only the copies that changed")
	fs.Int("max-payload", 1<<20, "largest record accepted, in bytes")
	fs.Duration("confirm-timeout", 5*time.Second, "how long a publish waits for W copies before confirm_timeout")
	fs.String("http-addr", "", "address of the /healthz and /metrics endpoints; empty means off")
	fs.Int("dedupe-rebuild-records", 64<<10, "on promotion, rebuild the duplicate window from at most this many of the newest records")
	fs.Int64("dedupe-rebuild-bytes", 64<<20, "on promotion, rebuild the duplicate window from about this many bytes of the newest records")
	fs.Int("max-fetch-waits", 1024, "most long-poll fetches waiting for records at once on this host; more are answered overloaded")
	fs.Int("max-inflight", 4096, "most request goroutines at once on this host of each kind apart: readers' (fetches, commit waits), host waits, seals (followers' replication requests are bounded per owned stream); more are answered overloaded")
	fs.String("repl-listen", "", "address of the direct replication link between stream hosts (e.g. 0.0.0.0:7422); empty: replication travels over NATS only")
	fs.String("repl-advertise", "", "address other stream hosts dial for the direct replication link; empty: --repl-listen's, which must then name a host")
	svcconfig.AddPProfFlag(fs)
	svcconfig.AddLoggingFlags(fs)
	return fs
}

// Load parses args (without the program name) and builds the configuration
// from defaults < file < environment < flags.
func Load(args []string) (Config, error) {
	var c Config
	if err := svcconfig.Load(FlagSet("brook-streamhost"), args, &c, svcconfig.Options{}); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// Validate checks the values.
func (c Config) Validate() error {
	var errs []error
	if err := wire.ValidName("node", c.Node); err != nil {
		errs = append(errs, fmt.Errorf("--node: %w", err))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("--nats-url is required"))
	}
	if c.HeartbeatInterval <= 0 {
		errs = append(errs, errors.New("--heartbeat-interval must be positive"))
	}
	if c.FullReportInterval <= 0 {
		errs = append(errs, errors.New("--full-report-interval must be positive"))
	}
	if c.LivenessInterval < 0 {
		errs = append(errs, errors.New("--liveness-interval must not be negative"))
	}
	if c.MaxPayload < 1 {
		errs = append(errs, errors.New("--max-payload must be at least 1"))
	}
	if c.ConfirmTimeout <= 0 {
		errs = append(errs, errors.New("--confirm-timeout must be positive"))
	}
	if c.DedupeRebuildRecords < 1 || c.DedupeRebuildBytes < 1 {
		errs = append(errs, errors.New("--dedupe-rebuild-records and --dedupe-rebuild-bytes must be at least 1"))
	}
	if c.MaxFetchWaits < 1 || c.MaxInflight < 1 {
		errs = append(errs, errors.New("--max-fetch-waits and --max-inflight must be at least 1"))
	}
	if err := validateRepl(c.ReplListen, c.ReplAdvertise); err != nil {
		errs = append(errs, err)
	}
	if err := c.NATSAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateRepl checks --repl-listen and --repl-advertise: an address to
// dial must name a host and a port.
func validateRepl(listen, advertise string) error {
	if listen == "" {
		if advertise != "" {
			return errors.New("--repl-advertise needs --repl-listen")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Errorf("--repl-listen %q: %w", listen, err)
	}
	dial := advertise
	if dial == "" {
		dial = listen
	}
	host, port, err := net.SplitHostPort(dial)
	if err != nil {
		return fmt.Errorf("--repl-advertise %q: %w", dial, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("the direct link's address %q names no host other hosts can dial: set --repl-advertise", dial)
	}
	if port == "0" && advertise != "" {
		return fmt.Errorf("--repl-advertise %q: port 0", advertise)
	}
	return nil
}
