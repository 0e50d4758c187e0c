// Package config loads the configuration of brook-streamhost with koanf:
// built-in defaults, then an optional YAML file (--config), then BROOK_*
// environment variables, then command-line flags, each overriding the one
// before it.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/wire"
)

// EnvPrefix is the prefix of the environment variables read:
// BROOK_DATA_DIR sets data-dir.
const EnvPrefix = "BROOK_"

// Config is the stream host's configuration. Keys are the flag names.
type Config struct {
	Node              string        `koanf:"node"`
	DataDir           string        `koanf:"data-dir"`
	NATSURL           string        `koanf:"nats-url"`
	HeartbeatInterval time.Duration `koanf:"heartbeat-interval"`
	MaxPayload        int           `koanf:"max-payload"`
	ConfirmTimeout    time.Duration `koanf:"confirm-timeout"`
	HTTPAddr          string        `koanf:"http-addr"`
	// DedupeRebuildRecords and DedupeRebuildBytes bound the tail of the
	// log a new owner reads to rebuild its duplicate window.
	DedupeRebuildRecords int    `koanf:"dedupe-rebuild-records"`
	DedupeRebuildBytes   int64  `koanf:"dedupe-rebuild-bytes"`
	LogFormat            string `koanf:"log-format"`
	LogLevel             string `koanf:"log-level"`
}

// FlagSet returns the flags of brook-streamhost with their defaults, which
// are also the configuration's defaults.
func FlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.String("config", "", "optional YAML configuration file")
	fs.String("node", "", "node id of this stream host (required)")
	fs.String("data-dir", "", "directory of the host's Pebble database (required)")
	fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	fs.Duration("heartbeat-interval", 500*time.Millisecond, "how often to publish heartbeats")
	fs.Int("max-payload", 1<<20, "largest record accepted, in bytes")
	fs.Duration("confirm-timeout", 5*time.Second, "how long a publish waits for W copies before confirm_timeout")
	fs.String("http-addr", "", "address of the /healthz endpoint; empty means off")
	fs.Int("dedupe-rebuild-records", 64<<10, "on promotion, rebuild the duplicate window from at most this many of the newest records")
	fs.Int64("dedupe-rebuild-bytes", 64<<20, "on promotion, rebuild the duplicate window from about this many bytes of the newest records")
	fs.String("log-format", "text", "log format: text or json")
	fs.String("log-level", "info", "log level: debug, info, warn or error")
	return fs
}

// Load parses args (without the program name) and builds the configuration
// from defaults < file < environment < flags.
func Load(args []string) (Config, error) {
	fs := FlagSet("brook-streamhost")
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("parse flags: %w", err)
	}
	k := koanf.New(".")
	if path, _ := fs.GetString("config"); path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("load config file %s: %w", path, err)
		}
	}
	err := k.Load(env.Provider(EnvPrefix, ".", func(s string) string {
		return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s, EnvPrefix)), "_", "-")
	}), nil)
	if err != nil {
		return Config{}, fmt.Errorf("load environment: %w", err)
	}
	// posflag takes a flag's default only for keys no earlier source set,
	// and a flag given on the command line always wins.
	if err := k.Load(posflag.Provider(fs, ".", k), nil); err != nil {
		return Config{}, fmt.Errorf("load flags: %w", err)
	}
	var c Config
	if err := k.Unmarshal("", &c); err != nil {
		return Config{}, fmt.Errorf("decode configuration: %w", err)
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
	if c.MaxPayload < 1 {
		errs = append(errs, errors.New("--max-payload must be at least 1"))
	}
	if c.ConfirmTimeout <= 0 {
		errs = append(errs, errors.New("--confirm-timeout must be positive"))
	}
	if c.DedupeRebuildRecords < 1 || c.DedupeRebuildBytes < 1 {
		errs = append(errs, errors.New("--dedupe-rebuild-records and --dedupe-rebuild-bytes must be at least 1"))
	}
	if _, err := c.Level(); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.LogFormat))
	}
	return errors.Join(errs...)
}

// Level returns the slog level named by LogLevel.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return 0, fmt.Errorf("--log-level %q: %w", c.LogLevel, err)
	}
	return l, nil
}

// Logger builds the logger the configuration asks for, writing to stderr.
func (c Config) Logger() *slog.Logger {
	lvl, _ := c.Level()
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
