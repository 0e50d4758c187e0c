package svcconfig

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestLoggingValidate(t *testing.T) {
	for _, tc := range []struct {
		l    Logging
		want []string // substrings of the error; none means valid
	}{
		{Logging{Level: "debug", Format: "json"}, nil},
		{Logging{Level: "WARN", Format: "text"}, nil},
		{Logging{Level: "loud", Format: "text"}, []string{`--log-level "loud"`}},
		{Logging{Level: "info", Format: "xml"}, []string{`--log-format "xml": want text or json`}},
		{Logging{Level: "", Format: ""}, []string{"--log-level", "--log-format"}},
	} {
		err := tc.l.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.l, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: err %v, want it to mention %q", tc.l, err, w)
			}
		}
	}
	if lvl, err := (Logging{Level: "error"}).SlogLevel(); err != nil || lvl != slog.LevelError {
		t.Errorf("SlogLevel: %v %v", lvl, err)
	}
}

func TestNewLogger(t *testing.T) {
	var out strings.Builder
	log := NewLogger(&out, "json", slog.LevelWarn)
	log.Info("dropped")
	log.Warn("kept", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal([]byte(out.String()), &rec); err != nil {
		t.Fatalf("not one JSON line: %q: %v", out.String(), err)
	}
	if rec["msg"] != "kept" || rec["k"] != float64(1) {
		t.Errorf("record %v", rec)
	}

	out.Reset()
	NewLogger(&out, "text", slog.LevelInfo).Info("hello", "k", 1)
	if got := out.String(); !strings.Contains(got, "msg=hello k=1") {
		t.Errorf("text output %q", got)
	}
}
