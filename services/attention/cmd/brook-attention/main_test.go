package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/config"
)

// TestServeAndHealthcheck runs the binary's service loop against an embedded
// NATS server with a stand-in coordinator, checks the healthcheck
// subcommand and the NATS connection name, and stops it gracefully.
func TestServeAndHealthcheck(t *testing.T) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reply := func(v any) nats.MsgHandler {
		data, _ := json.Marshal(v)
		return func(m *nats.Msg) {
			if err := m.Respond(data); err != nil {
				t.Errorf("answer %s: %v", m.Subject, err)
			}
		}
	}
	if _, err := nc.QueueSubscribe(wire.AdminSubject(wire.VerbStreamList), wire.AdminQueue, reply(wire.StreamList{Streams: []wire.StreamInfo{}, Version: 3})); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.QueueSubscribe(wire.AdminSubject(wire.VerbClusterInfo), wire.AdminQueue, reply(wire.ClusterInfo{Version: 3})); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	cfg, err := config.Load(name, []string{"--nats-url", ns.ClientURL(), "--http-addr", "127.0.0.1:0", "--refresh", "100ms", "--pprof"})
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(a net.Addr) { addrs <- a }) }()
	var addr string
	select {
	case a := <-addrs:
		addr = a.String()
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	}
	_, port, _ := net.SplitHostPort(addr)

	deadline := time.Now().Add(5 * time.Second)
	for healthcheck([]string{"--http-addr", addr}, io.Discard) != 0 {
		if time.Now().After(deadline) {
			var out strings.Builder
			healthcheck([]string{"--http-addr", addr}, &out)
			t.Fatalf("never healthy: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A wildcard listen address is checked on loopback.
	if code := healthcheck([]string{"--http-addr", ":" + port}, io.Discard); code != 0 {
		t.Errorf("healthcheck on :%s = %d", port, code)
	}

	// --pprof serves the runtime profiles next to the service's pages.
	for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/attention": "entries"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %s %.200q", path, resp.Status, body)
		}
	}

	connz, err := ns.Connz(&natsserver.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, c := range connz.Conns {
		named = named || c.Name == "brook-attention"
	}
	if !named {
		t.Errorf("no NATS connection named brook-attention")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no graceful shutdown")
	}
	if code := healthcheck([]string{"--http-addr", addr}, io.Discard); code != 1 {
		t.Errorf("healthcheck after shutdown = %d, want 1", code)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"--ttl", "soon"}, &out); code != 2 || !strings.Contains(out.String(), "ttl") {
		t.Errorf("code %d, output %q", code, out.String())
	}
	if code := healthcheck([]string{"--http-addr", ""}, &out); code != 1 {
		t.Errorf("healthcheck without address = %d", code)
	}
}
