// Package svcconfig loads a brook service's configuration the one way every
// service does: the flags' defaults, then an optional YAML file named by
// --config, then BROOK_* environment variables, then the flags given on the
// command line, each overriding the one before.
//
// The configuration keys are the flag names, so "data-dir: /x" in the file,
// BROOK_DATA_DIR=/x in the environment and --data-dir /x all set the same
// key. A service defines its flags (and so its keys and defaults) on a
// FlagSet from NewFlagSet and either decodes the merged values into a struct
// with Load, or reads them itself from Merge's result when it needs rules of
// its own.
package svcconfig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// EnvPrefix marks the environment variables read: BROOK_DATA_DIR sets
// data-dir.
const EnvPrefix = "BROOK_"

// ConfigFlag names the flag that points at the optional YAML file.
const ConfigFlag = "config"

// Options hold the rules in which services differ.
type Options struct {
	// Strict refuses positional arguments and keys in the YAML file that
	// name no flag, so that a typo in the file is an error, not a default.
	Strict bool
}

// NewFlagSet returns an empty flag set that reports errors instead of
// exiting, with the --config flag already defined.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.String(ConfigFlag, "", "optional YAML configuration file")
	return fs
}

// Merge parses args (without the program name) into fs and merges the
// sources into one koanf instance keyed by flag name. A --help request
// returns an error wrapping pflag.ErrHelp.
//
// Every brook service reads the same BROOK_* variables, so a variable that
// names none of fs's flags (one meant for another service) is dropped rather
// than rejected; BROOK_CONFIG is dropped too, as only the flag names the file.
func Merge(fs *pflag.FlagSet, args []string, opts Options) (*koanf.Koanf, error) {
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("parse flags: %w", err)
	}
	if opts.Strict && fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) { keys = append(keys, f.Name) })

	k := koanf.New(".")
	if path, _ := fs.GetString(ConfigFlag); path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("read config file %s: %w", path, err)
		}
		if opts.Strict {
			for _, key := range k.Keys() {
				if !slices.Contains(keys, key) {
					return nil, fmt.Errorf("config file %s: unknown key %q", path, key)
				}
			}
		}
	}
	envKey := func(s string) string {
		key := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s, EnvPrefix)), "_", "-")
		if key == ConfigFlag || !slices.Contains(keys, key) {
			return "" // koanf skips a blanked key
		}
		return key
	}
	if err := k.Load(env.Provider(EnvPrefix, ".", envKey), nil); err != nil {
		return nil, fmt.Errorf("read environment: %w", err)
	}
	// posflag fills a key from a flag's default only where no earlier
	// source set it, and a flag given on the command line always wins.
	if err := k.Load(posflag.Provider(fs, ".", k), nil); err != nil {
		return nil, fmt.Errorf("read flags: %w", err)
	}
	return k, nil
}

// Load merges the sources like Merge and decodes them into dst, a pointer
// to a struct whose koanf tags are the flag names (an embedded Logging
// tagged `koanf:",squash"` takes log-level and log-format). Durations decode
// from the strings the file and the environment give, such as "500ms"; keys
// dst has no field for are ignored.
func Load(fs *pflag.FlagSet, args []string, dst any, opts Options) error {
	k, err := Merge(fs, args, opts)
	if err != nil {
		return err
	}
	if err := k.Unmarshal("", dst); err != nil {
		return fmt.Errorf("decode configuration: %w", err)
	}
	return nil
}
