package raftstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// testCA is a throwaway certificate authority, like the development CA
// tools/auth generates.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: dir, cert: cert, key: key, file: filepath.Join(dir, "ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// raftFiles issues a certificate for the Raft transport on 127.0.0.1,
// usable as server and as client, as tools/auth's coordinator-raft-cert.
func (ca *testCA) raftFiles(t *testing.T, name string) *TLSFiles {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := &TLSFiles{CA: ca.file, Cert: filepath.Join(ca.dir, name+"-cert.pem"), Key: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, f.Cert, "CERTIFICATE", der)
	writePEM(t, f.Key, "PRIVATE KEY", keyDER)
	return f
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMutualTLS: three replicas whose Raft transport runs Dragonboat's
// mutual TLS with certificates of one CA elect a leader, commit through a
// follower, and every replica applies the entry.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t, "raft CA")
	files := ca.raftFiles(t, "coordinator-raft")
	c := newTLSCluster(t, func(uint64) *TLSFiles { return files })
	leader := c.leader()
	if r := propose(t, c.follower(leader), state.NodeSeen("h1", 1, 100)); r.Err() != nil {
		t.Fatal(r.Err())
	}
	testutil.Eventually(t, 10*time.Second, "every replica applied the entry", func() bool {
		for _, s := range c.stores {
			if nodes, err := s.LocalNodes(); err != nil || !slices.Equal(nodes, []string{"h1"}) {
				return false
			}
		}
		return true
	})
}

// TestMutualTLSRefusesOutsiders: a replica with a certificate of another
// CA, or with no TLS at all, cannot talk with the two others: they elect a
// leader and commit without it, and it never learns the leader nor the
// entry.
func TestMutualTLSRefusesOutsiders(t *testing.T) {
	ca := newTestCA(t, "raft CA")
	good := ca.raftFiles(t, "coordinator-raft")
	foreign := newTestCA(t, "another CA").raftFiles(t, "intruder")
	for name, outsider := range map[string]*TLSFiles{"another CA": foreign, "plain TCP": nil} {
		t.Run(name, func(t *testing.T) {
			c := newTLSCluster(t, func(id uint64) *TLSFiles {
				if id == 3 {
					return outsider
				}
				return good
			})
			var leader uint64
			testutil.Eventually(t, 10*time.Second, "a leader among replicas 1 and 2", func() bool {
				l1, ok1 := c.stores[1].Leader()
				l2, ok2 := c.stores[2].Leader()
				leader = l1
				return ok1 && ok2 && l1 == l2 && l1 != 3
			})
			if r := propose(t, c.stores[leader], state.NodeSeen("h1", 1, 100)); r.Err() != nil {
				t.Fatal(r.Err())
			}
			// Long enough for many heartbeats and election rounds.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				if id, ok := c.stores[3].Leader(); ok {
					t.Fatalf("the outsider learned leader %d", id)
				}
				if nodes, err := c.stores[3].LocalNodes(); err != nil || len(nodes) != 0 {
					t.Fatalf("the outsider applied entries: %v (%v)", nodes, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestTLSFilesChecked: Open refuses incomplete or unreadable TLS files at
// once instead of failing every peer connection, and logs when the
// transport runs mutual TLS.
func TestTLSFilesChecked(t *testing.T) {
	ca := newTestCA(t, "raft CA")
	ok := ca.raftFiles(t, "coordinator-raft")
	other := ca.raftFiles(t, "other")
	addr := testutil.FreeAddrs(t, 1)[0]
	cases := map[string]TLSFiles{
		"no CA":               {Cert: ok.Cert, Key: ok.Key},
		"no key":              {CA: ok.CA, Cert: ok.Cert},
		"key of another":      {CA: ok.CA, Cert: ok.Cert, Key: other.Key},
		"key file as CA":      {CA: ok.Key, Cert: ok.Cert, Key: ok.Key},
		"missing CA file":     {CA: filepath.Join(t.TempDir(), "nope.pem"), Cert: ok.Cert, Key: ok.Key},
		"missing certificate": {CA: ok.CA, Cert: filepath.Join(t.TempDir(), "nope.pem"), Key: ok.Key},
	}
	for name, f := range cases {
		s, err := Open(Config{ReplicaID: 1, RaftAddr: addr, Peers: map[uint64]string{1: addr}, DataDir: t.TempDir(), TLS: &f})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", name)
		}
	}

	var buf testutil.LockedBuffer
	s, err := Open(Config{ReplicaID: 1, RaftAddr: addr, Peers: map[uint64]string{1: addr}, DataDir: t.TempDir(), TLS: ok,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if out := buf.String(); !strings.Contains(out, "raft transport uses mutual TLS") || !strings.Contains(out, "mutual_tls=true") {
		t.Fatalf("no mutual TLS in the log:\n%s", out)
	}
}
