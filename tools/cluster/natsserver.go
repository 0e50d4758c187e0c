package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/url"
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

// NATS is a nats-server with brook's accounts: embedded in this process,
// or (StartNATSProcesses) a process of its own.
type NATS struct {
	srv  *server.Server // nil for a server process
	port int
	// opts and logPath start it again (Restart).
	opts    *server.Options
	logPath string

	// A server process (nil when embedded), its name and its
	// monitoring address.
	proc    *Proc
	name    string
	monitor string
}

// StartNATS runs a nats-server on a free loopback port with accounts BROOK
// (user brook) and SYS (user sys, the system account). If logPath is not
// empty the server logs there.
func StartNATS(logPath string) (*NATS, error) {
	opts, err := natsOptions("", logPath == "")
	if err != nil {
		return nil, err
	}
	opts.ServerName = "brook-test-nats"
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
	if n.proc != nil {
		return n.restartProc(down)
	}
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
	opts, err := natsOptions(confPath, logPath == "")
	if err != nil {
		return nil, err
	}
	opts.ServerName = "brook-test-nats"
	return startNATS(opts, logPath)
}

// StartNATSCluster runs n nats-servers on free loopback ports, each with
// the accounts, users and permissions of confPath (as StartNATSConfig; with
// confPath empty, those of StartNATS), joined into one NATS cluster by
// explicit routes between every pair (no route authentication: loopback
// test servers only). The servers do not advertise their client addresses
// to clients (NoAdvertise), so a process connects only to the URLs it was
// given (the harness's proxies stay in the path). It returns once every
// server has a route to every other. logPath(i), if not nil, is server
// i's log file. n == 1 is StartNATSConfig (or StartNATS) without a cluster.
func StartNATSCluster(n int, confPath string, logPath func(i int) string) (_ []*NATS, err error) {
	if n < 1 {
		return nil, fmt.Errorf("nats cluster: %d servers", n)
	}
	logOf := func(i int) string {
		if logPath == nil {
			return ""
		}
		return logPath(i)
	}
	if n == 1 {
		var ns *NATS
		if confPath == "" {
			ns, err = StartNATS(logOf(0))
		} else {
			ns, err = StartNATSConfig(confPath, logOf(0))
		}
		if err != nil {
			return nil, err
		}
		return []*NATS{ns}, nil
	}
	// Every server names every other's route port, so they are picked
	// first.
	routePorts, err := freeLoopbackPorts(n)
	if err != nil {
		return nil, fmt.Errorf("nats cluster: route port: %w", err)
	}
	var out []*NATS
	defer func() {
		if err != nil {
			shutdownAll(out)
		}
	}()
	for i := range n {
		opts, err := natsOptions(confPath, logOf(i) == "")
		if err != nil {
			return nil, err
		}
		opts.ServerName = "brook-test-nats-" + strconv.Itoa(i+1)
		opts.Cluster.Name = "brook-test"
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = routePorts[i]
		opts.Cluster.NoAdvertise = true
		// A lame duck (LameDuckNATS) closes its clients over about a
		// second, not the default two minutes.
		opts.LameDuckDuration = lameDuckDuration
		opts.LameDuckGracePeriod = lameDuckGrace
		for j, p := range routePorts {
			if j != i {
				opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
			}
		}
		ns, err := startNATS(opts, logOf(i))
		if err != nil {
			return nil, fmt.Errorf("nats cluster: server %d: %w", i+1, err)
		}
		out = append(out, ns)
	}
	if err := WaitNATSRoutes(out, 20*time.Second); err != nil {
		return nil, err
	}
	return out, nil
}

// WaitNATSRoutes waits until every running server of ns has a route to
// every other running one.
func WaitNATSRoutes(ns []*NATS, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var running []*NATS
		for _, n := range ns {
			if n.Running() {
				running = append(running, n)
			}
		}
		ok := true
		var errs []error
		for _, n := range running {
			routes, err := n.numRoutes()
			if err != nil || routes < len(running)-1 {
				ok = false
				errs = append(errs, fmt.Errorf("%s: %d of %d routes (%w)", n.Name(), routes, len(running)-1, err))
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats cluster: routes not up in %v: %w", timeout, errors.Join(errs...))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// natsOptions are the options of StartNATSConfig (confPath not empty) or
// StartNATS, on a random loopback port.
func natsOptions(confPath string, noLog bool) (*server.Options, error) {
	if confPath == "" {
		brook := server.NewAccount(BrookAccount)
		sys := server.NewAccount(SysAccount)
		return &server.Options{
			Host:          "127.0.0.1",
			Port:          server.RANDOM_PORT,
			NoSigs:        true,
			NoLog:         noLog,
			Accounts:      []*server.Account{brook, sys},
			SystemAccount: SysAccount,
			Users: []*server.User{
				{Username: BrookUser, Password: BrookPassword, Account: brook},
				{Username: SysUser, Password: SysPassword, Account: sys},
			},
			// A host's NATS cut must not be masked by a long write
			// deadline.
			WriteDeadline: 2 * time.Second,
			// auth.ServerSettings.
			NoSublistCache: true,
		}, nil
	}
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.NoSigs, opts.NoLog = true, noLog
	opts.HTTPPort = 0
	opts.WriteDeadline = 2 * time.Second
	opts.NoSublistCache = true // auth.ServerSettings
	return opts, nil
}

// Name is the server's name (brook-test-nats, or brook-test-nats-N in a
// cluster).
func (n *NATS) Name() string {
	if n.proc != nil {
		return n.name
	}
	return n.srv.Name()
}

// ID is the running server's id (a new one after Restart); empty if a
// server process does not answer.
func (n *NATS) ID() string {
	if n.proc != nil {
		rz, err := n.routez()
		if err != nil {
			return ""
		}
		return rz.ID
	}
	return n.srv.ID()
}

// Running reports whether the server runs (not shut down).
func (n *NATS) Running() bool {
	if n.proc != nil {
		return n.proc.Running()
	}
	return n.srv.Running()
}

// Addr is the server's host:port.
func (n *NATS) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// URL is the services' URL (user brook).
func (n *NATS) URL() string { return userURL(BrookUser, BrookPassword, n.Addr()) }

// SysURL is the system account's URL (user sys).
func (n *NATS) SysURL() string { return userURL(SysUser, SysPassword, n.Addr()) }

// Pid is the process of a server run as a process (StartNATSProcesses), 0
// for one embedded in this process.
func (n *NATS) Pid() int {
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid()
}

// Server returns the embedded server (nil for a server process).
func (n *NATS) Server() *server.Server { return n.srv }

// Lame duck timing of the cluster's servers: the clients are closed one by
// one over lameDuckDuration, after lameDuckGrace.
const (
	lameDuckDuration = 1200 * time.Millisecond
	lameDuckGrace    = 200 * time.Millisecond
)

// LameDuck puts the server into lame duck mode, as `nats-server --signal
// ldm` does before a planned restart: it stops taking connections, tells
// its clients, and closes them one by one (nats-server 2.15 publishes no
// disconnect advisory for them, as after Shutdown), then shuts down. It returns once the server
// is down; Restart(0) brings it back.
func (n *NATS) LameDuck() {
	if n.proc != nil {
		n.lameDuckProc()
		return
	}
	n.srv.LameDuckShutdown()
	n.srv.WaitForShutdown()
}

// Shutdown stops the server (a server process with SIGKILL) and waits
// until it is down.
func (n *NATS) Shutdown() {
	if n.proc != nil {
		// Only an error if it is not running: then it is down already.
		_ = n.proc.kill()
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

func userURL(user, password, addr string) string {
	return "nats://" + user + ":" + password + "@" + addr
}

// shutdownAll shuts every server of ns down.
func shutdownAll(ns []*NATS) {
	for _, n := range ns {
		n.Shutdown()
	}
}
