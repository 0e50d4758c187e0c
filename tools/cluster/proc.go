package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process kinds.
const (
	KindCoordinator = "coordinator"
	KindStreamHost  = "streamhost"
	KindAttention   = "attention"
	KindOther       = "other"
)

// Proc is one service process of the cluster. It can be signalled,
// stopped and started again with the same arguments (same data directory
// and ports), as a restart after a crash would.
type Proc struct {
	// Name is unique in the cluster: "coordinator-1", "h1", "attention".
	Name string
	Kind string
	// Node is the stream host's node id ("h1"), or the coordinator's
	// replica id ("1").
	Node string
	// LogPath receives stdout and stderr of every start.
	LogPath string

	bin  string
	args []string
	env  []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current run ended
	state    *os.ProcessState
	waitErr  error
	starts   int
	expected bool // the harness stopped or killed it on purpose
	paused   bool
	// httpAddr serves /healthz (HTTPAddr); rebinds counts its moves
	// to a fresh port (moveHTTP).
	httpAddr string
	rebinds  int
}

func newProc(name, kind, node, bin string, args, env []string, httpAddr, logPath string) *Proc {
	done := make(chan struct{})
	close(done) // not started: counts as exited
	return &Proc{Name: name, Kind: kind, Node: node, bin: bin, args: args, env: env,
		httpAddr: httpAddr, LogPath: logPath, exited: done}
}

// Args returns the command line arguments (without the binary).
func (p *Proc) Args() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.args...)
}

// HTTPAddr is the address the process serves /healthz (and /metrics) on;
// "" if none. It changes when the harness starts the process again on a
// fresh port because its own was taken (Cluster.restartOnFreshPort).
func (p *Proc) HTTPAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.httpAddr
}

// Rebinds is how many times the process was moved to a fresh HTTP port.
func (p *Proc) Rebinds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rebinds
}

// moveHTTP makes addr the process's HTTP address from its next start on,
// in its arguments too.
func (p *Proc) moveHTTP(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i+1 < len(p.args); i++ {
		if p.args[i] == "--http-addr" && p.args[i+1] == p.httpAddr {
			p.args[i+1] = addr
		}
	}
	p.httpAddr = addr
	p.rebinds++
}

// httpBindFailed reports whether the process's last run could not bind
// its HTTP address: its log since that start says so.
func (p *Proc) httpBindFailed() bool {
	addr := p.HTTPAddr()
	if addr == "" {
		return false
	}
	b, err := os.ReadFile(p.LogPath)
	return err == nil && bindFailed(string(b), addr)
}

// startMarker begins the line start writes to the log before each run.
const startMarker = "=== cluster harness: start #"

// bindFailed reports whether log, after its last start line, has a line
// saying addr could not be bound (as Go's net.Listen puts it: "listen tcp
// 127.0.0.1:8080: bind: address already in use").
func bindFailed(log, addr string) bool {
	if i := strings.LastIndex(log, startMarker); i >= 0 {
		// The start line itself names the address, among the arguments.
		j := strings.IndexByte(log[i:], '\n')
		if j < 0 {
			return false
		}
		log = log[i+j+1:]
	}
	for line := range strings.Lines(log) {
		if strings.Contains(line, addr+": ") && strings.Contains(line, "address already in use") {
			return true
		}
	}
	return false
}

// start runs the process, appending its output to LogPath.
func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		return fmt.Errorf("start %s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: open log: %w", p.Name, err)
	}
	p.starts++
	if _, err := fmt.Fprintf(logf, startMarker+"%d of %s at %s: %s %q\n",
		p.starts, p.Name, time.Now().Format(time.RFC3339Nano), p.bin, p.args); err != nil {
		return fmt.Errorf("start %s: write log: %w", p.Name, errors.Join(err, logf.Close()))
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, errors.Join(err, logf.Close()))
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.state, p.waitErr, p.expected, p.paused = cmd, exited, nil, nil, false, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.state, p.waitErr = cmd.ProcessState, err
		p.mu.Unlock()
		close(exited)
	}()
	// The process writes to its own copies of the log's descriptor (an
	// *os.File is handed over as is, with no copying goroutine), so the
	// harness's copy can go now. The process is tracked already: a caller
	// that gives up on this error still stops it with the cluster.
	if err := logf.Close(); err != nil {
		return fmt.Errorf("start %s: close log: %w", p.Name, err)
	}
	return nil
}

// Pid returns the pid of the current or last run (0 if never started).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is running (a paused one is).
func (p *Proc) Running() bool {
	select {
	case <-p.Exited():
		return false
	default:
		return true
	}
}

// Exited is closed when the current run of the process has ended.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// ExitState returns how the last run ended (nil while running).
func (p *Proc) ExitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Starts returns how many times the process was started.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// unexpectedExit reports whether the process ended without the harness
// stopping it, with its exit state.
func (p *Proc) unexpectedExit() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starts == 0 || p.expected || p.state == nil {
		return false, ""
	}
	return true, p.state.String()
}

// signal sends sig to the process group of the current run.
func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("signal %s: never started", p.Name)
	}
	select {
	case <-p.exited:
		// Already gone (a run that could not bind its port, say): a
		// kill still says the test wants it down, so that no wait
		// starts it again on a fresh port (checkProcs).
		if sig == syscall.SIGKILL || sig == syscall.SIGTERM || sig == syscall.SIGINT {
			p.expected = true
		}
		return fmt.Errorf("signal %s: %w", p.Name, os.ErrProcessDone)
	default:
	}
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT:
		p.expected = true
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	// The process leads its own group (Setpgid), so -pid reaches it and
	// anything it started.
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s with %v: %w", p.Name, sig, err)
	}
	return nil
}

// Paused reports whether the process was stopped with SIGSTOP and not
// continued.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// terminate stops the process gracefully (SIGTERM, continuing it if
// paused), and kills it if it has not exited after grace or when ctx ends.
func (p *Proc) terminate(ctx context.Context, grace time.Duration) error {
	exited := p.Exited()
	if err := p.signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		return err
	}
	_ = p.signal(syscall.SIGCONT) // a paused process cannot handle SIGTERM
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	return p.kill()
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *Proc) kill() error {
	exited := p.Exited()
	if err := p.signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	// SIGKILL cannot be caught; reaping follows promptly.
	<-exited
	return nil
}

// LogTail returns the last n lines of the process's log file.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tail(string(b), n)
}

// Healthy reports whether GET /healthz answers 200 within ctx.
func (p *Proc) Healthy(ctx context.Context) bool {
	addr := p.HTTPAddr()
	if addr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	// The answer is the status alone; a failed close of the drained body
	// changes nothing about it.
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logContains reports whether the log holds s (used by tests).
func (p *Proc) logContains(s string) bool {
	b, err := os.ReadFile(p.LogPath)
	return err == nil && bytes.Contains(b, []byte(s))
}
