package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// ports hands out free loopback ports. Each port stays bound until
// release, so two ports it hands out never collide with each other nor with
// a listener opened meanwhile (such as a host's proxy); release comes right
// before the processes start and bind them.
//
// Between release and a process's bind the port is free, and so it is
// while a process is down before a restart on the same port. The ports
// are therefore picked outside the kernel's ephemeral range where it can
// be read: the kernel hands out ports of that range by itself, to every
// outgoing connection and every listener on port 0 of any process on the
// machine, and one of those could take a port meanwhile. A port outside
// it is taken only by a process that names it, which includes another
// harness picking from the same range at the same time (make test runs
// packages in parallel, and e2e, tools/cluster and brook-bench all start
// clusters): rare, and then the port's holder is likely another brook
// process whose /healthz answers too. Should an HTTP port be taken,
// checkProcs starts the process again on a fresh one; a taken Raft, NATS
// or route port still fails the run.
type ports struct{ lns []net.Listener }

func (ps *ports) addr() (string, error) {
	ln, err := listenLoopback()
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	ps.lns = append(ps.lns, ln)
	return ln.Addr().String(), nil
}

// port is addr's port number.
func (ps *ports) port() (int, error) {
	if _, err := ps.addr(); err != nil {
		return 0, err
	}
	return ps.lns[len(ps.lns)-1].Addr().(*net.TCPAddr).Port, nil
}

func (ps *ports) release() {
	for _, ln := range ps.lns {
		_ = ln.Close() // held only to keep the port from others until now
	}
	ps.lns = nil
}

// ephemeralRangeFile holds the kernel's ephemeral port range (Linux).
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// minPickPort is the lowest port picked outside the ephemeral range: below
// it are the usual ports of the machine's own services.
const minPickPort = 10000

// listenLoopback listens on a free loopback port outside the ephemeral
// range, or on any free one (port 0) if the range cannot be read or
// nothing outside it is free after a few tries.
func listenLoopback() (net.Listener, error) {
	if b, err := os.ReadFile(ephemeralRangeFile); err == nil {
		if lo, hi, ok := parsePortRange(string(b)); ok {
			for range 64 {
				port, ok := pickOutside(lo, hi, rand.IntN)
				if !ok {
					break
				}
				ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err == nil {
					return ln, nil
				}
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// parsePortRange parses the two numbers of ip_local_port_range.
func parsePortRange(s string) (lo, hi int, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// pickOutside picks a port from minPickPort to 65535 outside [lo, hi],
// uniformly with intn (rand.IntN); false if there is none.
func pickOutside(lo, hi int, intn func(int) int) (int, bool) {
	below := max(0, min(lo, 65536)-minPickPort) // minPickPort .. lo-1
	aboveFrom := max(hi+1, minPickPort)
	above := max(0, 65536-aboveFrom) // aboveFrom .. 65535
	if below+above == 0 {
		return 0, false
	}
	n := intn(below + above)
	if n < below {
		return minPickPort + n, true
	}
	return aboveFrom + n - below, true
}
