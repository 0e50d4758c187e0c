// Package config loads brook-attention's configuration with pkg/svcconfig,
// the way every brook service does: flag defaults, then an optional YAML
// file (--config), then BROOK_* environment variables, then flags given on
// the command line, each overriding the one before. Unlike the other
// services it is strict: a file key or an argument that names no flag is an
// error, and a duration must carry its unit.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

// EnvPrefix is stripped from environment variables: BROOK_LAG_WINDOW sets
// lag-window.
const EnvPrefix = svcconfig.EnvPrefix

// Config is brook-attention's configuration.
type Config struct {
	NATSURL string
	// NATSAuth is --nats-nkey, --nats-ca, --nats-cert and --nats-key.
	NATSAuth  svcconfig.NATSAuth
	HTTPAddr  string
	TTL       time.Duration // heartbeat TTL: how long a heartbeat keeps a node live
	LagWindow time.Duration // how long a follower's tail may stand still below its owner's
	// LateGrace is how long past the TTL the latest heartbeat of a node
	// the coordinators still count present stands (judge.Config.LateGrace).
	LateGrace time.Duration
	// Refresh is the period of the pull of stream.list and cluster.info
	// (a change notice pulls at once).
	Refresh time.Duration
	// RequestTimeout bounds each request to the coordinators.
	RequestTimeout time.Duration
	LogFormat      string // text or json
	LogLevel       slog.Level
	// PProf serves Go's runtime profiles under /debug/pprof/ on HTTPAddr.
	PProf bool
}

// FlagSet returns the service's flags with their defaults; the flag names
// are the configuration keys.
func FlagSet(name string) *pflag.FlagSet {
	fs := svcconfig.NewFlagSet(name) // with --config
	fs.String("nats-url", "nats://brook:brook@127.0.0.1:4222", "NATS server URL(s) (account BROOK), comma separated")
	svcconfig.AddNATSAuthFlags(fs)
	fs.String("http-addr", "127.0.0.1:8090", "HTTP address for /, /attention, /healthz and /metrics (empty: off)")
	fs.Duration("ttl", wire.DefaultHostTTL, "heartbeat TTL: a node unheard for longer is down")
	fs.Duration("lag-window", 10*time.Second, "how long a follower's tail may stand still below its owner's")
	fs.Duration("late-grace", judge.DefaultLateGrace, "how long past the ttl a node's latest heartbeat still stands while the coordinators have not expired the node (its beats are late, not missing: the leader probes such a host before it expires it)")
	fs.Duration("refresh", time.Second, "period of the pull of the coordinator's stream list and cluster info")
	fs.Duration("request-timeout", 2*time.Second, "timeout of each request to the coordinators")
	svcconfig.AddLoggingFlags(fs)
	svcconfig.AddPProfFlag(fs)
	return fs
}

// Load parses args (without the program name) and returns the configuration.
// A --help request returns pflag.ErrHelp.
func Load(name string, args []string) (Config, error) {
	// BROOK_* variables meant for another service are dropped, not
	// rejected: every brook service reads the same environment.
	k, err := svcconfig.Merge(FlagSet(name), args, svcconfig.Options{Strict: true})
	if err != nil {
		return Config{}, err
	}
	return fromKoanf(k)
}

func fromKoanf(k *koanf.Koanf) (Config, error) {
	c := Config{
		NATSURL:   k.String("nats-url"),
		HTTPAddr:  k.String("http-addr"),
		LogFormat: k.String("log-format"),
		PProf:     k.Bool("pprof"),
		NATSAuth: svcconfig.NATSAuth{
			Nkey: k.String("nats-nkey"),
			CA:   k.String("nats-ca"),
			Cert: k.String("nats-cert"),
			Key:  k.String("nats-key"),
		},
	}
	var errs []error
	for _, d := range []struct {
		key    string
		dst    *time.Duration
		zeroOK bool
	}{{"ttl", &c.TTL, false}, {"lag-window", &c.LagWindow, false}, {"late-grace", &c.LateGrace, true}, {"refresh", &c.Refresh, false}, {"request-timeout", &c.RequestTimeout, false}} {
		v, err := duration(k.Get(d.key))
		switch {
		case err != nil:
		case d.zeroOK && v < 0:
			err = errors.New("must not be negative")
		case !d.zeroOK && v <= 0:
			err = errors.New("must be positive")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.key, err))
		}
		*d.dst = v
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("nats-url: must be set"))
	}
	if err := c.NATSAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	logging := svcconfig.Logging{Level: k.String("log-level"), Format: k.String("log-format")}
	if err := logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	c.LogLevel, _ = logging.SlogLevel()
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}

// duration reads a duration as a flag (time.Duration), YAML or the
// environment (a string such as "500ms") give it. A bare number is refused:
// it would be read as nanoseconds, which nobody means.
func duration(v any) (time.Duration, error) {
	switch d := v.(type) {
	case time.Duration:
		return d, nil
	case string:
		p, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", d, err)
		}
		return p, nil
	case nil:
		return 0, errors.New("not set")
	default:
		return 0, fmt.Errorf("%v is not a duration such as \"2s\"", v)
	}
}

// NewLogger returns the slog logger the configuration asks for, writing to
// stderr.
func (c Config) NewLogger() *slog.Logger {
	return svcconfig.NewLogger(os.Stderr, c.LogFormat, c.LogLevel)
}
