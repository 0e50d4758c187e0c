// Command brook-coordinator runs one replica of brook's coordination
// service: the Raft state, the controller and recovery worker (on the
// leader), and the admin and assignment endpoints over NATS.
//
//	brook-coordinator --replica-id 1 --peers 1=...,2=...,3=... --data-dir DIR --nats-url URL
//	  [--nats-nkey coordinator.nk --nats-system-url URL --nats-system-nkey coordinator-sys.nk --host-keys host-keys.json]
//	  [--nats-ca ca.pem --nats-cert coordinator-cert.pem --nats-key coordinator-key.pem]
//	  [--raft-ca ca.pem --raft-cert coordinator-raft-cert.pem --raft-key coordinator-raft-key.pem]
//	brook-coordinator healthcheck --http-addr 127.0.0.1:8081
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/brook-streams/brook/pkg/svcconfig"
	pkgtelemetry "github.com/brook-streams/brook/pkg/telemetry"
	"github.com/brook-streams/brook/services/coordinator/config"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/raftstore"
	"github.com/brook-streams/brook/services/coordinator/server"
	"github.com/brook-streams/brook/services/coordinator/telemetry"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// Before anything is created: the Raft log, snapshots and everything
	// else the coordinator writes are its user's alone.
	svcconfig.RestrictFileModes()
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:])
	}
	cfg, err := config.Load(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "brook-coordinator: %v\n", err)
		return 2
	}
	var hostKeys map[string]string // nil: advisories matched by name only
	if cfg.HostKeys != "" {
		if hostKeys, err = config.ReadHostKeys(cfg.HostKeys); err != nil {
			fmt.Fprintf(os.Stderr, "brook-coordinator: %v\n", err)
			return 2
		}
	}
	log := cfg.Logger()
	raftstore.RouteDragonboatLogs(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	tp, err := telemetry.Setup(ctx, "coordinator-"+strconv.FormatUint(cfg.ReplicaID, 10))
	if err != nil {
		log.Error("tracing setup failed", "err", err)
		return 1
	}
	metrics, err := telemetry.SetupMetrics(ctx, "coordinator-"+strconv.FormatUint(cfg.ReplicaID, 10))
	if err != nil {
		log.Error("metrics setup failed", "err", err)
		_ = tp.Shutdown(context.Background())
		return 1
	}
	peers, _ := config.ParsePeers(cfg.Peers) // validated by Load
	var raftTLS *raftstore.TLSFiles
	if cfg.RaftTLS() {
		raftTLS = &raftstore.TLSFiles{CA: cfg.RaftCA, Cert: cfg.RaftCert, Key: cfg.RaftKey}
	}
	srv, err := server.Start(ctx, server.Options{
		ReplicaID:        cfg.ReplicaID,
		RaftAddr:         cfg.RaftAddr,
		Peers:            peers,
		DataDir:          cfg.DataDir,
		NATSURL:          cfg.NATSURL,
		NATSSystemURL:    cfg.NATSSystemURL,
		NATSAuth:         cfg.NATSAuth,
		NATSSystemNkey:   cfg.NATSSystemNkey,
		HostKeys:         hostKeys,
		TTL:              cfg.TTL,
		DisconnectGrace:  cfg.DisconnectGrace,
		ProbeTimeout:     cfg.ProbeTimeout,
		ReplaceAfter:     cfg.ReplaceAfter,
		MaxStreams:       cfg.MaxStreams,
		MaxCopiesPerHost: cfg.MaxCopiesPerHost,
		MaxInflight:      cfg.MaxInflight,
		SealTimeout:      cfg.SealTimeout,
		Balance: controller.BalanceParams{Off: !cfg.Balance, Interval: cfg.BalanceInterval,
			MaxMoves: cfg.BalanceMoves, Margin: cfg.BalanceMargin, Settle: cfg.BalanceSettle, MaxMovesPerHost: cfg.BalancePerHost},
		DefaultPolicy:  cfg.DefaultPolicy,
		RTTMillisecond: cfg.RTTMillisecond,
		RaftTLS:        raftTLS,
		HTTPAddr:       cfg.HTTPAddr,
		PProf:          cfg.PProf,
		Logger:         log,
		TracerProvider: tp,
		MeterProvider:  metrics.MeterProvider(),
		MetricsHandler: metrics.Handler(),
	})
	if err != nil {
		log.Error("start failed", "err", err)
		_ = tp.Shutdown(context.Background())
		_ = metrics.Shutdown(context.Background())
		return 1
	}
	<-ctx.Done()
	log.Info("signal received: shutting down")
	stopBounded(log, srv, tp, metrics)
	return 0
}

// Shutdown budget. The process must exit within 5 s of SIGTERM even when
// nothing answers (when every process stops at once the last coordinator
// has no Raft quorum): Close is given closeBudget and bounds each of its
// steps, the trace flush gets flushBudget, and exitDeadline is a backstop
// past which the process exits whatever is still running.
const (
	closeBudget  = 4 * time.Second
	flushBudget  = 500 * time.Millisecond
	exitDeadline = 4700 * time.Millisecond
)

// stopBounded closes the server and flushes traces and metrics, returning
// by exitDeadline even if any of it is stuck.
func stopBounded(log *slog.Logger, srv *server.Server, tp *sdktrace.TracerProvider, metrics *pkgtelemetry.Metrics) {
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cctx, cancel := context.WithTimeout(context.Background(), closeBudget)
		srv.Close(cctx)
		cancel()
		fctx, cancel := context.WithTimeout(context.Background(), flushBudget)
		defer cancel()
		flushed := make(chan struct{})
		go func() {
			defer close(flushed)
			if err := metrics.Shutdown(fctx); err != nil {
				log.Warn("metrics shutdown", "err", err)
			}
		}()
		if err := tp.Shutdown(fctx); err != nil {
			log.Warn("tracing shutdown", "err", err)
		}
		<-flushed
	}()
	t := time.NewTimer(exitDeadline)
	defer t.Stop()
	select {
	case <-done:
		log.Info("shut down", "took", time.Since(began).String())
	case <-t.C:
		log.Error("shutdown did not finish in time; exiting anyway", "deadline", exitDeadline.String())
	}
}

// healthcheck GETs /healthz and exits 0 on 200, 1 otherwise; it is what a
// container health check runs in an image without a shell or curl. Other
// flags of the service are accepted and ignored, so the same argument list
// works.
func healthcheck(args []string) int {
	fs := pflag.NewFlagSet("healthcheck", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	addr := fs.String("http-addr", os.Getenv(config.EnvPrefix+"HTTP_ADDR"), "address of the health endpoint")
	if err := fs.Parse(args); err != nil || *addr == "" {
		fmt.Fprintln(os.Stderr, "healthcheck: --http-addr is required")
		return 1
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "healthcheck: %v\n", err)
		return 1
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		fmt.Fprintf(os.Stderr, "healthcheck: %v\n", err)
		return 1
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "healthcheck: %s\n", resp.Status)
		return 1
	}
	return 0
}
