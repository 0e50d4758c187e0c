package client

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestRetryableCodes pins which host codes the client retries: those a
// failover or a passing overload explains, never those that describe the
// request or a record that was not confirmed.
func TestRetryableCodes(t *testing.T) {
	for code, want := range map[string]bool{
		wire.CodeNotOwner:        true,
		wire.CodeSealed:          true,
		wire.CodeShuttingDown:    true,
		wire.CodeRecovering:      true,
		wire.CodeStaleEpoch:      true,
		wire.CodeStreamUnknown:   true,
		wire.CodeUnavailable:     true,
		wire.CodeOverloaded:      true,
		wire.CodeNotEnoughCopies: true,
		wire.CodeBadRequest:      false,
		wire.CodeNotFound:        false,
		wire.CodeConfirmTimeout:  false,
		wire.CodePayloadTooLarge: false,
		wire.CodeDuplicate:       false,
		wire.CodeInternal:        false,
	} {
		err := fmt.Errorf("attempt: %w", wire.Errorf(code, "host h1 says so"))
		if got := retryable(err); got != want {
			t.Errorf("retryable(%s) = %v, want %v", code, got, want)
		}
	}
	if !retryable(nats.ErrNoResponders) || retryable(errors.New("plain")) {
		t.Error("transport errors: no responders must be retried, a plain error not")
	}
}

// A fetch answered overloaded (the owner is at its cap of long polls) is
// retried after a backoff and returns the batch of the attempt that gets
// in.
func TestFetchRetriesOverloaded(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var n atomic.Int32
	subscribe(t, svc, wire.FetchSubject("s"), func(m *nats.Msg) {
		if n.Add(1) <= 2 {
			respondError(t, m, wire.Errorf(wire.CodeOverloaded, "host h1 has 2 long-poll fetches waiting; retry"))
			return
		}
		respondBatch(t, m, &frame.Batch{Epoch: 1, Tail: 3, Confirmed: 3, Next: 3})
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusServing})
	})
	c := connectClient(t, url)

	b, err := c.Fetch(ctxTimeout(t, 10*time.Second), "s", wire.FetchRequest{Start: "earliest"})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if b.Next != 3 || n.Load() != 3 {
		t.Fatalf("batch next %d after %d attempts, want 3 after 3", b.Next, n.Load())
	}
}
