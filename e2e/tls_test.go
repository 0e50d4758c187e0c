package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
)

// TestTLSKillOwner: the failover of TestKillOwner with TLS on (issue 13):
// nats-server requires TLS with a client certificate of the deployment's
// CA, every process connects with its principal's certificate (the stream
// hosts through their proxies), and the coordinators run Raft over mutual
// TLS. SIGKILL the owner of a 3-copy majority_durable stream under load:
// it serves again at the next epoch without an operator, and every
// confirmed record is read back at its offset.
//
// It catches: a service that ignores its TLS flags (it could not connect,
// or the server shows a plain connection), coordinators whose Raft peers
// do not form a quorum over TLS (no leader), and a failover that depends
// on something TLS breaks (reconnects, disconnect advisories, the
// replication path).
func TestTLSKillOwner(t *testing.T) {
	e := newEnv(t, opts{tls: true})
	if !e.c.TLS() {
		t.Fatal("the cluster runs without TLS")
	}
	e.checkAllTLS()

	const stream = "tls-kill-owner"
	before := e.createStream(stream, 3)
	oldOwner := before.Assignment.Owner
	epoch := before.Assignment.Epoch

	led := workload.NewLedger()
	ld := e.load(stream, "tls", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 200, epoch)

	killedAt := time.Now()
	e.signal(e.host(oldOwner), syscall.SIGKILL)
	e.waitConfirms(led, 200, epoch+1)
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	e.logf("failover over TLS: %s -> %s at epoch %d, %v after the kill", oldOwner, after.Assignment.Owner,
		after.Assignment.Epoch, time.Since(killedAt).Round(time.Millisecond))
	if after.Assignment.Includes(oldOwner) {
		t.Fatalf("the dead old owner %s is still in the assignment %+v", oldOwner, after.Assignment)
	}

	e.stopLoad(ld, led)
	rd := workload.NewReader(e.cl, stream, "tls-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
	if final := e.info(stream); final.Assignment.Epoch != epoch+1 {
		t.Fatalf("after the failover: %s; want epoch %d", describe(final), epoch+1)
	}
	e.checkAllTLS()

	for i := range e.c.Coordinators() {
		p := e.c.Coordinator(i)
		log, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "raft transport uses mutual TLS") {
			t.Errorf("%s does not log Raft over mutual TLS; log tail:\n%s", p.Name, p.LogTail(20))
		}
	}
}

// checkAllTLS fails the test if nats-server holds a connection that is
// not TLS.
func (e *env) checkAllTLS() {
	e.t.Helper()
	plain, total, err := e.c.PlainConnections()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(plain) != 0 {
		e.t.Errorf("connections that are not TLS: %v", plain)
	}
	e.logf("%d connections, all TLS", total)
}
