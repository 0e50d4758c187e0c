package config

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "attention.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := Load("brook-attention", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		NATSURL: "nats://brook:brook@127.0.0.1:4222", HTTPAddr: "127.0.0.1:8090",
		TTL: wire.DefaultHostTTL, LagWindow: 10 * time.Second, LateGrace: judge.DefaultLateGrace, Refresh: time.Second, RequestTimeout: 2 * time.Second,
		LogFormat: "text", LogLevel: slog.LevelInfo,
	}
	if c != want {
		t.Errorf("defaults\n got %+v\nwant %+v", c, want)
	}
}

// Each source overrides the one before: defaults < file < BROOK_* < flags.
func TestPrecedence(t *testing.T) {
	path := writeFile(t, "ttl: 3s\nlag-window: 20s\nrefresh: 250ms\nlog-format: json\n")
	t.Setenv("BROOK_LAG_WINDOW", "30s")
	t.Setenv("BROOK_REFRESH", "400ms")
	t.Setenv("BROOK_DATA_DIR", "/elsewhere") // another service's key: ignored
	c, err := Load("brook-attention", []string{"--config", path, "--refresh", "100ms", "--log-level", "debug", "--late-grace", "0s", "--pprof"})
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != 3*time.Second { // file over default
		t.Errorf("ttl %v", c.TTL)
	}
	if c.LagWindow != 30*time.Second { // env over file
		t.Errorf("lag-window %v", c.LagWindow)
	}
	if c.Refresh != 100*time.Millisecond { // flag over env
		t.Errorf("refresh %v", c.Refresh)
	}
	if c.LateGrace != 0 || !c.PProf { // zero: no grace
		t.Errorf("late-grace %v pprof %v", c.LateGrace, c.PProf)
	}
	if c.LogFormat != "json" || c.LogLevel != slog.LevelDebug || c.RequestTimeout != 2*time.Second {
		t.Errorf("config %+v", c)
	}
}

func TestEnvEmptiesHTTPAddr(t *testing.T) {
	t.Setenv("BROOK_HTTP_ADDR", "")
	c, err := Load("brook-attention", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "" {
		t.Errorf("http-addr %q, want off", c.HTTPAddr)
	}
}

func TestRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		file, env string
		args      []string
		want      string
	}{
		"unknown file key": {file: "ttl: 2s\nnode: h1\n", want: `unknown key "node"`},
		"bad duration":     {args: []string{"--lag-window", "0s"}, want: "lag-window: must be positive"},
		"bare number":      {file: "ttl: 5\n", want: "ttl: 5 is not a duration"},
		"negative grace":   {args: []string{"--late-grace", "-1s"}, want: "late-grace: must not be negative"},
		"bad env duration": {env: "soon", want: `ttl: parse "soon"`},
		"bad log format":   {args: []string{"--log-format", "xml"}, want: "log-format"},
		"bad log level":    {args: []string{"--log-level", "loud"}, want: "log-level"},
		"stray argument":   {args: []string{"extra"}, want: "unexpected arguments"},
		"missing file":     {args: []string{"--config", "/nonexistent/x.yaml"}, want: "read config file"},
		"unknown flag":     {args: []string{"--node", "h1"}, want: "unknown flag"},
		"empty nats url":   {args: []string{"--nats-url", ""}, want: "nats-url: must be set"},
		"cert without key": {args: []string{"--nats-cert", "c.pem"}, want: "--nats-cert and --nats-key go together"},
	} {
		t.Run(name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, tc.file))
			}
			if tc.env != "" {
				t.Setenv("BROOK_TTL", tc.env)
			}
			_, err := Load("brook-attention", args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	fs := FlagSet("x")
	fs.SetOutput(new(strings.Builder))
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("err %v", err)
	}
}

// TestNATSAuth: the credential files come from the file, the environment
// and flags, like every key.
func TestNATSAuth(t *testing.T) {
	path := writeFile(t, "nats-ca: /file/ca.pem\n")
	t.Setenv("BROOK_NATS_NKEY", "/env/attention.nk")
	c, err := Load("brook-attention", []string{"--config", path, "--nats-cert", "/flag/c.pem", "--nats-key", "/flag/k.pem"})
	if err != nil {
		t.Fatal(err)
	}
	want := svcconfig.NATSAuth{Nkey: "/env/attention.nk", CA: "/file/ca.pem", Cert: "/flag/c.pem", Key: "/flag/k.pem"}
	if c.NATSAuth != want {
		t.Errorf("nats auth %+v, want %+v", c.NATSAuth, want)
	}
}
