package cluster

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/logger"
	"github.com/nats-io/nats-server/v2/server"
)

// The accounts of the conventions: every service connects as brook in
// account BROOK; coordinators also connect as sys in the system account to
// hear disconnect advisories.
const (
	BrookUser     = "brook"
	BrookPassword = "brook"
	SysUser       = "sys"
	SysPassword   = "sys"
	BrookAccount  = "BROOK"
	SysAccount    = "SYS"
)

// NATS is an embedded nats-server with brook's accounts.
type NATS struct {
	srv  *server.Server
	port int
	// opts and logPath start it again (Restart).
	opts    *server.Options
	logPath string
}

// StartNATS runs a nats-server on a free loopback port with accounts BROOK
// (user brook) and SYS (user sys, the system account). If logPath is not
// empty the server logs there.
func StartNATS(logPath string) (*NATS, error) {
	brook := server.NewAccount(BrookAccount)
	sys := server.NewAccount(SysAccount)
	opts := &server.Options{
		ServerName:    "brook-test-nats",
		Host:          "127.0.0.1",
		Port:          server.RANDOM_PORT,
		NoSigs:        true,
		NoLog:         logPath == "",
		Accounts:      []*server.Account{brook, sys},
		SystemAccount: SysAccount,
		Users: []*server.User{
			{Username: BrookUser, Password: BrookPassword, Account: brook},
			{Username: SysUser, Password: SysPassword, Account: sys},
		},
		// A host's NATS cut must not be masked by a long write deadline.
		WriteDeadline: 2 * time.Second,
	}
	return startNATS(opts, logPath)
}

// startNATS starts a server with opts and waits until it takes connections.
func startNATS(opts *server.Options, logPath string) (*NATS, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	if logPath != "" {
		srv.SetLogger(logger.NewFileLogger(logPath, true, false, false, true), false, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server: not ready for connections in 10s")
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server: unexpected listen address %v", srv.Addr())
	}
	return &NATS{srv: srv, port: addr.Port, opts: opts, logPath: logPath}, nil
}

// Restart stops the server, waits down, and starts a new one with the same
// configuration on the same port: every client connection drops and
// reconnects to the new server (which has a new server id). It fails if the
// port cannot be bound again within a few seconds.
func (n *NATS) Restart(down time.Duration) error {
	n.Shutdown()
	time.Sleep(down)
	opts := n.opts.Clone()
	opts.Port = n.port
	// The server treats a port it cannot bind as fatal (its file logger
	// exits the process), so make sure the port is free first.
	for deadline := time.Now().Add(5 * time.Second); ; {
		l, err := net.Listen("tcp", n.Addr())
		if err == nil {
			_ = l.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restart nats: port %d not free: %w", n.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	next, err := startNATS(opts, n.logPath)
	if err != nil {
		return fmt.Errorf("restart nats on port %d: %w", n.port, err)
	}
	n.srv = next.srv
	return nil
}

// StartNATSConfig runs a nats-server on a free loopback port with the
// accounts, users and permissions of the configuration file confPath (as
// tools/auth generates it); its listen address is overridden. If logPath
// is not empty the server logs there.
func StartNATSConfig(confPath, logPath string) (*NATS, error) {
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	opts.ServerName = "brook-test-nats"
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.NoSigs, opts.NoLog = true, logPath == ""
	opts.HTTPPort = 0
	// A host's NATS cut must not be masked by a long write deadline.
	opts.WriteDeadline = 2 * time.Second
	return startNATS(opts, logPath)
}

// Addr is the server's host:port.
func (n *NATS) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// URL is the services' URL (user brook).
func (n *NATS) URL() string { return userURL(BrookUser, BrookPassword, n.Addr()) }

// SysURL is the system account's URL (user sys).
func (n *NATS) SysURL() string { return userURL(SysUser, SysPassword, n.Addr()) }

// Server returns the embedded server.
func (n *NATS) Server() *server.Server { return n.srv }

// Shutdown stops the server.
func (n *NATS) Shutdown() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

func userURL(user, password, addr string) string {
	return "nats://" + user + ":" + password + "@" + addr
}
