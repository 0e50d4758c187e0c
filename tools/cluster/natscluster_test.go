package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Three servers, embedded or processes of their own, form one NATS cluster: a message published on one
// server reaches a subscriber on another, a client's disconnect advisory
// reaches a system-account subscriber on another server (so a coordinator
// hears every host's advisory whichever server either is on), and a
// server's shutdown (KillNATS's stand-in for SIGKILL) moves its clients to
// another server of their URL list without a disconnect advisory.
func TestNATSCluster(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		testNATSCluster(t, func() ([]*NATS, error) { return StartNATSCluster(3, "", nil) })
	})
	t.Run("processes", func(t *testing.T) {
		bin := natsServerBin(t)
		dir := t.TempDir()
		var ns []*NATS
		testNATSCluster(t, func() ([]*NATS, error) {
			var err error
			ns, err = StartNATSProcesses(bin, dir, 3, "", func(i int) string {
				return filepath.Join(dir, fmt.Sprintf("nats-%d.log", i+1))
			})
			return ns, err
		})
		// Shutdown killed and reaped every server process.
		for _, n := range ns {
			n.Shutdown()
			assertGone(t, n.proc)
		}
	})
}

// builtNATSServer builds nats-server once per test binary run.
var builtNATSServer = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	return BuildNATSServer(ctx, root, filepath.Join(testBinDir, "bin"))
})

// natsServerBin is the built nats-server binary.
func natsServerBin(t *testing.T) string {
	t.Helper()
	bin, err := builtNATSServer()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// assertGone fails unless p ran and no process of its pid exists.
func assertGone(t *testing.T, p *Proc) {
	t.Helper()
	pid := p.Pid()
	if pid == 0 {
		t.Fatalf("%s never started", p.Name)
	}
	if p.Running() {
		t.Errorf("%s (pid %d) still running", p.Name, pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s: pid %d still exists (kill 0: %v)", p.Name, pid, err)
	}
}

func testNATSCluster(t *testing.T, start func() ([]*NATS, error)) {
	ns, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range ns {
			n.Shutdown()
		}
	})
	ids := map[string]int{}
	for i, n := range ns {
		ids[n.ID()] = i
	}

	sys, err := nats.Connect(ns[0].SysURL())
	if err != nil {
		t.Fatalf("connect sys: %v", err)
	}
	defer sys.Close()
	adv, err := sys.SubscribeSync("$SYS.ACCOUNT." + BrookAccount + ".DISCONNECT")
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Flush(); err != nil {
		t.Fatal(err)
	}

	sub, err := nats.Connect(ns[1].URL(), nats.Name("sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msgs, err := sub.SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	// Routes carry interest asynchronously: publish until one arrives.
	pub, err := nats.Connect(ns[2].URL()+","+ns[0].URL(), nats.Name("brook-streamhost:h9"), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if got := ids[pub.ConnectedServerId()]; got != 2 {
		t.Fatalf("publisher on server %d, want 2", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := pub.Publish("x", []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, err := msgs.NextMsg(100 * time.Millisecond); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no message across the route")
		}
	}
	// The two servers the messages crossed count matches (the system
	// account's own among them: Subsz sums the accounts) and cache none
	// (auth.ServerSettings); with the cache on each holds 11-13 subjects
	// here.
	for _, i := range []int{1, 2} {
		sz, err := ns[i].subsz()
		if err != nil {
			t.Fatal(err)
		}
		if sz.NumMatches == 0 || sz.NumCache != 0 {
			t.Errorf("server %d: %d matches, %d subjects in its sublist cache; want some matches and none cached",
				i, sz.NumMatches, sz.NumCache)
		}
	}

	// The advisory of a client of server 2 reaches the subscriber on 0.
	// The system account's interest crosses the routes asynchronously too
	// (the flush above only reached server 0): under a loaded make test
	// one advisory was published on server 2 before the interest had
	// arrived there, and lost. So a client connects and leaves until one
	// arrives.
	var m *nats.Msg
	deadline = time.Now().Add(10 * time.Second)
	for m == nil {
		other, err := nats.Connect(ns[2].URL(), nats.Name("brook-streamhost:h8"))
		if err != nil {
			t.Fatal(err)
		}
		other.Close()
		m, err = adv.NextMsg(500 * time.Millisecond)
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("no disconnect advisory across the route: %v", err)
		}
	}
	var body struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Client struct {
			Name string `json:"name"`
		} `json:"client"`
	}
	if err := json.Unmarshal(m.Data, &body); err != nil || body.Client.Name != "brook-streamhost:h8" || ids[body.Server.ID] != 2 {
		t.Fatalf("advisory %s: err %v", m.Data, err)
	}

	// Kill server 2: the publisher moves to server 0.
	ns[2].Shutdown()
	deadline = time.Now().Add(5 * time.Second)
	for !pub.IsConnected() || ids[pub.ConnectedServerId()] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("publisher not back on server 0 (connected %v)", pub.IsConnected())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m, err := adv.NextMsg(500 * time.Millisecond); err == nil {
		t.Logf("a killed server's client got a disconnect advisory: %s", m.Data)
	} else {
		t.Log("no disconnect advisory for the killed server's client")
	}
	// Server 2 comes back on the same ports and rejoins.
	if err := ns[2].Restart(0); err != nil {
		t.Fatal(err)
	}
	if err := WaitNATSRoutes(ns, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
