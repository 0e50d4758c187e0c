// Command brook-coordinator runs one replica of brook's coordination
// service: the Raft state, the controller and recovery worker (on the
// leader), and the admin and assignment endpoints over NATS.
//
//	brook-coordinator --replica-id 1 --peers 1=...,2=...,3=... --data-dir DIR --nats-url URL
//	brook-coordinator healthcheck --http-addr 127.0.0.1:8081
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/brook-streams/brook/services/coordinator/config"
	"github.com/brook-streams/brook/services/coordinator/raftstore"
	"github.com/brook-streams/brook/services/coordinator/server"
	"github.com/brook-streams/brook/services/coordinator/telemetry"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:])
	}
	cfg, err := config.Load(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "brook-coordinator: %v\n", err)
		return 2
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
	peers, _ := config.ParsePeers(cfg.Peers) // validated by Load
	srv, err := server.Start(ctx, server.Options{
		ReplicaID:       cfg.ReplicaID,
		RaftAddr:        cfg.RaftAddr,
		Peers:           peers,
		DataDir:         cfg.DataDir,
		NATSURL:         cfg.NATSURL,
		NATSSystemURL:   cfg.NATSSystemURL,
		TTL:             cfg.TTL,
		DisconnectGrace: cfg.DisconnectGrace,
		ReplaceAfter:    cfg.ReplaceAfter,
		SealTimeout:     cfg.SealTimeout,
		DefaultPolicy:   cfg.DefaultPolicy,
		RTTMillisecond:  cfg.RTTMillisecond,
		HTTPAddr:        cfg.HTTPAddr,
		Logger:          log,
		TracerProvider:  tp,
	})
	if err != nil {
		log.Error("start failed", "err", err)
		_ = tp.Shutdown(context.Background())
		return 1
	}
	<-ctx.Done()
	log.Info("signal received: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Close(sctx)
	if err := tp.Shutdown(sctx); err != nil {
		log.Warn("tracing shutdown", "err", err)
	}
	return 0
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
