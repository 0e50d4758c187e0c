package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two devices, the second with the flush counters of kernels from 5.5 on.
const diskStatsText = ` 254       0 vda 199867 19976 8150754 347087 540402 219099 27900872 218632 0 137008 593525 20853 0 11845264 5417 161378 22386
 254       1 vda1 10 0 80 5 20 0 160 30 0 40 35
   7       0 loop0 1 2 3 4 5 6 7 8 9 10 11
`

func TestParseDiskStats(t *testing.T) {
	name, c, err := ParseDiskStats(strings.NewReader(diskStatsText), 254, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := diskCounters{writes: 540402, sectorsWritten: 27900872, writeMS: 218632, ioMS: 137008, flushes: 161378, flushMS: 22386, hasFlushes: true}
	if name != "vda" || c != want {
		t.Fatalf("%s %+v, want vda %+v", name, c, want)
	}
	name, c, err = ParseDiskStats(strings.NewReader(diskStatsText), 254, 1)
	if want := (diskCounters{writes: 20, sectorsWritten: 160, writeMS: 30, ioMS: 40}); err != nil || name != "vda1" || c != want {
		t.Fatalf("%s %+v %v, want vda1 %+v", name, c, err, want)
	}
	for _, bad := range []struct {
		text         string
		major, minor uint32
	}{
		{diskStatsText, 8, 0},                     // no such device
		{" 8 0 sda 1 2 3 4 5 6 7 8 9 10\n", 8, 0}, // 10 counters
		{" 8 0 sda 1 2 3 4 x 6 7 8 9 10 11\n", 8, 0},
	} {
		if _, _, err := ParseDiskStats(strings.NewReader(bad.text), bad.major, bad.minor); err == nil {
			t.Errorf("%q (%d:%d) parsed", bad.text, bad.major, bad.minor)
		}
	}
}

func TestDiskBetween(t *testing.T) {
	t0 := time.Now()
	a := diskSample{at: t0, device: "vda", c: diskCounters{writes: 100, sectorsWritten: 1000, writeMS: 50, ioMS: 400, flushes: 10, flushMS: 5, hasFlushes: true}}
	b := diskSample{at: t0.Add(10 * time.Second), device: "vda", c: diskCounters{writes: 300, sectorsWritten: 201000, writeMS: 450, ioMS: 2400, flushes: 60, flushMS: 105, hasFlushes: true}}
	d, err := diskBetween(a, b, 1000)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	// 200 writes in 400 ms; 50 flushes in 100 ms; 2 s of 10 with I/O in
	// flight; 200,000 sectors of 512 bytes over 1,000 records.
	if err != nil || d.Device != "vda" || !near(d.MeanWriteMS, 2) || d.Flushes != 50 || !near(d.MeanFlushMS, 2) || !near(d.BusyPct, 20) ||
		d.BytesWritten != 102400000 || !near(d.BytesPerRecord, 102400) {
		t.Fatalf("%+v %v", d, err)
	}
	if d, err := diskBetween(a, b, 0); err != nil || d.BytesPerRecord != 0 {
		t.Fatalf("no records: %+v %v", d, err)
	}

	// The milliseconds counters are 32 bits and wrap; the counts do not.
	wrapped := b
	wrapped.c.writeMS = 100 // 2^32 - 300 + 400 = 100 (mod 2^32): 400 ms
	a2 := a
	a2.c.writeMS = 1<<32 - 300
	if d, err := diskBetween(a2, wrapped, 1000); err != nil || !near(d.MeanWriteMS, 2) {
		t.Fatalf("wrapped write time: %+v %v", d, err)
	}
	for what, bad := range map[string]func(*diskSample){
		"writes went back":  func(s *diskSample) { s.c.writes = 99 },
		"sectors went back": func(s *diskSample) { s.c.sectorsWritten = 999 },
		"flushes went back": func(s *diskSample) { s.c.flushes = 9 },
		"another device":    func(s *diskSample) { s.device = "vdb" },
		"a window of 50 ms": func(s *diskSample) { s.at = t0.Add(50 * time.Millisecond) },
	} {
		c := b
		bad(&c)
		if d, err := diskBetween(a, c, 1); err == nil {
			t.Errorf("%s: figures %+v", what, d)
		}
	}
}

// On this machine, where the test's directory is on a block device, a
// synced write shows in its counters.
func TestSampleDisk(t *testing.T) {
	dir := t.TempDir()
	a, err := sampleDisk(dir)
	if err != nil {
		t.Skipf("no device counters for %s: %v", dir, err)
	}
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := sampleDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	b.at = a.at.Add(time.Second) // the window's length is not what this tests
	d, err := diskBetween(a, b, 1)
	if err != nil || d.BytesWritten < 1<<20 {
		t.Fatalf("after a synced 1 MiB write to %s: %+v %v", a.device, d, err)
	}
}
