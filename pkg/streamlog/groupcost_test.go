package streamlog

import "testing"

// A group is cut by what its entries weigh in Pebble's memtable, not by
// their bytes alone: a group of tiny records must stay below Pebble's large
// batch threshold (half a memtable) as a group of large ones does.
func TestGroupCutByMemtableWeight(t *testing.T) {
	if 2*maxGroupBytes > memTableSize-(64<<10) {
		t.Fatalf("maxGroupBytes %d is not below half of a %d memtable", maxGroupBytes, memTableSize)
	}
	for _, dataLen := range []int{0, 1, 256, 64 << 10} {
		s := &impl{kick: make(chan struct{}, 1)}
		var c copyImpl
		// Requests of 10 records, enough of them for two groups.
		data := make([][]byte, 10)
		for i := range data {
			data[i] = make([]byte, dataLen)
		}
		for weight := 0; weight < 2*maxGroupBytes; {
			r := c.prepareRecords(data, nil, 0)
			s.queue = append(s.queue, r)
			weight += r.memCost()
		}
		group, size, ok := s.takeGroup(&pipeline{})
		if !ok || len(group) == 0 {
			t.Fatalf("data %d: no group", dataLen)
		}
		weight, bytes, entries := 0, 0, 0
		for _, r := range group {
			weight += r.memCost()
			bytes += r.size
			entries += len(r.kvs)
		}
		if bytes != size {
			t.Fatalf("data %d: size %d, requests hold %d", dataLen, size, bytes)
		}
		// Pebble charges an entry at most its key, its value and 195
		// bytes (arenaskl.MaxNodeSize plus the key's trailer).
		if pebbleWeight := bytes + 195*entries; pebbleWeight > maxGroupBytes {
			t.Fatalf("data %d: a group of %d requests weighs %d in the memtable, above %d", dataLen, len(group), pebbleWeight, maxGroupBytes)
		}
		if next := s.queue[0].memCost(); weight+next <= maxGroupBytes {
			t.Fatalf("data %d: the group stopped at %d with room for the next request (%d)", dataLen, weight, next)
		}
	}
}
