package server

import (
	"encoding/json"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func advisory(name, user string) disconnectAdvisory {
	var ev disconnectAdvisory
	ev.Server.ID = "S1"
	ev.Client.ID = 7
	ev.Client.Name = name
	ev.Client.User = user
	return ev
}

// TestAdvisoryHost is the rule of which advisory counts for which host:
// without host keys the name decides; with them, only the node's own key.
func TestAdvisoryHost(t *testing.T) {
	const k1, k2 = "UKEYOFH1", "UKEYOFH2"
	keys := map[string]string{"h1": k1, "h2": k2}
	for _, tc := range []struct {
		what    string
		ev      disconnectAdvisory
		keys    map[string]string
		node    string
		ok, why bool
	}{
		{"not a host", advisory("brook-client", k1), keys, "", false, false},
		{"not a host, no keys", advisory("brook-coordinator:1", ""), nil, "", false, false},
		{"bad node name", advisory(HostConnPrefix+"h.1", k1), keys, "", false, false},
		{"name only, no keys", advisory(HostConnPrefix+"h1", "brook"), nil, "h1", true, false},
		{"own key", advisory(HostConnPrefix+"h1", k1), keys, "h1", true, false},
		{"another host's key", advisory(HostConnPrefix+"h1", k2), keys, "h1", false, true},
		{"no key (password user)", advisory(HostConnPrefix+"h1", ""), keys, "h1", false, true},
		{"a user named like the key's host", advisory(HostConnPrefix+"h1", "h1"), keys, "h1", false, true},
		{"node without a key", advisory(HostConnPrefix+"h3", k1), keys, "h3", false, true},
		{"empty key file", advisory(HostConnPrefix+"h1", k1), map[string]string{}, "h1", false, true},
	} {
		node, why, ok := advisoryHost(tc.ev, tc.keys)
		if node != tc.node || ok != tc.ok || (why != "") != tc.why {
			t.Errorf("%s: node %q ok %v why %q; want node %q ok %v, a reason %v", tc.what, node, ok, why, tc.node, tc.ok, tc.why)
		}
	}
}

// TestAdvisoryCarriesHostKey checks on a real nats-server that the
// disconnect advisory of an nkey-authenticated connection carries its
// public key where advisoryHost reads it, so a host's own advisory counts
// and an impostor's (another key under the host's name) does not.
func TestAdvisoryCarriesHostKey(t *testing.T) {
	host, impostor := userKey(t), userKey(t)
	brook := natsserver.NewAccount("BROOK")
	sys := natsserver.NewAccount("SYS")
	s, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Accounts:      []*natsserver.Account{brook, sys},
		Nkeys:         []*natsserver.NkeyUser{{Nkey: host.pub, Account: brook}, {Nkey: impostor.pub, Account: brook}},
		Users:         []*natsserver.User{{Username: "sys", Password: "sys", Account: sys}},
		SystemAccount: "SYS",
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)

	sysnc, err := nats.Connect(s.ClientURL(), nats.UserInfo("sys", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	defer sysnc.Close()
	sub, err := sysnc.SubscribeSync(DisconnectSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := sysnc.Flush(); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"h1": host.pub}
	for _, tc := range []struct {
		who  nkeyUser
		want bool
	}{{host, true}, {impostor, false}} {
		nc, err := nats.Connect(s.ClientURL(), nats.Name(HostConnPrefix+"h1"), nats.Nkey(tc.who.pub, tc.who.kp.Sign))
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no disconnect advisory: %v", err)
		}
		var ev disconnectAdvisory
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Client.User != tc.who.pub {
			t.Fatalf("advisory's client.user %q, want the connection's nkey %s:\n%s", ev.Client.User, tc.who.pub, m.Data)
		}
		if node, why, ok := advisoryHost(ev, keys); node != "h1" || ok != tc.want {
			t.Fatalf("advisory of %s: node %q ok %v (%s), want ok %v", tc.who.pub, node, ok, why, tc.want)
		}
	}
}

type nkeyUser struct {
	kp  nkeys.KeyPair
	pub string
}

func userKey(t *testing.T) nkeyUser {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return nkeyUser{kp, pub}
}
