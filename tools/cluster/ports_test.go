package cluster

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process whose HTTP port is taken between the harness's pick and its
// bind (as another process's outgoing connection or listener may take it)
// is started again on a fresh port by the cluster's next wait instead of
// failing it; so is one restarted after its port was taken while it was
// down.
func TestTakenHTTPPortIsReplaced(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	var taken []string
	var lns []net.Listener
	t.Cleanup(func() {
		for _, l := range lns {
			_ = l.Close()
		}
	})
	take := func(addr string) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("take %s: %v", addr, err)
			return
		}
		lns = append(lns, l)
		taken = append(taken, addr)
	}
	testHookBeforeStart = func(p *Proc) {
		if p.Node == "h1" {
			take(p.HTTPAddr())
		}
	}
	t.Cleanup(func() { testHookBeforeStart = nil })
	c := startBuiltCluster(t, ctx, Config{Coordinators: 1, Hosts: 1, NATSServers: 1})
	h := c.Host(0)
	if len(taken) != 1 {
		t.Fatalf("the hook took %v", taken)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Starts() != 2 || h.HTTPAddr() == taken[0] || !h.logContains("address already in use") {
		t.Fatalf("h1: %d starts on %s (%s was taken); log:\n%s", h.Starts(), h.HTTPAddr(), taken[0], h.LogTail(20))
	}
	if err := c.WaitNodesLive(ctx, 1); err != nil {
		t.Fatal(err)
	}

	if err := c.Kill(h, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	take(h.HTTPAddr())
	if err := c.Restart(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Starts() != 4 || h.HTTPAddr() == taken[1] || h.Rebinds() != 2 {
		t.Fatalf("h1 after the restart: %d starts, %d rebinds, on %s (%s was taken)", h.Starts(), h.Rebinds(), h.HTTPAddr(), taken[1])
	}
	if args := strings.Join(h.Args(), " "); !strings.Contains(args, "--http-addr "+h.HTTPAddr()) {
		t.Fatalf("arguments %s do not name the new address %s", args, h.HTTPAddr())
	}
}

// A run that failed to bind its HTTP address is told from one that failed
// otherwise, from one that failed on another address, and from an earlier
// run's failure.
func TestBindFailed(t *testing.T) {
	const addr = "127.0.0.1:1234"
	start := startMarker + "2 of h1 at now: bin [\"--http-addr\" \"127.0.0.1:1234\"]\n"
	bind := "listen on 127.0.0.1:1234: listen tcp 127.0.0.1:1234: bind: address already in use\n"
	for _, tc := range []struct {
		log  string
		want bool
	}{
		{start + bind, true},
		{start + `{"level":"ERROR","msg":"exit","err":"listen on 127.0.0.1:1234: listen tcp 127.0.0.1:1234: bind: address already in use"}` + "\n", true},
		{start + "connect to nats: no servers available\n", false},
		{start + strings.ReplaceAll(bind, "1234", "12345"), false},
		{startMarker + "1 of h1\n" + bind + start + "boom\n", false},
		{strings.TrimSuffix(start, "\n"), false},
	} {
		if got := bindFailed(tc.log, addr); got != tc.want {
			t.Errorf("bindFailed(%q) = %v, want %v", tc.log, got, tc.want)
		}
	}
}

// The harness's ports are outside the kernel's ephemeral range, which it
// hands out by itself.
func TestPortsOutsideEphemeralRange(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, n, want int
		ok              bool
	}{
		{32768, 60999, 0, 10000, true},
		{32768, 60999, 32767 - 10000, 32767, true},
		{32768, 60999, 32768 - 10000, 61000, true},
		{32768, 60999, 32768 - 10000 + 65535 - 61000, 65535, true},
		{1024, 65535, 0, 0, false},
		{5000, 20000, 0, 20001, true},
		{40000, 65535, 29999, 39999, true},
	} {
		got, ok := pickOutside(tc.lo, tc.hi, func(int) int { return tc.n })
		if got != tc.want || ok != tc.ok {
			t.Errorf("pickOutside(%d, %d) with %d = %d %v, want %d %v", tc.lo, tc.hi, tc.n, got, ok, tc.want, tc.ok)
		}
	}
	// The draw covers every port outside the range and no other.
	var total int
	pickOutside(32768, 60999, func(n int) int { total = n; return 0 })
	if want := (32768 - 10000) + (65536 - 61000); total != want {
		t.Errorf("%d ports to draw from, want %d", total, want)
	}
	for _, s := range []string{"", "1", "a b", "60999 32768", "0 100", "1 70000"} {
		if _, _, ok := parsePortRange(s); ok {
			t.Errorf("parsePortRange(%q) ok", s)
		}
	}

	b, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		t.Skipf("no ephemeral range to check against: %v", err)
	}
	lo, hi, ok := parsePortRange(string(b))
	if !ok {
		t.Fatalf("cannot parse %q", b)
	}
	var free ports
	defer free.release()
	for range 20 {
		p, err := free.port()
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo && p <= hi {
			t.Fatalf("port %d is in the ephemeral range %d-%d", p, lo, hi)
		}
	}
}

// A process the test kills after a restart that could not bind its HTTP
// port (so it had already exited) stays down: the kill still marks its
// exit as expected, and the next wait does not start it again on a fresh
// port (review of s27-h3).
func TestKilledAfterFailedRestartStaysDown(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	c := startBuiltCluster(t, ctx, Config{Coordinators: 1, Hosts: 1, NATSServers: 1})
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	h := c.Host(0)
	if err := c.Kill(h, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", h.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	if err := c.Restart(ctx, h); err != nil {
		t.Fatal(err)
	}
	<-h.Exited() // it could not bind its HTTP port
	if err := c.Kill(h, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	starts := h.Starts()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Running() || h.Starts() != starts {
		t.Fatalf("h1 was killed by the test, yet runs again (%d starts, was %d)", h.Starts(), starts)
	}
}
