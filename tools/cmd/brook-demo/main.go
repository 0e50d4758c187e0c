// Command brook-demo is the one-command demo behind `make demo`: it builds
// the services, starts a local cluster on loopback (nats-server inside this
// process; three coordinators, four stream hosts and attention as their own
// processes), creates a 3-copy majority_durable stream, publishes with a
// progress line, SIGKILLs the stream's owner and shows the failover as it
// happens (detection, seals, the choice, the new owner and epoch, the trace
// id, the write unavailability), publishes on, reads everything back with a
// durable cursor to check that every confirmed record is delivered exactly
// once at its offset, restarts the old owner and shows it rejoin as a
// follower without another recovery, and prints a summary.
//
//	go run ./tools/cmd/brook-demo [--keep] [--dir DIR] [--before 5s] [--after 5s]
//
// It exits 1 when the verdict is FAIL or the demo cannot run, and stops
// everything it started, on Ctrl-C too.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.Dir, "dir", "", "directory for binaries, data and logs (default: a new directory under "+os.TempDir()+")")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the cluster running after the summary, until Ctrl-C, and print commands to poke it")
	flag.DurationVar(&cfg.Before, "before", 5*time.Second, "how long to publish before killing the owner")
	flag.DurationVar(&cfg.After, "after", 5*time.Second, "how long to publish after the kill")
	flag.IntVar(&cfg.Publishers, "publishers", 32, "concurrent publishers")
	flag.IntVar(&cfg.RecordSize, "record-size", 128, "record size in bytes")
	flag.IntVar(&cfg.NATSServers, "nats-servers", 1, "nats-servers to run, joined into a NATS cluster by routes when more than one")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, cfg, os.Stdout)
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "\nbrook-demo: interrupted; stopped everything it started")
		stop()
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "brook-demo:", err)
		stop()
		os.Exit(1)
	}
	if !sum.Pass() {
		stop()
		os.Exit(1)
	}
}
