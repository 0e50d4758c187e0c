package streamlog

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

// crashEnv names the store directory of the crash test's child process.
const crashEnv = "BROOK_STREAMLOG_CRASH_DIR"

// crashPayload is the deterministic content of record j of append i of
// goroutine g; sizes vary from a few bytes to a few KiB.
func crashPayload(g, i, j int) []byte {
	n := 8 + (g*7919+i*104729+j*31)%3000
	b := bytes.Repeat([]byte{byte('a' + (g+i+j)%26)}, n)
	return fmt.Appendf(b[:0:0], "%d/%d/%d:%s", g, i, j, b)
}

// TestCrashChild is the child process of TestCrashRecovery: it appends
// with several goroutines and prints every acknowledged record until it is
// killed. It does nothing in a normal test run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("runs only as the child of TestCrashRecovery")
	}
	s, err := Open(Options{Dir: dir, Logger: quietLogger(), CursorSyncInterval: time.Hour})
	if err != nil {
		fmt.Printf("ERR open: %v\n", err)
		os.Exit(2)
	}
	var out sync.Mutex
	say := func(line string) {
		out.Lock()
		defer out.Unlock()
		_, _ = os.Stdout.WriteString(line)
	}
	round := time.Now().UnixNano()
	for ci, name := range []string{"a", "b"} {
		c, err := s.Create(name, uint64(ci+1), wire.Retention{})
		if err != nil {
			say(fmt.Sprintf("ERR create: %v\n", err))
			os.Exit(2)
		}
		for g := range 4 {
			go func() {
				gid := int(round%1000)*10 + g // distinct content per round
				for i := 0; ; i++ {
					data := make([][]byte, 1+(i+g)%5)
					for j := range data {
						data[j] = crashPayload(gid, i, j)
					}
					first, err := c.Append(context.Background(), data)
					if err != nil {
						say(fmt.Sprintf("ERR append: %v\n", err))
						os.Exit(2)
					}
					var sb strings.Builder
					for j, d := range data {
						fmt.Fprintf(&sb, "ACK %s %d %016x\n", name, first+uint64(j), xxhash.Sum64(d))
					}
					say(sb.String())
				}
			}()
		}
		go func() {
			for i := 0; ; i++ {
				pos := c.Tails().Record
				off, err := c.AppendCursor(fmt.Sprint("r", i%3), pos)
				if err != nil {
					say(fmt.Sprintf("ERR cursor: %v\n", err))
					os.Exit(2)
				}
				if i%4 == 3 {
					if err := c.SyncCursors(); err != nil {
						say(fmt.Sprintf("ERR sync cursors: %v\n", err))
						os.Exit(2)
					}
				}
				// Acknowledged only once durable: report after a sync.
				if i%4 == 3 {
					say(fmt.Sprintf("CUR %s %d r%d %d\n", name, off, i%3, pos))
				}
			}
		}()
	}
	select {}
}

// TestCrashRecovery kills a child process that appends with sync in
// several goroutines, reopens its store and checks that every record (and
// synced cursor event) the child acknowledged is intact. Two rounds, so
// the second child also starts from a recovered store.
func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("child process")
	}
	dir := t.TempDir()
	acked := map[string]map[uint64]string{"a": {}, "b": {}}
	type curAck struct {
		stream, cursor string
		off, pos       uint64
	}
	var curs []curAck
	for round := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		roundAcks := 0
		killed := false
		deadline := time.After(30 * time.Second)
		handle := func(line string) {
			f := strings.Fields(line)
			switch {
			case len(f) == 4 && f[0] == "ACK":
				off, _ := strconv.ParseUint(f[2], 10, 64)
				acked[f[1]][off] = f[3]
				roundAcks++
			case len(f) == 5 && f[0] == "CUR":
				off, _ := strconv.ParseUint(f[2], 10, 64)
				pos, _ := strconv.ParseUint(f[4], 10, 64)
				curs = append(curs, curAck{f[1], f[3], off, pos})
			case strings.HasPrefix(line, "ERR"):
				t.Errorf("child: %s", line)
			}
		}
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				handle(line)
				// Kill mid-stream, once plenty of appends were acknowledged.
				if !killed && roundAcks >= 3000 {
					_ = cmd.Process.Kill() // SIGKILL
					killed = true
				}
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("round %d: child acknowledged only %d records in 30s; stderr:\n%s", round, roundAcks, stderr.String())
			}
		}
		_ = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child exited by itself; stderr:\n%s", round, stderr.String())
		}
		t.Logf("round %d: %d records acknowledged before SIGKILL", round, roundAcks)

		s := openTest(t, dir, nil)
		for name, offs := range acked {
			c := s.Get(name)
			if c == nil {
				t.Fatalf("round %d: copy %s missing", round, name)
			}
			all := readAll(t, c)
			if len(all) < len(offs) {
				t.Fatalf("round %d: copy %s holds %d records, %d acknowledged", round, name, len(all), len(offs))
			}
			for off, hash := range offs {
				if off >= uint64(len(all)) {
					t.Fatalf("round %d: acknowledged record %s/%d is past the tail %d", round, name, off, len(all))
				}
				if got := fmt.Sprintf("%016x", xxhash.Sum64(all[off].Data)); got != hash {
					t.Fatalf("round %d: record %s/%d hash %s, acknowledged %s", round, name, off, got, hash)
				}
			}
			if c.Digest() != refDigest(0, 0, dataOf(all)) {
				t.Fatalf("round %d: copy %s digest does not match its records", round, name)
			}
		}
		for _, a := range curs {
			evs, err := s.Get(a.stream).ReadCursorEvents(a.off, 1, a.off+1)
			if err != nil || len(evs) != 1 || evs[0].Cursor != a.cursor || evs[0].Position != a.pos {
				t.Fatalf("round %d: synced cursor event %s/%d: %v %+v, want %s at %d", round, a.stream, a.off, err, evs, a.cursor, a.pos)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
