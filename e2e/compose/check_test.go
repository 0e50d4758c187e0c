package compose

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestCheckLog makes sure the delivery check of TestCompose catches what it
// is there to catch, since a check that never fails proves nothing.
func TestCheckLog(t *testing.T) {
	log := []string{"p0-000000-a0", "p1-000000-a0", "p0-000001-a0", "p0-000001-a1"}
	cases := []struct {
		name      string
		log       []string
		confirmed map[uint64]string
		delivered map[uint64]string
		want      string // a substring of the first error; "" for none
	}{
		{"clean", log, map[uint64]string{0: log[0], 1: log[1], 3: log[3]}, map[uint64]string{0: log[0], 2: log[2]}, ""},
		{"duplicate payload", append(append([]string{}, log...), log[1]), map[uint64]string{1: log[1]}, nil, "at offsets 1 and 4"},
		{"confirmed elsewhere", log, map[uint64]string{2: log[3]}, nil, "was confirmed there"},
		{"confirmed beyond the log", log, map[uint64]string{4: "p2-000000-a0"}, nil, "beyond the 4 records"},
		{"delivered then changed", log, nil, map[uint64]string{2: "p9-000000-a0"}, "live reader was handed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := checkLog(c.log, c.confirmed, c.delivered)
			switch {
			case c.want == "" && len(errs) > 0:
				t.Fatalf("unexpected errors: %v", errs)
			case c.want != "" && len(errs) == 0:
				t.Fatalf("no error, want one containing %q", c.want)
			case c.want != "" && !strings.Contains(errs[0].Error(), c.want):
				t.Fatalf("error %v, want one containing %q", errs[0], c.want)
			}
		})
	}
}

// TestFailoverKind keeps the publishers' notion of an explained failure
// narrow: an error a failover does not explain must stop the load.
func TestFailoverKind(t *testing.T) {
	explained := []error{
		fmt.Errorf("publish s: %w", nats.ErrNoResponders),
		fmt.Errorf("publish s: gave up: %w", client.ErrTimeout),
		fmt.Errorf("publish s: %w", &wire.Error{Code: wire.CodeSealed}),
		fmt.Errorf("publish s: %w", &wire.Error{Code: wire.CodeConfirmTimeout}),
	}
	for _, err := range explained {
		if failoverKind(err) == "" {
			t.Errorf("%v: not explained by a failover", err)
		}
	}
	for _, err := range []error{
		fmt.Errorf("publish s: %w", &wire.Error{Code: wire.CodeInternal}),
		fmt.Errorf("publish s: %w", &wire.Error{Code: wire.CodeBadRequest}),
		fmt.Errorf("publish s: %w", client.ErrNoSuchStream),
		fmt.Errorf("decode confirm: unexpected end of JSON input"),
	} {
		if kind := failoverKind(err); kind != "" {
			t.Errorf("%v: explained as %q, want unexplained", err, kind)
		}
	}
}
