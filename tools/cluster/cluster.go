package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// Config describes a cluster to start.
type Config struct {
	Bins Bins
	// Dir holds the data directories (required).
	Dir string
	// Coordinators and Hosts default to 3 and 4.
	Coordinators int
	Hosts        int
	// Attention also starts the attention service.
	Attention bool
	// Extra flags, appended after the harness's own (so they override
	// them: the last value of a flag wins).
	CoordArgs     []string
	HostArgs      []string
	AttentionArgs []string
	// Env is added to every process's environment (e.g. OTEL_*).
	Env []string
	// LogDir receives one log file per process and nats.log; default
	// Dir/logs.
	LogDir string
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL;
	// default 5s.
	StopGrace time.Duration
	// Logger logs the harness's own steps (default: discard).
	Logger *slog.Logger
	// NoAuth runs NATS with the old shared users (brook and sys, no
	// permissions) instead of a generated deployment of per-principal
	// NKEYs and permissions (tools/auth, issue 13).
	NoAuth bool
	// TLS also generates a development CA and certificates (tools/auth
	// Spec.TLS): nats-server requires TLS with a verified client
	// certificate, every process connects with its principal's
	// (--nats-ca, --nats-cert, --nats-key), the coordinators run mutual
	// TLS between Raft peers (--raft-ca, --raft-cert, --raft-key), and
	// ClientOptions and NATSOptions carry the principal's certificate.
	// Not with NoAuth.
	TLS bool
	// NATSServers is how many nats-servers run, joined into one NATS
	// cluster by routes (StartNATSCluster); default 3 (DefaultNATSServers),
	// so that no single server is a point of failure; 1 runs one server
	// without a cluster. Coordinators,
	// attention and the harness's clients get every server's URL; stream
	// host i gets one proxy per server, its own server (i mod
	// NATSServers) first in its URL list. The services shuffle the list
	// (nats.go's default), so which server a process is on is found out
	// with NATSServerOf.
	NATSServers int
	// DirectHosts connects the stream hosts straight to the nats-servers,
	// without the per-host TCP proxies: no partitions (CutHost,
	// BlackholeHost and HealHost do nothing), but no extra copy of every
	// host message through this process either (benchmarks).
	DirectHosts bool
	// BusReplication starts the stream hosts without their direct
	// replication link (--repl-listen): replication then travels over NATS
	// only, as before the link. By default each host listens on a port of
	// its own on 127.0.0.1, and a host that CutHost cuts from NATS keeps
	// replicating with the hosts it already had a connection to.
	BusReplication bool
	// NATSBin, if set, is a nats-server binary (as `make build` puts in
	// bin/): each nats-server then runs as a process of its own
	// (StartNATSProcesses) instead of embedded in this process, with the
	// same configuration, its configuration file and log under LogDir;
	// Stop kills them and waits. For benchmarks, where embedded servers
	// share this process's scheduler and garbage collector with its
	// clients. KickConn needs embedded servers.
	NATSBin string
}

// DefaultNATSServers is Config.NATSServers when it is 0.
const DefaultNATSServers = 3

// Cluster is a running local cluster.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	nats    *NATS    // natsAll[0]
	natsAll []*NATS  // every server of the NATS cluster
	proxies []*Proxy // one per host, in front of the host's own server
	// more are host i's proxies in front of the other servers (none with
	// one server); CutHost, BlackholeHost and HealHost act on them too.
	more   [][]*Proxy
	coords []*Proc
	hosts  []*Proc
	attn   *Proc
	client *client.Client
	// auth is the generated deployment (nil with Config.NoAuth).
	auth *auth.Deployment

	stopOnce sync.Once
	stopErr  error
	// rebindMu serializes checkProcs's restarts on a fresh HTTP port.
	rebindMu sync.Mutex
}

// testHookBeforeStart, if set, is called by Start with each process right
// before it starts (tests take its port there).
var testHookBeforeStart func(p *Proc)

// Start starts NATS, the coordinators, the stream hosts and, if asked, the
// attention service. It returns once every process was started; use
// WaitLeader and WaitNodesLive to wait for the cluster to form. On error
// everything started so far is stopped.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("start cluster: Config.Dir is required")
	}
	if cfg.Coordinators == 0 {
		cfg.Coordinators = 3
	}
	if cfg.Hosts == 0 {
		cfg.Hosts = 4
	}
	if cfg.LogDir == "" {
		cfg.LogDir = filepath.Join(cfg.Dir, "logs")
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.NATSServers == 0 {
		cfg.NATSServers = DefaultNATSServers
	}
	if cfg.TLS && cfg.NoAuth {
		return nil, errors.New("start cluster: Config.TLS needs the generated deployment (not NoAuth)")
	}
	if cfg.Bins.Coordinator == "" || cfg.Bins.StreamHost == "" || (cfg.Attention && cfg.Bins.Attention == "") {
		return nil, fmt.Errorf("start cluster: missing binaries: %+v", cfg.Bins)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{cfg.Dir, cfg.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
	}
	c := &Cluster{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()

	natsLog := func(i int) string {
		if cfg.NATSServers == 1 {
			return filepath.Join(cfg.LogDir, "nats.log")
		}
		return filepath.Join(cfg.LogDir, fmt.Sprintf("nats-%d.log", i+1))
	}
	confPath := ""
	if !cfg.NoAuth {
		nodes := make([]string, cfg.Hosts)
		for i := range nodes {
			nodes[i] = "h" + strconv.Itoa(i+1)
		}
		if c.auth, err = auth.Generate(filepath.Join(cfg.Dir, "auth"), auth.Spec{Nodes: nodes, Coordinators: cfg.Coordinators, TLS: cfg.TLS, Overwrite: true}); err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
		confPath = c.auth.NATSConf
	}
	if cfg.NATSBin != "" {
		c.natsAll, err = StartNATSProcesses(cfg.NATSBin, cfg.LogDir, cfg.NATSServers, confPath, natsLog)
	} else {
		c.natsAll, err = StartNATSCluster(cfg.NATSServers, confPath, natsLog)
	}
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	c.nats = c.natsAll[0]
	env := append(os.Environ(), cfg.Env...)
	var free ports
	defer free.release()

	// Coordinators: all raft addresses must be known before the first
	// starts, since each gets the whole peer list.
	raftAddrs := make([]string, cfg.Coordinators)
	peers := make([]string, cfg.Coordinators)
	for i := range raftAddrs {
		if raftAddrs[i], err = free.addr(); err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
		peers[i] = fmt.Sprintf("%d=%s", i+1, raftAddrs[i])
	}
	for i := range cfg.Coordinators {
		id := strconv.Itoa(i + 1)
		httpAddr, err := free.addr()
		if err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
		args := []string{
			"--replica-id", id,
			"--raft-addr", raftAddrs[i],
			"--peers", strings.Join(peers, ","),
			"--data-dir", filepath.Join(cfg.Dir, "coordinator-"+id),
			"--nats-url", c.NATSURL(),
			"--nats-system-url", c.sysURL(),
			"--http-addr", httpAddr,
		}
		if c.auth != nil {
			args = append(args, "--nats-nkey", c.seed(auth.Coordinator),
				"--nats-system-nkey", c.seed(auth.CoordinatorSys), "--host-keys", c.auth.HostKeys)
			args = append(args, c.tlsArgs(auth.Coordinator)...)
			if c.auth.TLS {
				args = append(args, "--raft-ca", c.auth.CAFile, "--raft-cert", c.auth.RaftCert, "--raft-key", c.auth.RaftKey)
			}
		}
		args = append(args, cfg.CoordArgs...)
		name := "coordinator-" + id
		c.coords = append(c.coords, newProc(name, KindCoordinator, id, cfg.Bins.Coordinator, args, env,
			httpAddr, filepath.Join(cfg.LogDir, name+".log")))
	}
	for i := range cfg.Hosts {
		node := "h" + strconv.Itoa(i+1)
		// One proxy per server, the host's own server first.
		var urls []string
		var pxs []*Proxy
		for k := range cfg.NATSServers {
			ns := c.natsAll[(i+k)%cfg.NATSServers]
			if cfg.DirectHosts {
				urls = append(urls, c.serviceURL(ns.Addr()))
				continue
			}
			px, err := NewProxy(ns.Addr(), log.With("proxy", node, "nats", ns.Name()))
			if err != nil {
				for _, px := range pxs {
					_ = px.Close()
				}
				return nil, fmt.Errorf("start cluster: %w", err)
			}
			pxs = append(pxs, px)
			urls = append(urls, c.serviceURL(px.Addr()))
		}
		if !cfg.DirectHosts {
			c.proxies = append(c.proxies, pxs[0])
			c.more = append(c.more, pxs[1:])
		}
		httpAddr, err := free.addr()
		if err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
		args := []string{
			"--node", node,
			"--data-dir", filepath.Join(cfg.Dir, node),
			"--nats-url", strings.Join(urls, ","),
			"--http-addr", httpAddr,
		}
		if !cfg.BusReplication {
			args = append(args, "--repl-listen", "127.0.0.1:0")
		}
		if c.auth != nil {
			args = append(args, "--nats-nkey", c.seed(auth.HostPrincipal(node)))
			args = append(args, c.tlsArgs(auth.HostPrincipal(node))...)
		}
		args = append(args, cfg.HostArgs...)
		c.hosts = append(c.hosts, newProc(node, KindStreamHost, node, cfg.Bins.StreamHost, args, env,
			httpAddr, filepath.Join(cfg.LogDir, node+".log")))
	}
	if cfg.Attention {
		httpAddr, err := free.addr()
		if err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
		args := []string{"--nats-url", c.NATSURL(), "--http-addr", httpAddr}
		if c.auth != nil {
			args = append(args, "--nats-nkey", c.seed(auth.Attention))
			args = append(args, c.tlsArgs(auth.Attention)...)
		}
		args = append(args, cfg.AttentionArgs...)
		c.attn = newProc("attention", KindAttention, "", cfg.Bins.Attention, args, env,
			httpAddr, filepath.Join(cfg.LogDir, "attention.log"))
	}
	free.release()
	for _, p := range c.Procs() {
		if testHookBeforeStart != nil {
			testHookBeforeStart(p)
		}
		if err := p.start(); err != nil {
			return nil, fmt.Errorf("start cluster: %w", err)
		}
		log.Info("started", "proc", p.Name, "pid", p.Pid(), "log", p.LogPath)
	}
	c.client, err = client.Connect(ctx, c.NATSURL(), append(c.ClientOptions(auth.Admin),
		client.WithName("brook-cluster-harness"),
		client.WithAdminTimeout(time.Second),
		client.WithLogger(log))...)
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	return c, nil
}

// NATSURL is the URL of the cluster's nats-server (with several, every
// server's URL, comma separated, as nats.Connect takes them). With a generated
// deployment it carries no credentials: connect with ClientOptions or
// NATSOptions of a principal. With Config.NoAuth it carries user brook's
// (account BROOK, no permissions).
func (c *Cluster) NATSURL() string {
	urls := make([]string, len(c.natsAll))
	for i, ns := range c.natsAll {
		urls[i] = c.serviceURL(ns.Addr())
	}
	return strings.Join(urls, ",")
}

// serviceURL is the services' URL of a server address.
func (c *Cluster) serviceURL(addr string) string {
	if c.auth != nil {
		return "nats://" + addr
	}
	return userURL(BrookUser, BrookPassword, addr)
}

// sysURL is the coordinators' system-account URL.
func (c *Cluster) sysURL() string {
	urls := make([]string, len(c.natsAll))
	for i, ns := range c.natsAll {
		if c.auth != nil {
			urls[i] = "nats://" + ns.Addr()
		} else {
			urls[i] = ns.SysURL()
		}
	}
	return strings.Join(urls, ",")
}

// seed is the seed file of a principal of the deployment.
func (c *Cluster) seed(principal string) string {
	p, _ := c.auth.Principal(principal)
	return p.SeedFile
}

// tlsArgs are a service's NATS TLS flags as principal (none without TLS).
func (c *Cluster) tlsArgs(principal string) []string {
	if !c.auth.TLS {
		return nil
	}
	p, _ := c.auth.Principal(principal)
	return []string{"--nats-ca", c.auth.CAFile, "--nats-cert", p.CertFile, "--nats-key", p.KeyFile}
}

// TLS reports whether the cluster runs with TLS (Config.TLS).
func (c *Cluster) TLS() bool { return c.auth != nil && c.auth.TLS }

// PlainConnections lists the client connections nats-server holds that
// are not TLS, as "name (ip:port)", and how many it holds in all.
//
// A connection still in its TLS handshake shows no TLS version and has
// sent no CONNECT yet: it is not counted as plain at once (a process that
// reconnects at the moment of the check would fail it), but looked at
// again until it has completed or gone; one still there after the
// server's TLS handshake timeout is reported. A plain client that got as
// far as CONNECT is reported at once.
func (c *Cluster) PlainConnections() (plain []string, total int, err error) {
	deadline := time.Now().Add(handshakeGrace)
	for {
		plain, total = nil, 0
		handshaking := 0
		late := time.Now().After(deadline)
		for _, ns := range c.natsAll {
			if !ns.Running() {
				continue
			}
			connz, err := ns.connz()
			if err != nil {
				return nil, 0, fmt.Errorf("connz: %w", err)
			}
			p, h := plainConns(connz.Conns)
			plain = append(plain, p...)
			handshaking += len(h)
			if late {
				plain = append(plain, h...)
			}
			total += len(connz.Conns)
		}
		if handshaking == 0 || late {
			return plain, total, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// handshakeGrace is how long PlainConnections waits for connections in
// their handshake: longer than nats-server's TLS handshake timeout (2 s
// by default), after which the server closes them.
const handshakeGrace = 3 * time.Second

// plainConns sorts the connections that are not TLS into those that sent
// CONNECT in plain text (plain) and those that have sent nothing yet
// (handshaking, perhaps still in their TLS handshake), each as
// "name (ip:port)".
func plainConns(conns []*server.ConnInfo) (plain, handshaking []string) {
	for _, ci := range conns {
		if ci.TLSVersion != "" {
			continue
		}
		d := fmt.Sprintf("%s (%s:%d)", ci.Name, ci.IP, ci.Port)
		if ci.Lang == "" && ci.Version == "" && ci.AuthorizedUser == "" {
			handshaking = append(handshaking, d)
			continue
		}
		plain = append(plain, d)
	}
	return plain, handshaking
}

// Auth returns the generated deployment: every principal's seed file,
// inbox prefix and permissions (nil with Config.NoAuth).
func (c *Cluster) Auth() *auth.Deployment { return c.auth }

// ClientOptions are the pkg/client options to connect as principal (see
// tools/auth: auth.Client, auth.Admin, auth.HostPrincipal(node), ...),
// with its certificate under Config.TLS; none with Config.NoAuth, where
// the URL carries the credentials.
func (c *Cluster) ClientOptions(principal string) []client.Option {
	// The hosts offer the client link with their direct link.
	link := client.WithDirectLink(!c.cfg.BusReplication)
	if c.auth == nil {
		return []client.Option{link}
	}
	p, ok := c.auth.Principal(principal)
	if !ok {
		return []client.Option{client.WithNkeySeedFile(filepath.Join(c.auth.Dir, "no-such-principal-"+principal))}
	}
	opts := []client.Option{link, client.WithNkeySeedFile(p.SeedFile), client.WithInboxPrefix(p.InboxPrefix)}
	if c.auth.TLS {
		opts = append(opts, client.WithTLS(c.auth.CAFile, p.CertFile, p.KeyFile))
	}
	return opts
}

// NATSOptions are the nats.go options to connect as principal (with the
// CA and its certificate under Config.TLS); none with Config.NoAuth. An unknown principal or an unreadable seed is an error.
func (c *Cluster) NATSOptions(principal string) ([]nats.Option, error) {
	if c.auth == nil {
		return nil, nil
	}
	p, ok := c.auth.Principal(principal)
	if !ok {
		return nil, fmt.Errorf("no principal %q in the deployment", principal)
	}
	seed, err := nats.NkeyOptionFromSeed(p.SeedFile)
	if err != nil {
		return nil, fmt.Errorf("principal %s: %w", principal, err)
	}
	opts := []nats.Option{seed, nats.CustomInboxPrefix(p.InboxPrefix)}
	if c.auth.TLS {
		opts = append(opts, nats.RootCAs(c.auth.CAFile), nats.ClientCert(p.CertFile, p.KeyFile))
	}
	return opts, nil
}

// NATS returns the (first) server.
func (c *Cluster) NATS() *NATS { return c.nats }

// NATSServers is how many nats-servers the cluster has.
func (c *Cluster) NATSServers() int { return len(c.natsAll) }

// NATSServer returns server i (0-based).
func (c *Cluster) NATSServer(i int) *NATS { return c.natsAll[i] }

// KillNATS stops nats-server i at once, the test's stand-in for SIGKILL of
// a server process (with Config.NATSBin, it is SIGKILL): every client and route connection it holds is closed
// (the clients see their connection drop and reconnect to another server
// of their URL list), and it publishes no disconnect advisory for its
// clients (its event system stops first). Bring it back with
// NATSServer(i).Restart(0).
func (c *Cluster) KillNATS(i int) {
	c.log.Info("kill nats-server", "server", c.natsAll[i].Name(), "id", c.natsAll[i].ID())
	c.natsAll[i].Shutdown()
}

// LameDuckNATS puts nats-server i into lame duck mode (NATS.LameDuck: its
// clients are closed one by one and reconnect to another server) and
// returns once it is down. Bring it back
// with NATSServer(i).Restart(0).
func (c *Cluster) LameDuckNATS(i int) {
	c.log.Info("lame duck nats-server", "server", c.natsAll[i].Name(), "id", c.natsAll[i].ID())
	c.natsAll[i].LameDuck()
}

// KickConn has the nats-server holding the client connection named name
// (in account BROOK) close it, as a server does to a slow consumer or
// `nats server request kick`: unlike a killed server, it publishes a
// disconnect advisory, and the client reconnects at once.
func (c *Cluster) KickConn(name string) error {
	for _, ns := range c.natsAll {
		if !ns.Running() {
			continue
		}
		connz, err := ns.connz()
		if err != nil {
			return fmt.Errorf("connz of %s: %w", ns.Name(), err)
		}
		for _, ci := range connz.Conns {
			if ci.Name == name && ci.Account != SysAccount {
				if ns.Server() == nil {
					return fmt.Errorf("kick %s: %s is a server process (Config.NATSBin), not embedded", name, ns.Name())
				}
				c.log.Info("kick connection", "name", name, "server", ns.Name(), "cid", ci.Cid)
				return ns.Server().DisconnectClientByID(ci.Cid)
			}
		}
	}
	return fmt.Errorf("kick %s: no server holds a connection of that name", name)
}

// NATSServerOf returns the index of the running server that holds a
// client connection named name in account BROOK (such as
// "brook-streamhost:h1" or "brook-coordinator:2"), or -1 if none does.
func (c *Cluster) NATSServerOf(name string) (int, error) {
	for i, ns := range c.natsAll {
		if !ns.Running() {
			continue
		}
		connz, err := ns.connz()
		if err != nil {
			return -1, fmt.Errorf("connz of %s: %w", ns.Name(), err)
		}
		for _, ci := range connz.Conns {
			if ci.Name == name && ci.Account != SysAccount {
				return i, nil
			}
		}
	}
	return -1, nil
}

// hostProxies are host i's proxies, one per server.
func (c *Cluster) hostProxies(i int) []*Proxy {
	if i >= len(c.proxies) {
		c.log.Warn("the stream hosts connect directly (DirectHosts): no proxy to cut or heal", "host", i)
		return nil
	}
	return append([]*Proxy{c.proxies[i]}, c.more[i]...)
}

// Client is the harness's own client (connected as brook).
func (c *Cluster) Client() *client.Client { return c.client }

// Host returns stream host i (0-based; its node id is "h<i+1>").
func (c *Cluster) Host(i int) *Proc { return c.hosts[i] }

// HostByNode returns the stream host with node id node, or nil.
func (c *Cluster) HostByNode(node string) *Proc {
	for _, h := range c.hosts {
		if h.Node == node {
			return h
		}
	}
	return nil
}

// Coordinator returns coordinator i (0-based; its replica id is i+1).
func (c *Cluster) Coordinator(i int) *Proc { return c.coords[i] }

// CoordinatorByReplica returns the coordinator with replica id id, or nil.
func (c *Cluster) CoordinatorByReplica(id uint64) *Proc {
	if id < 1 || id > uint64(len(c.coords)) {
		return nil
	}
	return c.coords[id-1]
}

// Attention returns the attention process, or nil.
func (c *Cluster) Attention() *Proc { return c.attn }

// Hosts and Coordinators return how many there are.
func (c *Cluster) Hosts() int        { return len(c.hosts) }
func (c *Cluster) Coordinators() int { return len(c.coords) }

// Procs returns every process: coordinators, hosts, then attention.
func (c *Cluster) Procs() []*Proc {
	ps := append(append([]*Proc(nil), c.coords...), c.hosts...)
	if c.attn != nil {
		ps = append(ps, c.attn)
	}
	return ps
}

// Kill sends sig to p's process group: SIGKILL (then waits until it is
// reaped), SIGSTOP, SIGCONT, or any other signal.
func (c *Cluster) Kill(p *Proc, sig syscall.Signal) error {
	c.log.Info("signal", "proc", p.Name, "signal", sig)
	if sig == syscall.SIGKILL {
		return p.kill()
	}
	return p.signal(sig)
}

// Terminate stops p gracefully (SIGTERM), and kills it after the stop
// grace or when ctx ends.
func (c *Cluster) Terminate(ctx context.Context, p *Proc) error {
	c.log.Info("terminate", "proc", p.Name)
	return p.terminate(ctx, c.cfg.StopGrace)
}

// Restart starts p again with the same arguments (data directory, ports,
// node id). A p that is still running is terminated first. Should its
// HTTP port have been taken while it was down, the cluster's next wait
// starts it again on a fresh one (checkProcs).
func (c *Cluster) Restart(ctx context.Context, p *Proc) error {
	if p.Running() {
		if err := p.terminate(ctx, c.cfg.StopGrace); err != nil {
			return fmt.Errorf("restart %s: %w", p.Name, err)
		}
	}
	if err := p.start(); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	c.log.Info("restarted", "proc", p.Name, "pid", p.Pid())
	return nil
}

// CutHost cuts stream host i off from NATS: its connections are dropped
// and refused until HealHost. The process keeps running.
func (c *Cluster) CutHost(i int) {
	c.log.Info("cut host from nats", "host", c.hosts[i].Name)
	for _, px := range c.hostProxies(i) {
		px.Cut()
	}
}

// BlackholeHost partitions stream host i from NATS silently: its
// connections stay open but every byte is dropped, both ways, until
// HealHost (which closes them, so the host reconnects).
func (c *Cluster) BlackholeHost(i int) {
	c.log.Info("blackhole host from nats", "host", c.hosts[i].Name)
	for _, px := range c.hostProxies(i) {
		px.Blackhole()
	}
}

// HealHost lets stream host i reach NATS again.
func (c *Cluster) HealHost(i int) {
	c.log.Info("heal host", "host", c.hosts[i].Name)
	for _, px := range c.hostProxies(i) {
		px.Heal()
	}
}

// Stop stops every process (SIGTERM, SIGKILL after the stop grace), then
// the proxies and NATS. Stream hosts and attention stop first, while the
// coordinators can still commit the hosts' node.leave; the coordinators
// stop after them. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var first, last []*Proc
		for _, p := range c.Procs() {
			if p.Kind == KindCoordinator {
				last = append(last, p)
			} else {
				first = append(first, p)
			}
		}
		errs := append(c.terminateAll(first), c.terminateAll(last)...)
		if c.client != nil {
			_ = c.client.Close()
		}
		for i := range c.proxies {
			for _, px := range c.hostProxies(i) {
				errs = append(errs, px.Close())
			}
		}
		for _, ns := range c.natsAll {
			ns.Shutdown()
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// terminateAll terminates procs in parallel.
func (c *Cluster) terminateAll(procs []*Proc) []error {
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		if p.Starts() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.terminate(context.Background(), c.cfg.StopGrace)
		}()
	}
	wg.Wait()
	return errs
}

// checkProcs returns an error if a process ended that the harness did not
// stop, with the end of its log: waiting on a cluster with a crashed member
// would only time out. A process that ended because its HTTP port was
// taken is started again on a fresh port instead (restartOnFreshPort).
func (c *Cluster) checkProcs() error {
	var errs []error
	for _, p := range c.Procs() {
		if bad, state := p.unexpectedExit(); bad && !c.restartOnFreshPort(p) {
			errs = append(errs, fmt.Errorf("%s exited unexpectedly (%s); log tail:\n%s", p.Name, state, p.LogTail(20)))
		}
	}
	return errors.Join(errs...)
}

// maxRebinds is how many times restartOnFreshPort starts one process
// again.
const maxRebinds = 3

// restartOnFreshPort starts the exited p again on a fresh HTTP port if
// its run ended because it could not bind its HTTP port: the port is free
// between the harness's pick and the process's bind, and while a process
// is down before a restart, and another process may take it meanwhile
// (see ports). Nothing else knows a process's HTTP port, so it can move.
// It reports whether p runs again.
func (c *Cluster) restartOnFreshPort(p *Proc) bool {
	c.rebindMu.Lock()
	defer c.rebindMu.Unlock()
	if p.Running() {
		return true // another poll restarted it meanwhile
	}
	old := p.HTTPAddr()
	if p.Rebinds() >= maxRebinds || !p.httpBindFailed() {
		return false
	}
	var free ports
	addr, err := free.addr()
	if err != nil {
		c.log.Warn("no fresh port for a process whose HTTP port was taken", "proc", p.Name, "err", err)
		return false
	}
	p.moveHTTP(addr)
	free.release()
	if err := p.start(); err != nil {
		c.log.Warn("start again on a fresh HTTP port", "proc", p.Name, "err", err)
		return false
	}
	c.log.Warn("HTTP port was taken: started again on a fresh one", "proc", p.Name, "was", old, "now", addr, "pid", p.Pid())
	return true
}

// poll calls try every interval until it returns true or an error, ctx
// ends, or a process crashed.
func (c *Cluster) poll(ctx context.Context, what string, try func(context.Context) (bool, error)) error {
	const interval = 50 * time.Millisecond
	var last error
	for {
		if err := c.checkProcs(); err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		ok, err := try(ctx)
		if err != nil {
			last = err
		}
		if ok {
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != nil {
				return fmt.Errorf("wait for %s: %w (last error: %w)", what, ctx.Err(), last)
			}
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// once makes one admin request with a short timeout, so a poll goes on
// instead of waiting out the client's retries.
func once(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 2*time.Second)
}

// LeaderReplica returns the replica id of the Raft leader as a coordinator
// reports it (cluster.info); 0 with an error while there is none.
func (c *Cluster) LeaderReplica(ctx context.Context) (uint64, error) {
	ctx, cancel := once(ctx)
	defer cancel()
	info, err := c.client.ClusterInfo(ctx)
	if err != nil {
		return 0, fmt.Errorf("leader replica: %w", err)
	}
	if info.Leader == 0 {
		return 0, errors.New("leader replica: no leader")
	}
	return info.Leader, nil
}

// WaitLeader waits until a coordinator reports a leader, and returns its
// replica id.
func (c *Cluster) WaitLeader(ctx context.Context) (uint64, error) {
	var leader uint64
	err := c.poll(ctx, "a coordinator leader", func(ctx context.Context) (bool, error) {
		id, err := c.LeaderReplica(ctx)
		leader = id
		return err == nil, err
	})
	return leader, err
}

// WaitNodesLive waits until at least n stream hosts are live in the
// coordinators' state.
func (c *Cluster) WaitNodesLive(ctx context.Context, n int) error {
	return c.poll(ctx, fmt.Sprintf("%d live nodes", n), func(ctx context.Context) (bool, error) {
		ctx, cancel := once(ctx)
		defer cancel()
		info, err := c.client.ClusterInfo(ctx)
		if err != nil {
			return false, err
		}
		live := 0
		for _, nd := range info.Nodes {
			if nd.State == wire.NodeLive {
				live++
			}
		}
		return live >= n, nil
	})
}

// StreamInfo returns the stream's info (admin stream.info).
func (c *Cluster) StreamInfo(ctx context.Context, stream string) (wire.StreamInfo, error) {
	ctx, cancel := once(ctx)
	defer cancel()
	return c.client.StreamInfo(ctx, stream)
}

// OwnerOf returns the node that owns stream in the committed assignment.
func (c *Cluster) OwnerOf(ctx context.Context, stream string) (string, error) {
	info, err := c.StreamInfo(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("owner of %s: %w", stream, err)
	}
	if info.Assignment.Owner == "" {
		return "", fmt.Errorf("owner of %s: no owner assigned", stream)
	}
	return info.Assignment.Owner, nil
}

// WaitServing waits until stream's status is serving and returns its info.
func (c *Cluster) WaitServing(ctx context.Context, stream string) (wire.StreamInfo, error) {
	var info wire.StreamInfo
	err := c.poll(ctx, stream+" serving", func(ctx context.Context) (bool, error) {
		i, err := c.StreamInfo(ctx, stream)
		info = i
		return err == nil && i.Status == wire.StatusServing, err
	})
	return info, err
}

// WaitHealthy waits until every running process answers /healthz with 200.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return c.poll(ctx, "healthy processes", func(ctx context.Context) (bool, error) {
		for _, p := range c.Procs() {
			if p.Running() && !p.Healthy(ctx) {
				return false, fmt.Errorf("%s not healthy", p.Name)
			}
		}
		return true, nil
	})
}

// LogTails returns the last n lines of every process's log, headed by the
// process name, for a failed test to print.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, p := range c.Procs() {
		fmt.Fprintf(&b, "----- %s (%s) -----\n%s\n", p.Name, p.LogPath, p.LogTail(n))
	}
	return b.String()
}
