package streamlog

import (
	"testing"
	"time"
)

// TestRepeatedSealWritesNothing: a seal repeated at the fence and
// transition the copy is already sealed at, with nothing written since,
// is answered from the copy's durable state without a synced write. A
// recovery round that timed out seals every copy again; on a loaded
// 1,000-stream failover each copy was sealed 4-5 times, each a synced
// write queued behind the others' (docs/benchmarks.md). Here every WAL
// sync is held: the repeat answers anyway, with the first seal's state;
// a newer transition still writes (it waits for the held sync).
func TestRepeatedSealWritesNothing(t *testing.T) {
	_, fault, _, s, c := sealedBeforeBegin(t) // sealed at fence 2, transition 1
	defer func() { _ = s.Close() }()
	first, err := c.Seal(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	fault.on.Store(true)
	repeated := make(chan SealState, 1)
	go func() {
		st, err := c.Seal(2, 1)
		if err != nil {
			t.Error(err)
		}
		repeated <- st
	}()
	select {
	case st := <-repeated:
		if st.Tails != first.Tails || st.Seal.FenceEpoch != 2 || st.Seal.Transition != 1 || st.Digest != first.Digest {
			t.Fatalf("repeated seal answered %+v, want %+v", st, first)
		}
	case <-time.After(5 * time.Second):
		close(fault.release)
		t.Fatal("a repeated seal waited for a WAL sync")
	}
	newer := make(chan error, 1)
	go func() {
		_, err := c.Seal(2, 2)
		newer <- err
	}()
	select {
	case <-fault.held:
	case err := <-newer:
		t.Fatalf("a newer transition's seal returned %v without a synced write", err)
	}
	close(fault.release)
	if err := <-newer; err != nil {
		t.Fatal(err)
	}
	if seal, ok := c.SealInfo(); !ok || seal.Transition != 2 {
		t.Fatalf("after the newer transition: %+v", seal)
	}
}
