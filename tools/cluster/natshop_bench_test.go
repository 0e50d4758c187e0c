package cluster

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// BenchmarkNATSHop measures bare NATS request/reply round trips on a local
// three-server cluster as the bench's local cluster runs it (embedded
// servers, routes between every pair), with no stream host in the way: the
// cost of the NATS hops of a synchronous publish (client to owner and
// back; owner to follower and back), to set against its confirm latency
// (docs/benchmarks.md). same-server: requester and responder on one
// server; across-route: on two servers, as a client and an owner usually
// are; relayed: a request answered by a responder that first makes a
// request of its own to a third connection on another server and waits
// for its reply, the shape of a synchronous publish's four hops (client,
// owner, follower, owner, client) without the fsyncs.
func BenchmarkNATSHop(b *testing.B) {
	ns, err := StartNATSCluster(3, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, n := range ns {
			n.Shutdown()
		}
	})
	conn := func(i int) *nats.Conn {
		nc, err := nats.Connect(ns[i].URL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	payload := make([]byte, 256)
	echo := func(nc *nats.Conn, subj string) {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, req *nats.Conn, subj string) {
		for b.Loop() {
			if _, err := req.Request(subj, payload, 5*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("same-server", func(b *testing.B) {
		echo(conn(0), "hop.same")
		run(b, conn(0), "hop.same")
	})
	b.Run("across-route", func(b *testing.B) {
		echo(conn(1), "hop.route")
		run(b, conn(0), "hop.route")
	})
	b.Run("relayed", func(b *testing.B) {
		echo(conn(2), "hop.follower")
		owner := conn(1)
		if _, err := owner.Subscribe("hop.owner", func(m *nats.Msg) {
			r, err := owner.Request("hop.follower", m.Data, 5*time.Second)
			if err != nil {
				return
			}
			_ = m.Respond(r.Data)
		}); err != nil {
			b.Fatal(err)
		}
		if err := owner.Flush(); err != nil {
			b.Fatal(err)
		}
		run(b, conn(0), "hop.owner")
	})
}
