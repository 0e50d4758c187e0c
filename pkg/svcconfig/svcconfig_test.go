package svcconfig

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testConfig is a service configuration of the kind the services decode.
type testConfig struct {
	Name    string        `koanf:"name"`
	Wait    time.Duration `koanf:"wait"`
	Retries int           `koanf:"retries"`
	Addr    string        `koanf:"addr"`
	Logging `koanf:",squash"`
}

func testFlags() *pflag.FlagSet {
	fs := NewFlagSet("test")
	fs.SetOutput(new(strings.Builder)) // pflag prints parse errors and usage
	fs.String("name", "default-name", "")
	fs.Duration("wait", time.Second, "")
	fs.Int("retries", 3, "")
	fs.String("addr", "127.0.0.1:1", "")
	AddLoggingFlags(fs)
	return fs
}

// writeYAML stores body in a fresh file of the test and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(body); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// TestPrecedence: defaults < file < environment < flags, one key won by
// each layer.
func TestPrecedence(t *testing.T) {
	path := writeYAML(t, "name: file\nwait: 2s\nretries: 5\nlog-format: json\n")
	t.Setenv("BROOK_WAIT", "4s")
	t.Setenv("BROOK_RETRIES", "7")
	var c testConfig
	if err := Load(testFlags(), []string{"--config", path, "--retries", "9"}, &c, Options{}); err != nil {
		t.Fatal(err)
	}
	want := testConfig{Name: "file", Wait: 4 * time.Second, Retries: 9, Addr: "127.0.0.1:1",
		Logging: Logging{Level: "info", Format: "json"}}
	if c != want {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

// An environment variable set to "" overrides a default, so BROOK_HTTP_ADDR=
// can turn an endpoint off.
func TestEmptyEnvOverridesDefault(t *testing.T) {
	t.Setenv("BROOK_ADDR", "")
	var c testConfig
	if err := Load(testFlags(), nil, &c, Options{}); err != nil {
		t.Fatal(err)
	}
	if c.Addr != "" {
		t.Errorf("addr %q, want empty", c.Addr)
	}
}

// Variables for no flag of this service, and BROOK_CONFIG, never become keys.
func TestEnvOnlyForFlags(t *testing.T) {
	t.Setenv("BROOK_DATA_DIR", "/elsewhere")
	t.Setenv("BROOK_CONFIG", writeYAML(t, "name: from-env-file\n"))
	k, err := Merge(testFlags(), nil, Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if k.Exists("data-dir") || k.String("config") != "" || k.String("name") != "default-name" {
		t.Errorf("keys %v, name %q", k.Keys(), k.String("name"))
	}
}

func TestStrict(t *testing.T) {
	path := writeYAML(t, "name: x\nnode: h1\n")
	for _, tc := range []struct {
		args []string
		want string // "" means accepted
	}{
		{[]string{"--config", path}, `unknown key "node"`},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := Merge(testFlags(), tc.args, Options{Strict: true}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("strict %q: err %v, want %q", tc.args, err, tc.want)
		}
		// Without Strict both are let through.
		if _, err := Merge(testFlags(), tc.args, Options{}); err != nil {
			t.Errorf("lenient %q: %v", tc.args, err)
		}
	}
}

func TestErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  string
		want string
	}{
		"missing file":  {args: []string{"--config", "/nonexistent/c.yaml"}, want: "read config file /nonexistent/c.yaml"},
		"unknown flag":  {args: []string{"--node", "h1"}, want: "parse flags: unknown flag: --node"},
		"bad env value": {env: "soon", want: "decode configuration"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("BROOK_WAIT", tc.env)
			}
			var c testConfig
			err := Load(testFlags(), tc.args, &c, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Merge(testFlags(), []string{"--help"}, Options{}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("--help: err %v, want pflag.ErrHelp", err)
	}
}

// HandlePProf serves the index and a named profile.
func TestHandlePProf(t *testing.T) {
	mux := http.NewServeMux()
	HandlePProf(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: read body: %v", path, err)
		}
		if err := resp.Body.Close(); err != nil {
			t.Fatalf("GET %s: close body: %v", path, err)
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
			t.Fatalf("GET %s: %d %.200q", path, resp.StatusCode, body)
		}
	}
}
