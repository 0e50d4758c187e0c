package svcconfig

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"
)

// Logging is the log configuration every service has: --log-level and
// --log-format.
type Logging struct {
	Level  string `koanf:"log-level"`  // debug, info, warn or error (slog's names)
	Format string `koanf:"log-format"` // text or json
}

// AddLoggingFlags defines --log-format and --log-level on fs with the
// defaults every service uses.
func AddLoggingFlags(fs *pflag.FlagSet) {
	fs.String("log-format", "text", "log format: text or json")
	fs.String("log-level", "info", "log level: debug, info, warn or error")
}

// SlogLevel is the slog level named by Level.
func (l Logging) SlogLevel() (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.Level)); err != nil {
		return 0, fmt.Errorf("--log-level %q: %w", l.Level, err)
	}
	return lvl, nil
}

// Validate checks the level and the format, reporting both if both are bad.
func (l Logging) Validate() error {
	var errs []error
	if _, err := l.SlogLevel(); err != nil {
		errs = append(errs, err)
	}
	if l.Format != "text" && l.Format != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", l.Format))
	}
	return errors.Join(errs...)
}

// Logger builds the logger the configuration asks for, on stderr. An
// invalid level (one Validate refuses) logs at info.
func (l Logging) Logger() *slog.Logger {
	lvl, _ := l.SlogLevel()
	return NewLogger(os.Stderr, l.Format, lvl)
}

// NewLogger returns a logger writing to w at level: JSON lines when format
// is "json", slog's text format otherwise.
func NewLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
