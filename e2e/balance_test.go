package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// owners counts the replicated streams each host owns.
func (e *env) owners(ctx context.Context, hosts []string) (map[string]int, error) {
	list, err := e.cl.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, h := range hosts {
		out[h] = 0
	}
	for _, s := range list.Streams {
		if s.Status == wire.StatusServing && s.Recovery == nil {
			out[s.Assignment.Owner]++
		}
	}
	return out, nil
}

// withinShare reports whether every host of o owns within margin of the
// even share of total (the goal: within 10%).
func withinShare(o map[string]int, total int, margin float64) bool {
	even := float64(total) / float64(len(o))
	for _, c := range o {
		if float64(c) < even*(1-margin) || float64(c) > even*(1+margin) {
			return false
		}
	}
	return true
}

// TestBalanceAfterRejoin: 8 streams of 3 copies on 4 hosts, two owned by
// each; one owner is SIGKILLed under load, its streams fail over to the
// others, and it is restarted. The balancer moves ownership back with
// planned moves until every host owns within 10% of the even share (at
// 8 streams, exactly two each), and every confirmed record of the loaded
// stream is read back.
//
// It catches: a balancer that never moves (ownership never returns), one
// that moves to a host that holds no copy, and moves that lose records.
func TestBalanceAfterRejoin(t *testing.T) {
	e := newEnv(t, opts{coordArgs: []string{"--balance-interval", "300ms"}})
	var hosts []string
	for i := range e.c.Hosts() {
		hosts = append(hosts, e.c.Host(i).Node)
	}
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("bal-%d", i))
		e.createStream(names[i], 3)
	}
	even := func(what string) map[string]int {
		t.Helper()
		var got map[string]int
		e.poll(what, waitLong, func(ctx context.Context) (bool, string, error) {
			o, err := e.owners(ctx, hosts)
			got = o
			if err != nil {
				return false, "", err
			}
			return withinShare(o, len(names), 0.1), fmt.Sprint(o), nil
		})
		return got
	}
	even("two streams owned by every host")
	first := e.info(names[0])
	victim := first.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(names[0], "bal", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, first.Assignment.Epoch)

	e.signal(e.host(victim), syscall.SIGKILL)
	e.poll(victim+" owns nothing", waitLong, func(ctx context.Context) (bool, string, error) {
		o, err := e.owners(ctx, hosts)
		if err != nil {
			return false, "", err
		}
		n := 0
		for _, c := range o {
			n += c
		}
		return o[victim] == 0 && n == len(names), fmt.Sprint(o), nil
	})
	e.restart(e.host(victim))
	back := time.Now()
	got := even("ownership spread back after the rejoin")
	e.logf("every host owns two streams again %v after the restart: %v", time.Since(back).Round(time.Millisecond), got)
	if got[victim] != 2 {
		t.Fatalf("the rejoined %s owns %d", victim, got[victim])
	}
	e.waitConfirms(led, 100, 0)
	e.stopLoad(ld, led)
	e.verify(names[0], led, workload.NewReader(e.cl, names[0], "bal-reader"), workload.CheckConfig{})
	for _, n := range names {
		if i := e.info(n); i.Recovery != nil || !slices.Contains(i.Assignment.Copies(), i.Assignment.Owner) {
			t.Fatalf("%s: %s", n, describe(i))
		}
	}
}
