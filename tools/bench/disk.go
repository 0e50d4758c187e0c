package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Disk is what the block device that holds the run's data did while the
// run published, read from the kernel's counters (/proc/diskstats) around
// the publishing, so that measuring costs the run nothing. The counters
// are the whole device's: they include whatever else writes to it (the
// processes' logs, the file system's journal, other programs), as the
// machine's CPU figure does. The bench writes out the machine's dirty
// pages before it starts publishing (Run), so that a run is not charged
// for the writeback of the run before it. On a shared virtual disk the
// device's speed changes over minutes (other tenants): a rate is read
// together with the write latency of its run, and two targets are compared
// in runs of a similar disk.
type Disk struct {
	Device string `json:"device"`
	// MeanWriteMS is the mean time of a completed write request, queued
	// and served, in milliseconds.
	MeanWriteMS float64 `json:"mean_write_ms"`
	// Flushes is the flushes (cache flushes, as an fsync ends with on a
	// device with a volatile cache) completed, and MeanFlushMS their mean
	// time in milliseconds; both 0 where the kernel does not count them
	// (before 5.5) or none completed.
	Flushes     uint64  `json:"flushes"`
	MeanFlushMS float64 `json:"mean_flush_ms"`
	// BusyPct is the share of the wall time the device had requests in
	// flight.
	BusyPct float64 `json:"busy_pct"`
	// BytesWritten is what was written to the device; BytesPerRecord is
	// that per confirmed record (0 without records).
	BytesWritten   uint64  `json:"bytes_written"`
	BytesPerRecord float64 `json:"bytes_per_record"`
}

// diskCounters is one reading of a device's counters.
type diskCounters struct {
	writes, sectorsWritten, writeMS uint64
	ioMS                            uint64 // time with requests in flight
	flushes, flushMS                uint64
	hasFlushes                      bool
}

// diskSample is a device's counters at a time.
type diskSample struct {
	at     time.Time
	device string
	c      diskCounters
}

// procDiskStats is where the device counters are read; a variable for
// tests.
var procDiskStats = "/proc/diskstats"

// sampleDisk reads the counters of the device that holds dir. It fails
// where there are none to read: not Linux, or dir on a file system whose
// device number names no block device (tmpfs, overlay, btrfs, ZFS); the
// bench then reports no disk figures.
func sampleDisk(dir string) (diskSample, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return diskSample{}, err
	}
	dev := uint64(st.Dev) // its type differs by platform
	major, minor := unix.Major(dev), unix.Minor(dev)
	f, err := os.Open(procDiskStats)
	if err != nil {
		return diskSample{}, err
	}
	defer func() { _ = f.Close() }() // read-only
	name, c, err := ParseDiskStats(f, major, minor)
	if err != nil {
		return diskSample{}, fmt.Errorf("the device of %s: %w", dir, err)
	}
	return diskSample{at: time.Now(), device: name, c: c}, nil
}

// sampleDataDisk is sampleDisk of dir, or nothing without one.
func sampleDataDisk(dir string) (diskSample, error) {
	if dir == "" {
		return diskSample{}, nil
	}
	return sampleDisk(dir)
}

// ParseDiskStats finds the line of device major:minor in /proc/diskstats
// and returns its name and counters: fields 5-8 after the name are writes
// completed, merged, sectors written (512 bytes each, whatever the
// device's sector size) and milliseconds writing; field 10 milliseconds
// with I/O in flight; fields 16-17, where present, flushes completed and
// milliseconds flushing.
func ParseDiskStats(r io.Reader, major, minor uint32) (string, diskCounters, error) {
	sc := bufio.NewScanner(r)
	want := [2]string{strconv.FormatUint(uint64(major), 10), strconv.FormatUint(uint64(minor), 10)}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != want[0] || f[1] != want[1] {
			continue
		}
		stats := f[3:]
		if len(stats) < 11 {
			return "", diskCounters{}, fmt.Errorf("diskstats: %s has %d counters, want at least 11", f[2], len(stats))
		}
		field := func(n int) (uint64, error) { // n counts from 1, as the kernel's documentation does
			v, err := strconv.ParseUint(stats[n-1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("diskstats: %s counter %d: %w", f[2], n, err)
			}
			return v, nil
		}
		var c diskCounters
		var err error
		for _, p := range []struct {
			n int
			v *uint64
		}{{5, &c.writes}, {7, &c.sectorsWritten}, {8, &c.writeMS}, {10, &c.ioMS}} {
			if *p.v, err = field(p.n); err != nil {
				return "", diskCounters{}, err
			}
		}
		if len(stats) >= 17 {
			if c.flushes, err = field(16); err != nil {
				return "", diskCounters{}, err
			}
			if c.flushMS, err = field(17); err != nil {
				return "", diskCounters{}, err
			}
			c.hasFlushes = true
		}
		return f[2], c, nil
	}
	if err := sc.Err(); err != nil {
		return "", diskCounters{}, err
	}
	return "", diskCounters{}, errors.New("diskstats: no such device")
}

// minDiskWindow is the shortest window the device's figures are given
// for: its busy time counts in jiffies (4 ms at 250 Hz).
const minDiskWindow = 100 * time.Millisecond

// diskBetween is what the device did from a to b, with records confirmed
// meanwhile, and why there are no figures when there are none: two
// devices, a window too short, or counts that went backwards. The
// milliseconds counters are the kernel's 32-bit ones, which wrap (the
// write time sums parallel requests, so it wraps sooner than the clock):
// they are subtracted modulo 2^32.
func diskBetween(a, b diskSample, records int) (*Disk, error) {
	wall := b.at.Sub(a.at)
	x, y := a.c, b.c
	switch {
	case a.device != b.device:
		return nil, fmt.Errorf("diskstats: %s, then %s", a.device, b.device)
	case wall < minDiskWindow:
		return nil, fmt.Errorf("diskstats: a window of %v, under %v", wall, minDiskWindow)
	case y.writes < x.writes || y.sectorsWritten < x.sectorsWritten || y.flushes < x.flushes:
		return nil, errors.New("diskstats: counts went backwards")
	}
	ms := func(from, to uint64) float64 { return float64(uint32(to) - uint32(from)) }
	d := &Disk{
		Device:       b.device,
		BusyPct:      min(100, ms(x.ioMS, y.ioMS)/(10*wall.Seconds())),
		BytesWritten: 512 * (y.sectorsWritten - x.sectorsWritten),
	}
	if n := y.writes - x.writes; n > 0 {
		d.MeanWriteMS = ms(x.writeMS, y.writeMS) / float64(n)
	}
	if n := y.flushes - x.flushes; n > 0 && y.hasFlushes {
		d.Flushes, d.MeanFlushMS = n, ms(x.flushMS, y.flushMS)/float64(n)
	}
	if records > 0 {
		d.BytesPerRecord = float64(d.BytesWritten) / float64(records)
	}
	return d, nil
}
