package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// TestCreateThenPublishAtOnce: the README's two lines back to back on real
// processes. stream.create answers once the owner serves, so a publish sent
// as a plain NATS request (no retry) the moment the create answers is
// confirmed, for replicated and owner-only streams.
func TestCreateThenPublishAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx := ctxTimeout(t, 3*time.Minute)
	c := startBuiltCluster(t, ctx, Config{Coordinators: 1, Hosts: 3})
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesLive(ctx, 3); err != nil {
		t.Fatal(err)
	}
	nopts, err := c.NATSOptions(auth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.NATSURL(), append(nopts, nats.Name("brook-create-test"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, copies := range []int{3, 1, 3, 2} {
		stream := fmt.Sprintf("orders%d", i)
		body, _ := json.Marshal(wire.StreamCreate{Stream: stream, Copies: copies, Policy: "majority_durable"})
		start := time.Now()
		m, err := nc.Request(wire.AdminSubject(wire.VerbStreamCreate), body, 10*time.Second)
		if err != nil {
			t.Fatalf("create %s: %v", stream, err)
		}
		took := time.Since(start)
		var info wire.StreamInfo
		if err := json.Unmarshal(m.Data, &info); err != nil || info.StreamID == 0 {
			t.Fatalf("create %s: %s (%v)", stream, m.Data, err)
		}
		if info.Status != wire.StatusServing {
			t.Fatalf("create %s answered status %q after %v", stream, info.Status, took)
		}
		m, err = nc.Request(wire.PublishSubject(stream), []byte("hello"), 10*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("publish to %s right after its create (answered in %v): no responders", stream, took)
		}
		if err != nil {
			t.Fatalf("publish to %s: %v", stream, err)
		}
		var pc wire.PublishConfirm
		if err := json.Unmarshal(m.Data, &pc); err != nil || pc.StreamID != info.StreamID || pc.Offset != 0 {
			t.Fatalf("publish to %s: %s (%v), want a confirm at offset 0 of stream %d", stream, m.Data, err, info.StreamID)
		}
		t.Logf("%s (E=%d): create answered in %v, first publish confirmed", stream, copies, took)
	}
}
