// Package config loads brook-attention's configuration the way every brook
// service does: flag defaults, then an optional YAML file (--config), then
// BROOK_* environment variables, then flags given on the command line, each
// overriding the one before.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// EnvPrefix is stripped from environment variables: BROOK_LAG_WINDOW sets
// lag-window.
const EnvPrefix = "BROOK_"

// Config is brook-attention's configuration.
type Config struct {
	NATSURL   string
	HTTPAddr  string
	TTL       time.Duration // heartbeat TTL: how long a heartbeat keeps a node live
	LagWindow time.Duration // how long a follower's tail may stand still below its owner's
	// Refresh is the period of the pull of stream.list and cluster.info
	// (a change notice pulls at once).
	Refresh time.Duration
	// RequestTimeout bounds each request to the coordinators.
	RequestTimeout time.Duration
	LogFormat      string // text or json
	LogLevel       slog.Level
}

// keys are the configuration keys, which are also the flag names.
var keys = []string{"config", "nats-url", "http-addr", "ttl", "lag-window", "refresh", "request-timeout", "log-format", "log-level"}

// FlagSet returns the service's flags with their defaults.
func FlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.String("config", "", "optional YAML configuration file")
	fs.String("nats-url", "nats://brook:brook@127.0.0.1:4222", "NATS server URL (account BROOK)")
	fs.String("http-addr", "127.0.0.1:8090", "HTTP address for /, /attention and /healthz (empty: off)")
	fs.Duration("ttl", 2*time.Second, "heartbeat TTL: a node unheard for longer is down")
	fs.Duration("lag-window", 10*time.Second, "how long a follower's tail may stand still below its owner's")
	fs.Duration("refresh", time.Second, "period of the pull of the coordinator's stream list and cluster info")
	fs.Duration("request-timeout", 2*time.Second, "timeout of each request to the coordinators")
	fs.String("log-format", "text", "log format: text or json")
	fs.String("log-level", "info", "log level: debug, info, warn or error")
	return fs
}

// Load parses args (without the program name) and returns the configuration.
// A --help request returns pflag.ErrHelp.
func Load(name string, args []string) (Config, error) {
	fs := FlagSet(name)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	k := koanf.New(".")
	if path, _ := fs.GetString("config"); path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("read config file %s: %w", path, err)
		}
		for _, key := range k.Keys() {
			if !slices.Contains(keys, key) {
				return Config{}, fmt.Errorf("config file %s: unknown key %q", path, key)
			}
		}
	}
	// Every brook service reads the same BROOK_* variables; keys meant for
	// another service are dropped here rather than rejected.
	envKey := func(s string) string {
		key := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s, EnvPrefix)), "_", "-")
		if !slices.Contains(keys, key) || key == "config" {
			return ""
		}
		return key
	}
	if err := k.Load(env.Provider(EnvPrefix, ".", envKey), nil); err != nil {
		return Config{}, fmt.Errorf("read environment: %w", err)
	}
	// posflag merges a flag's default only where no earlier source set the
	// key, and a flag given on the command line always.
	if err := k.Load(posflag.Provider(fs, ".", k), nil); err != nil {
		return Config{}, fmt.Errorf("read flags: %w", err)
	}
	return fromKoanf(k)
}

func fromKoanf(k *koanf.Koanf) (Config, error) {
	c := Config{
		NATSURL:   k.String("nats-url"),
		HTTPAddr:  k.String("http-addr"),
		LogFormat: k.String("log-format"),
	}
	var errs []error
	for _, d := range []struct {
		key string
		dst *time.Duration
	}{{"ttl", &c.TTL}, {"lag-window", &c.LagWindow}, {"refresh", &c.Refresh}, {"request-timeout", &c.RequestTimeout}} {
		key, dst := d.key, d.dst
		d, err := duration(k.Get(key))
		if err == nil && d <= 0 {
			err = errors.New("must be positive")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		*dst = d
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("nats-url: must be set"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log-format: %q is neither text nor json", c.LogFormat))
	}
	if err := c.LogLevel.UnmarshalText([]byte(k.String("log-level"))); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
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
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
