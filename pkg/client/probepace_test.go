package client

// The owner watch keeps its probe pace while a failover is under way,
// whether or not the new owner's notice comes (review of the probe
// backoff, session 26: each of these took 1.7-1.8 s with a backoff that
// doubled after every probe, 1.0-1.1 s before it and after the fix).

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// (1) Lost notice: the new owner (epoch 2) serves 1 s after the old one
// died holding the publish, and its notice is lost. Before the branch the
// held attempt was abandoned within ~100 ms of the new owner serving.
func TestLostNoticeAbandonsPromptly(t *testing.T) {
	pc, took, _, _, err := publishAfterOwnerDies(t, time.Second)
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	t.Logf("took %v", took)
	if took > 1500*time.Millisecond {
		t.Fatalf("publish took %v; the new owner served at ~1 s, want the held attempt abandoned within ~0.3 s of it", took)
	}
}

// (2) Owner reconnect (same epoch, no notice is ever sent for it): the
// owner is away 1 s and comes back at epoch 1 with servingFor reset.
func TestReconnectedOwnerAbandonsPromptly(t *testing.T) {
	pc, took, _, _, err := publishAfterOwnerIsReplaced(t, time.Second, func(url string) *standInOwner { return startOwner(t, url, 1) })
	if err != nil || pc.Epoch != 1 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	t.Logf("took %v", took)
	if took > 1500*time.Millisecond {
		t.Fatalf("publish took %v; the owner was back at ~1 s, want the held attempt abandoned within ~0.3 s of it", took)
	}
}

// (3) The kicked probe is inconclusive: the new owner announces itself,
// and refuses its first fetch (overloaded, as a host whose reader budget is
// full in a mass failover), then serves.
func TestInconclusiveKickedProbe(t *testing.T) {
	pc, took, _, _, err := publishAfterOwnerIsReplaced(t, time.Second, func(url string) *standInOwner {
		o := &standInOwner{t: t, epoch: 2, nc: responderConn(t, url), held: make(chan struct{})}
		began := time.Now()
		var fetches atomic.Int32
		o.subs = append(o.subs,
			subscribe(t, o.nc, wire.PublishSubject("s"), o.onPublish),
			subscribe(t, o.nc, wire.FetchSubject("s"), func(m *nats.Msg) {
				if fetches.Add(1) == 1 {
					respondError(t, m, wire.Errorf(wire.CodeOverloaded, "reader requests at cap"))
					return
				}
				r := nats.NewMsg(m.Reply)
				r.Header.Set(wire.HeaderServingFor, fmt.Sprint(time.Since(began).Milliseconds()))
				r.Data = frame.AppendBatch(nil, &frame.Batch{Epoch: o.epoch})
				_ = m.RespondMsg(r)
			}))
		announce(t, o, "h2")
		return o
	})
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	t.Logf("took %v", took)
	if took > 1500*time.Millisecond {
		t.Fatalf("publish took %v; want the held attempt abandoned within ~0.3 s of the new owner serving", took)
	}
}

// (4) The client's NATS user may not subscribe to owner notices (the
// client principal of TestRestrictedClient): Subscribe succeeds locally,
// the server refuses it asynchronously, so the watch believes notices are
// heard and backs off, though none can ever arrive.
func TestRefusedNoticesDoNotSlowProbes(t *testing.T) {
	ourl, curl := startNATSDenyingNotices(t)
	a := startOwner(t, ourl, 1)
	c := connectClient(t, curl, WithRequestTimeout(3*time.Second))
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	a.holdNext()
	go func() {
		<-a.held
		time.Sleep(time.Second)
		b := startOwner(t, ourl, 2)
		announce(t, b, "h2")
	}()
	start := time.Now()
	pc, err := c.Publish(ctxTimeout(t, 20*time.Second), "s", []byte("two"))
	took := time.Since(start)
	if err != nil || pc.Epoch != 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	t.Logf("took %v", took)
	if took > 1500*time.Millisecond {
		t.Fatalf("publish took %v with notices refused by permissions; want ~1.1 s as without the backoff", took)
	}
}
