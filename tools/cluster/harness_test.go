package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// helperEnv makes the test binary act as a stand-in service process.
const helperEnv = "BROOK_CLUSTER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperMain()
		return
	}
	dir, err := os.MkdirTemp("", "brook-cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testBinDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// testBinDir holds the binaries the tests build; set by TestMain.
var testBinDir string

// helperMain says hello, waits for SIGTERM, says bye and exits 0.
func helperMain() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	fmt.Printf("hello %s\n", strings.Join(os.Args[1:], " "))
	<-sigs
	fmt.Println("bye")
	os.Exit(0)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// A process started, paused, continued, terminated gracefully, restarted
// (its log keeps both runs) and killed.
func TestProcLifecycle(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	log := filepath.Join(t.TempDir(), "p.log")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := newProc("p", KindOther, "", self, []string{"-test.run=^$", "x"}, append(os.Environ(), helperEnv+"=1"), "", log)
	c := &Cluster{cfg: Config{StopGrace: 5 * time.Second}, log: discardLogger()}

	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, "hello", func() bool { return p.logContains("hello -test.run=^$ x") }); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(p, syscall.SIGSTOP); err != nil || !p.Paused() {
		t.Fatalf("pause: %v paused=%v", err, p.Paused())
	}
	if err := c.Kill(p, syscall.SIGCONT); err != nil || p.Paused() {
		t.Fatalf("continue: %v paused=%v", err, p.Paused())
	}
	firstPid := p.Pid()
	if err := c.Terminate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Running() || !p.logContains("bye") {
		t.Fatalf("after terminate: running=%v log:\n%s", p.Running(), p.LogTail(10))
	}
	if st := p.ExitState(); st == nil || st.ExitCode() != 0 {
		t.Fatalf("exit state %v, want exit 0 after a graceful stop", st)
	}
	if bad, _ := p.unexpectedExit(); bad {
		t.Fatal("a terminated process counts as an unexpected exit")
	}

	if err := c.Restart(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == firstPid || p.Starts() != 2 {
		t.Fatalf("restart: pid %d (was %d), starts %d", p.Pid(), firstPid, p.Starts())
	}
	if err := waitFor(ctx, "start #2 in log", func() bool { return p.logContains("start #2 of p") }); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after SIGKILL returned")
	}
	if st := p.ExitState(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit state %v, want killed", st)
	}
	if err := c.Kill(p, syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal after exit: %v, want ErrProcessDone", err)
	}
}

// A process that dies by itself is reported by the cluster's waits instead
// of leaving them to time out.
func TestUnexpectedExitIsReported(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	log := filepath.Join(t.TempDir(), "p.log")
	p := newProc("crasher", KindOther, "", "/bin/sh", []string{"-c", "echo boom; exit 3"}, os.Environ(), "", log)
	c := &Cluster{coords: []*Proc{p}, log: discardLogger()}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	err := c.poll(ctx, "nothing", func(context.Context) (bool, error) { return false, nil })
	if err == nil || !strings.Contains(err.Error(), "crasher exited unexpectedly") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("poll: %v, want the crash with its log", err)
	}
}

// The embedded server has the conventions' accounts: services as brook,
// and the system account hears BROOK's disconnect advisories with the
// client name.
func TestNATSAccountsAndDisconnectAdvisory(t *testing.T) {
	n, err := StartNATS(filepath.Join(t.TempDir(), "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)

	sys, err := nats.Connect(n.SysURL())
	if err != nil {
		t.Fatalf("connect sys: %v", err)
	}
	defer sys.Close()
	adv, err := sys.SubscribeSync("$SYS.ACCOUNT." + BrookAccount + ".DISCONNECT")
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect("nats://brook:wrong@" + n.Addr()); err == nil {
		t.Fatal("connected with a wrong password")
	}
	nc, err := nats.Connect(n.URL(), nats.Name("brook-streamhost:h9"))
	if err != nil {
		t.Fatalf("connect brook: %v", err)
	}
	nc.Close()
	m, err := adv.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no disconnect advisory: %v", err)
	}
	var body struct {
		Client struct {
			Name string `json:"name"`
		} `json:"client"`
	}
	if err := json.Unmarshal(m.Data, &body); err != nil || body.Client.Name != "brook-streamhost:h9" {
		t.Fatalf("advisory %s: name %q, err %v", m.Data, body.Client.Name, err)
	}
}

// A client through a host's proxy loses NATS on Cut (and cannot come back
// while cut) and reconnects on Heal.
func TestProxyCutAndHeal(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	n, err := StartNATS("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	px, err := NewProxy(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })

	direct, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	sub, err := direct.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}

	disconnected := make(chan struct{}, 16)
	reconnected := make(chan struct{}, 16)
	nc, err := nats.Connect(userURL(BrookUser, BrookPassword, px.Addr()),
		nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.RequestWithContext(ctx, "echo", []byte("a")); err != nil {
		t.Fatalf("request through proxy: %v", err)
	}

	px.Cut()
	select {
	case <-disconnected:
	case <-ctx.Done():
		t.Fatal("client not disconnected by the cut")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := nc.RequestWithContext(short, "echo", []byte("b")); err == nil {
		t.Fatal("request went through a cut proxy")
	}
	if nc.IsConnected() {
		t.Fatal("client connected through a cut proxy")
	}

	px.Heal()
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("client did not reconnect after heal")
	}
	if m, err := nc.RequestWithContext(ctx, "echo", []byte("c")); err != nil || string(m.Data) != "c" {
		t.Fatalf("request after heal: %v", err)
	}
}
