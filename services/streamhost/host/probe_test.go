package host

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestHostAnswersLivenessProbe: the coordinator leader's probe before a
// TTL expiry is answered with a liveness beat naming the host's
// incarnation; once the host has stopped, the probe finds no responders.
func TestHostAnswersLivenessProbe(t *testing.T) {
	c := newMiniCluster(t)
	th := c.start("n1", nil)
	var m *nats.Msg
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m, err = c.nc.Request(wire.HostProbeSubject("n1"), nil, time.Second); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	var hb wire.Heartbeat
	if err := json.Unmarshal(m.Data, &hb); err != nil {
		t.Fatalf("probe answer %q: %v", m.Data, err)
	}
	if hb.Node != "n1" || hb.Incarnation != th.h.Incarnation() || !hb.Live || hb.Leaving {
		t.Fatalf("probe answer %+v, want a liveness beat of n1 incarnation %d", hb, th.h.Incarnation())
	}
	th.stop()
	if _, err := c.nc.Request(wire.HostProbeSubject("n1"), nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("probe of a stopped host: %v, want no responders", err)
	}
}
