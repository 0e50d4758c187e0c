// Command brook-attention serves brook's attention list: what an operator
// must look at, judged from the coordinators' state and the stream hosts'
// heartbeats. It keeps nothing durable.
//
//	brook-attention --nats-url nats://brook:brook@127.0.0.1:4222 --http-addr 127.0.0.1:8090
//	brook-attention --nats-url nats://127.0.0.1:4222 --nats-nkey .brook-auth/attention.nk
//	brook-attention healthcheck --http-addr 127.0.0.1:8090
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/pkg/connwatch"
	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/config"
	"github.com/brook-streams/brook/services/attention/judge"
	"github.com/brook-streams/brook/services/attention/server"
	"github.com/brook-streams/brook/services/attention/telemetry"
)

const name = "brook-attention"

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	// Before anything is created: whatever the service writes is this
	// user's alone.
	svcconfig.RestrictFileModes()
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:], stderr)
	}
	cfg, err := config.Load(name, args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		complain(stderr, "%s: %v\n", name, err)
		return 2
	}
	log := cfg.NewLogger()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error("brook-attention failed", "err", err)
		return 1
	}
	log.Info("brook-attention stopped")
	return 0
}

// serve runs the service until ctx ends, then shuts down gracefully. If
// listening is not nil it is told the HTTP address once bound.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, listening func(net.Addr)) error {
	tp, shutdownTracing, err := telemetry.Setup(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}()
	metrics, err := telemetry.SetupMetrics(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := metrics.Shutdown(sctx); err != nil {
			log.Warn("flush metrics", "err", err)
		}
	}()

	auth, err := cfg.NATSAuth.Options(wire.InboxAttention)
	if err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	// Pings find a silent partition in seconds (connwatch.PingInterval).
	nc, err := nats.Connect(cfg.NATSURL, append(append(auth, connwatch.PingOptions()...),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectJitter(150*time.Millisecond, 150*time.Millisecond),
		// Start even if NATS is not up yet, and keep trying.
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(*nats.Conn) { log.Info("nats connected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("nats disconnected", "err", err) }),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
	)...)
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	defer nc.Close()

	svc := server.New(nc, server.Options{
		Judge:          judge.Config{TTL: cfg.TTL, LagWindow: cfg.LagWindow, LateGrace: cfg.LateGrace},
		Refresh:        cfg.Refresh,
		RequestTimeout: cfg.RequestTimeout,
		Logger:         log,
		TracerProvider: tp,
		MeterProvider:  metrics.MeterProvider(),
		MetricsHandler: metrics.Handler(),
	})

	var httpSrv *http.Server
	httpDone := make(chan error, 1)
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
		}
		handler := svc.Handler()
		if cfg.PProf {
			mux := http.NewServeMux()
			svcconfig.HandlePProf(mux)
			mux.Handle("/", handler)
			handler = mux
		}
		httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		go func() { httpDone <- httpSrv.Serve(ln) }()
		log.Info("http listening", "addr", ln.Addr().String())
		if listening != nil {
			listening(ln.Addr())
		}
	}
	log.Info("brook-attention started", "nats_url", redact(cfg.NATSURL), "ttl", cfg.TTL, "lag_window", cfg.LagWindow, "late_grace", cfg.LateGrace, "refresh", cfg.Refresh, "pprof", cfg.PProf)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(ctx) }()

	var runErr error
	select {
	case runErr = <-runDone:
	case err := <-httpDone:
		runErr = fmt.Errorf("http server: %w", err)
		cancel()
		if err := <-runDone; err != nil {
			log.Warn("service loop after the http server failed", "err", err)
		}
	}
	log.Info("shutting down")
	if httpSrv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := httpSrv.Shutdown(sctx); err != nil {
			log.Warn("http shutdown", "err", err)
		}
	}
	if err := nc.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		log.Debug("nats flush on shutdown", "err", err)
	}
	return runErr
}

// redact hides the password of each NATS URL of a list in logs (a URL
// parser would read a list as one URL and show the passwords after the
// first).
func redact(u string) string { return svcconfig.RedactURLs(u) }

// healthcheck GETs /healthz of a running brook-attention and exits 0 when
// it answers 200, for health checks in images without a shell.
func healthcheck(args []string, stderr io.Writer) int {
	cfg, err := config.Load(name+" healthcheck", args)
	if err != nil {
		complain(stderr, "healthcheck: %v\n", err)
		return 1
	}
	if cfg.HTTPAddr == "" {
		complain(stderr, "healthcheck: no --http-addr to check\n")
		return 1
	}
	host, port, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		complain(stderr, "healthcheck: http-addr %q: %v\n", cfg.HTTPAddr, err)
		return 1
	}
	// A wildcard listen address is reached on loopback.
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		complain(stderr, "healthcheck: %v\n", err)
		return 1
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	// The verdict is the status already received; closing this one-shot
	// client's body has nothing left to report.
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		complain(stderr, "healthcheck: %s: %s", resp.Status, body)
		return 1
	}
	return 0
}

// complain writes a diagnostic to stderr. A failed write there has no other
// place to be reported; the exit code still tells what happened.
func complain(stderr io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(stderr, format, args...)
}
