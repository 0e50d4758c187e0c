// Command brook-streamhost runs a brook stream host: it holds the copies
// placed on its node, serves publish and consume for the streams it owns,
// replicates the streams it follows, answers seals and applies assignments.
//
// Usage:
//
//	brook-streamhost --node h1 --data-dir /var/lib/brook --nats-url nats://brook:brook@127.0.0.1:4222
//	brook-streamhost --node h1 --data-dir /var/lib/brook --nats-url nats://127.0.0.1:4222 --nats-nkey .brook-auth/host-h1.nk
//	brook-streamhost healthcheck --http-addr 127.0.0.1:8081
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/connwatch"
	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/config"
	"github.com/brook-streams/brook/services/streamhost/host"
	"github.com/brook-streams/brook/services/streamhost/telemetry"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "healthcheck" {
		os.Exit(healthcheck(args[1:]))
	}
	os.Exit(run(args))
}

func run(args []string) int {
	// Before anything is created: the data directory, its logs and
	// checkpoints are this user's alone.
	svcconfig.RestrictFileModes()
	cfg, err := config.Load(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "brook-streamhost:", err)
		return 2
	}
	log := cfg.Logger().With("service", "brook-streamhost")
	if err := serve(cfg, log); err != nil {
		log.Error("stream host failed", "err", err)
		return 1
	}
	return 0
}

func serve(cfg config.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tp, stopTracing, err := telemetry.Setup(ctx, "brook-streamhost", cfg.Node)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}()

	metrics, err := telemetry.SetupMetrics(ctx, "brook-streamhost", cfg.Node)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := metrics.Shutdown(sctx); err != nil {
			log.Warn("flush metrics", "err", err)
		}
	}()

	// h is set before the connection can first reconnect (the host is
	// created right after connecting); reconnects before that need nothing.
	var h atomic.Pointer[host.Host]
	// The host's replies come to its own inboxes, the only ones it may
	// subscribe to when NATS runs with credentials.
	auth := cfg.NATSAuth
	authOpts, err := auth.Options(wire.HostInbox(cfg.Node))
	if err != nil {
		return err
	}
	// Both connections ping their server, so that a silent partition is
	// found out in seconds (connwatch.PingInterval).
	authOpts = append(authOpts, connwatch.PingOptions()...)
	nc, err := nats.Connect(cfg.NATSURL, append(authOpts,
		nats.Name("brook-streamhost:"+cfg.Node),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		// Start even while NATS is not up yet; the connection keeps trying.
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected", "err", err)
			if hp := h.Load(); hp != nil {
				hp.Disconnected()
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
			if hp := h.Load(); hp != nil {
				hp.Reconnected()
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("nats error", "subject", subj, "err", err)
		}),
	)...)
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	defer nc.Close()
	// The beats' own connection (host.Config.BeatConn), with the same
	// credentials: liveness must not wait behind the main connection's
	// replication traffic and reports. Its reconnects need nothing but
	// the beats going on; the host closes it after its last beat (the
	// deferred Close covers a failed start).
	beatNC, err := nats.Connect(cfg.NATSURL, append(authOpts,
		nats.Name(beatConnPrefix+cfg.Node),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats beat connection disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats beat connection reconnected", "url", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("nats beat connection error", "err", err)
		}),
	)...)
	if err != nil {
		return fmt.Errorf("connect to nats (beats): %w", err)
	}
	defer beatNC.Close()

	var replLn net.Listener
	if cfg.ReplListen != "" {
		if replLn, err = net.Listen("tcp", cfg.ReplListen); err != nil {
			return fmt.Errorf("listen on %s (--repl-listen): %w", cfg.ReplListen, err)
		}
	}
	hst, err := host.New(host.Config{
		Node:               cfg.Node,
		DataDir:            cfg.DataDir,
		HeartbeatInterval:  cfg.HeartbeatInterval,
		FullReportInterval: cfg.FullReportInterval,
		LivenessInterval:   livenessInterval(cfg.LivenessInterval),
		BeatConn:           beatNC,
		MaxPayload:         cfg.MaxPayload,
		ConfirmTimeout:     cfg.ConfirmTimeout,
		// The rebuild bounds are validated positive by config.
		DedupeRebuildRecords: cfg.DedupeRebuildRecords,
		DedupeRebuildBytes:   cfg.DedupeRebuildBytes,
		// The caps are validated positive by config.
		MaxFetchWaits:  cfg.MaxFetchWaits,
		MaxInflight:    cfg.MaxInflight,
		Logger:         log,
		TracerProvider: tp,
		MeterProvider:  metrics.MeterProvider(),
		ReplListener:   replLn,
		ReplAdvertise:  cfg.ReplAdvertise,
	}, nc)
	if err != nil {
		if replLn != nil {
			_ = replLn.Close()
		}
		return err
	}
	h.Store(hst)

	var srv *http.Server
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			if err := hst.Health(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		metrics.Mount(mux)
		if cfg.PProf {
			svcconfig.HandlePProf(mux)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
		log.Info("serving /healthz and /metrics", "addr", ln.Addr().String(), "otlp_metrics", metrics.OTLP())
	}

	runErr := hst.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		log.Warn("drain nats", "err", err)
	}
	return runErr
}

// healthcheck GETs /healthz and exits 0 when it answers 200, for container
// health checks in images that hold nothing but this binary.
func healthcheck(args []string) int {
	fs := pflag.NewFlagSet("healthcheck", pflag.ContinueOnError)
	addr := fs.String("http-addr", os.Getenv("BROOK_HTTP_ADDR"), "address of the host's /healthz endpoint")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	fs.ParseErrorsAllowlist.UnknownFlags = true // accept the service's other flags
	if err := fs.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 2
	}
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "healthcheck: --http-addr is required")
		return 2
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get("http://" + *addr + "/healthz")
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	// The verdict is the status alone; closing the unread body of this
	// one-shot request has nothing left to report.
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "healthcheck: status", resp.Status)
		return 1
	}
	return 0
}

// beatConnPrefix names the beat connection, brook-streamhost-beat:<node>:
// not the coordinators' brook-streamhost:<node>, so that the disconnect
// advisory of a beat connection is no host's (a lost beat connection is
// noticed by the beats' TTL; the advisory that counts is the main
// connection's, the one the beats name).
const beatConnPrefix = "brook-streamhost-beat:"

// reconnectDelay is how long nats.go waits before a reconnect attempt
// once it has tried every server of the list, attempts counting those
// passes from 1: not at all the first time, then 100 ms and up to 150 ms
// of jitter. nats.go tries the other servers of a list without a wait, but
// a host on a single server, whose connection that server closed (a kick,
// a slow consumer), waited the whole reconnect wait before trying it
// again: longer than the coordinators' disconnect grace, so each such
// close expired a live host (e2e TestHostConnectionKickedOneServer). A
// server that is down refuses the first attempt at once; the waits that
// follow keep a restarting server from being hammered.
func reconnectDelay(attempts int) time.Duration {
	if attempts <= 1 {
		return 0
	}
	return 100*time.Millisecond + rand.N(150*time.Millisecond)
}

// livenessInterval maps the flag (0: off) to host.Config's (negative: off).
func livenessInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
