package e2e

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// chaosDiskRoom is the free space of each host's data directory (a
// tmpfs) in TestChaos; the disks are resized to it before hosts restart.
// It is less than the store's pebble preallocates for a new WAL (110% of
// its 64 MB memtable), so that preallocation fails and the WAL takes its
// pages as it grows: a disk filled up then fails the very next write that
// needs a page, as a disk without a reservation would. (With the
// reservation, a full disk would go unnoticed until the WAL is used up.) It
// is more than the flush of the memtable a restart replays needs: a host
// writes a few MB a minute here.
const chaosDiskRoom = 48 << 20

// chaosDisks puts every host's data directory on a tmpfs of chaosDiskRoom
// (tmpfsDataDir), for the store failures of TestChaos, and returns the
// directories by node. Without root, or where mounting is not allowed, it
// returns none and says why: the store failures are left out.
func (e *env) chaosDisks() (map[string]string, string) {
	e.t.Helper()
	if os.Geteuid() != 0 {
		return nil, "mounting a tmpfs on a host's data directory needs root"
	}
	disks := map[string]string{}
	for i := range e.c.Hosts() {
		p := e.c.Host(i)
		dir, err := e.tmpfsDataDir(p, strconv.Itoa(chaosDiskRoom))
		if err != nil {
			return nil, err.Error()
		}
		disks[p.Node] = dir
	}
	if err := e.c.WaitNodesLive(e.ctx, e.c.Hosts()); err != nil {
		e.t.Fatal(err)
	}
	return disks, ""
}

// resizeTmpfs resizes the tmpfs mounted at dir to what its files use now
// plus room. With room 0 the disk is full: the next page any file needs is
// refused (no space left on device). The files stay as they are.
func resizeTmpfs(dir string, room uint64) error {
	var last error
	for range 20 {
		used, err := diskUsed(dir)
		if err != nil {
			return err
		}
		// size=0 would mean no limit: keep at least one page.
		size := max(used+room, 4096)
		if last = remount(dir, strconv.FormatUint(size, 10)); last == nil {
			return nil
		}
		// The files grew between the two (a tmpfs does not shrink below
		// what it holds): measure again.
	}
	return last
}

// diskUsed returns the bytes the file system at dir holds.
func diskUsed(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return (st.Blocks - st.Bfree) * uint64(st.Bsize), nil
}

// diskUse lists what each of disks holds, for the log.
func diskUse(disks map[string]string) string {
	var us []string
	for _, node := range slices.Sorted(maps.Keys(disks)) {
		used, err := diskUsed(disks[node])
		if err != nil {
			return err.Error()
		}
		us = append(us, fmt.Sprintf("%s %.1f MB", node, float64(used)/(1<<20)))
	}
	return strings.Join(us, ", ")
}

// remount sets the size of the tmpfs mounted at dir.
func remount(dir, size string) error {
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("remount %s with size %s: %w: %s", dir, size, err, strings.TrimSpace(string(out)))
	}
	return nil
}
