package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/brook-streams/brook/tools/auth"
)

// StartNATSProcesses is StartNATSCluster with every server a process of the
// nats-server binary bin instead of embedded in this one, so the servers do
// not share this process's scheduler and garbage collector (benchmarks):
// the same accounts (confPath's, or those of StartNATS), system account,
// route mesh between every pair, NoAdvertise and write deadline, on free
// loopback ports. Server i's configuration file is written to dir and its
// output goes to logPath(i) (nowhere if logPath is nil). The servers have a
// monitoring port on loopback, which Connz, routes and ID are read from;
// they keep nats-server's own lame duck timing (a configuration file cannot
// go below 30 s). Shutdown (and KillNATS) is SIGKILL, and waits for the
// process to be reaped.
func StartNATSProcesses(bin, dir string, n int, confPath string, logPath func(i int) string) (_ []*NATS, err error) {
	if n < 1 {
		return nil, fmt.Errorf("nats processes: %d servers", n)
	}
	if bin == "" {
		return nil, errors.New("nats processes: no nats-server binary")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("nats processes: %w", err)
	}
	include := ""
	if confPath != "" {
		absConf, err := filepath.Abs(confPath)
		if err != nil {
			return nil, fmt.Errorf("nats processes: %w", err)
		}
		absDir, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("nats processes: %w", err)
		}
		// nats-server resolves an include against the including file's
		// folder, so it has to be relative.
		if include, err = filepath.Rel(absDir, absConf); err != nil {
			return nil, fmt.Errorf("nats processes: %w", err)
		}
	}
	// Client, route and monitoring port of every server.
	ps, err := freeLoopbackPorts(3 * n)
	if err != nil {
		return nil, fmt.Errorf("nats processes: %w", err)
	}
	clientPorts, routePorts, monitorPorts := ps[:n], ps[n:2*n], ps[2*n:]
	var out []*NATS
	defer func() {
		if err != nil {
			shutdownAll(out)
		}
	}()
	for i := range n {
		name := "brook-test-nats"
		if n > 1 {
			name += "-" + strconv.Itoa(i+1)
		}
		conf := natsProcessConf(name, include, clientPorts[i], monitorPorts[i], routePorts, i)
		confFile := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
			return nil, fmt.Errorf("nats processes: %w", err)
		}
		logFile := os.DevNull
		if logPath != nil && logPath(i) != "" {
			logFile = logPath(i)
		}
		ns := &NATS{
			port: clientPorts[i], name: name, monitor: "127.0.0.1:" + strconv.Itoa(monitorPorts[i]),
			proc: newProc(name, KindOther, name, bin, []string{"-c", confFile}, os.Environ(), "", logFile),
		}
		if err := ns.proc.start(); err != nil {
			return nil, fmt.Errorf("nats processes: %w", err)
		}
		out = append(out, ns)
	}
	for _, ns := range out {
		if err := ns.waitReady(10 * time.Second); err != nil {
			return nil, fmt.Errorf("nats processes: %w", err)
		}
	}
	if err := WaitNATSRoutes(out, 20*time.Second); err != nil {
		return nil, err
	}
	return out, nil
}

// natsProcessConf is server i's configuration file: the included
// accounts (or StartNATS's), then what natsOptions and StartNATSCluster set.
func natsProcessConf(name, include string, port, monitor int, routePorts []int, i int) string {
	var b strings.Builder
	if include != "" {
		fmt.Fprintf(&b, "include %s\n", strconv.Quote(include))
	} else {
		fmt.Fprintf(&b, "accounts {\n  %s { users: [ { user: %s, password: %s } ] }\n  %s { users: [ { user: %s, password: %s } ] }\n}\n",
			BrookAccount, BrookUser, strconv.Quote(BrookPassword), SysAccount, SysUser, strconv.Quote(SysPassword))
		fmt.Fprintf(&b, "system_account: %s\n", SysAccount)
	}
	// After the include: the last value of a key wins.
	fmt.Fprintf(&b, "server_name: %s\nhost: 127.0.0.1\nport: %d\nhttp: \"127.0.0.1:%d\"\nwrite_deadline: \"2s\"\n",
		name, port, monitor)
	b.WriteString(auth.ServerSettings)
	if len(routePorts) > 1 {
		var routes []string
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, strconv.Quote("nats://127.0.0.1:"+strconv.Itoa(p)))
			}
		}
		fmt.Fprintf(&b, "cluster {\n  name: brook-test\n  host: 127.0.0.1\n  port: %d\n  no_advertise: true\n  routes: [%s]\n}\n",
			routePorts[i], strings.Join(routes, ", "))
	}
	return b.String()
}

// freeLoopbackPorts picks n distinct free loopback ports (free when it
// returns; the caller binds them soon after).
func freeLoopbackPorts(n int) ([]int, error) {
	var free ports
	defer free.release()
	out := make([]int, n)
	for i := range out {
		p, err := free.port()
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// waitReady waits until the server process takes client connections and
// answers on its monitoring port.
func (n *NATS) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if !n.proc.Running() {
			return fmt.Errorf("%s exited (%v); log tail:\n%s", n.name, n.proc.ExitState(), n.proc.LogTail(20))
		}
		c, err := net.DialTimeout("tcp", n.Addr(), time.Second)
		if err == nil {
			_ = c.Close() // a probe: nothing was sent
			if _, err = n.routez(); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready in %v: %w", n.name, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// monitorGet decodes the JSON of a monitoring endpoint of a server process.
func (n *NATS) monitorGet(path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.monitor+path, nil)
	if err != nil {
		return fmt.Errorf("%s %s: %w", n.name, path, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", n.name, path, err)
	}
	defer func() { _ = resp.Body.Close() }() // read in full below; nothing to act on
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %s", n.name, path, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %w", n.name, path, err)
	}
	return nil
}

// routez is a server process's /routez.
func (n *NATS) routez() (*server.Routez, error) {
	var rz server.Routez
	return &rz, n.monitorGet("/routez", &rz)
}

// numRoutes is how many routes the server has.
func (n *NATS) numRoutes() (int, error) {
	if n.proc == nil {
		return n.srv.NumRemotes(), nil
	}
	rz, err := n.routez()
	if err != nil {
		return 0, err
	}
	return rz.NumRoutes, nil
}

// connz lists the server's client connections (up to 10000).
func (n *NATS) connz() (*server.Connz, error) {
	if n.proc == nil {
		return n.srv.Connz(&server.ConnzOptions{Limit: 10000})
	}
	var cz server.Connz
	return &cz, n.monitorGet("/connz?limit=10000", &cz)
}

// subsz is the server's subscription statistics (nats-server's /subsz,
// summed over its accounts).
func (n *NATS) subsz() (*server.Subsz, error) {
	if n.proc == nil {
		return n.srv.Subsz(nil)
	}
	var sz server.Subsz
	return &sz, n.monitorGet("/subsz", &sz)
}

// restartProc is Restart of a server process: the same configuration
// file, so the same ports.
func (n *NATS) restartProc(down time.Duration) error {
	n.Shutdown()
	time.Sleep(down)
	if err := n.proc.start(); err != nil {
		return fmt.Errorf("restart nats: %w", err)
	}
	return n.waitReady(10 * time.Second)
}

// lameDuckProc is LameDuck of a server process: SIGUSR2, as `nats-server
// --signal ldm` sends, then wait for it to exit.
func (n *NATS) lameDuckProc() {
	exited := n.proc.Exited()
	if err := n.proc.signal(syscall.SIGUSR2); err != nil {
		return // not running: already down
	}
	<-exited
}
