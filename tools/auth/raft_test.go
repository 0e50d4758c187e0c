package auth_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/auth"
)

// raftTLS is the pair of configurations Dragonboat builds from
// --raft-ca, --raft-cert and --raft-key (lni/goutils netutil): the
// listener demands a client certificate of the CA; the dialler checks the
// peer against the host of the address it dialled.
func raftTLS(t *testing.T, d *auth.Deployment) (server, client *tls.Config) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(d.RaftCert, d.RaftKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(d.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in ca.pem")
	}
	return &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, Certificates: []tls.Certificate{cert}, ClientCAs: pool},
		&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}
}

// handshake runs one mutual TLS handshake on loopback, the client naming
// the server serverName; it returns the first side's error.
func handshake(t *testing.T, srvCfg, cliCfg *tls.Config, serverName string) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		srvErr <- c.(*tls.Conn).Handshake()
	}()
	cfg := cliCfg.Clone()
	cfg.ServerName = serverName
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
	if err == nil {
		// TLS 1.3: the server's verdict on the client certificate
		// arrives with the first read.
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			err = nil
		}
		_ = c.Close()
	}
	return errors.Join(err, <-srvErr)
}

// TestRaftCertificate: with Spec.TLS the deployment holds one Raft
// certificate for the coordinators that is both a server and a client
// certificate for every host of Spec.Hosts, so two coordinators complete
// Dragonboat's mutual TLS handshake; a coordinator of another deployment
// (another CA) does not, in either direction.
func TestRaftCertificate(t *testing.T) {
	hosts := []string{"127.0.0.1", "localhost", "coord-1.brook.internal"}
	d, err := auth.Generate(t.TempDir(), auth.Spec{Nodes: []string{"h1"}, TLS: true, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	if d.RaftCert == "" || d.RaftKey == "" {
		t.Fatalf("no raft certificate in the deployment: %+v", d)
	}
	for _, f := range []string{d.RaftCert, d.RaftKey} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
		if !slices.Contains(d.Files(), f) {
			t.Errorf("Files() misses %s", f)
		}
	}
	back, err := auth.Load(d.Dir)
	if err != nil || back.RaftCert != d.RaftCert || back.RaftKey != d.RaftKey {
		t.Fatalf("Load: %v, raft files %q %q", err, back.RaftCert, back.RaftKey)
	}

	srv, cli := raftTLS(t, d)
	leaf, err := x509.ParseCertificate(srv.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		for _, h := range hosts {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: cli.RootCAs, DNSName: h, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("raft certificate for %s, usage %v: %v", h, usage, err)
			}
		}
	}
	if err := handshake(t, srv, cli, "127.0.0.1"); err != nil {
		t.Errorf("two coordinators of the deployment: %v", err)
	}
	if err := handshake(t, srv, cli, "10.9.9.9"); err == nil {
		t.Error("a peer dialled at a host outside the certificate was accepted")
	}

	other, err := auth.Generate(t.TempDir(), auth.Spec{Nodes: []string{"h1"}, TLS: true, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	osrv, ocli := raftTLS(t, other)
	if err := handshake(t, srv, ocli, "127.0.0.1"); err == nil {
		t.Error("a coordinator of another CA dialled in")
	}
	if err := handshake(t, osrv, cli, "127.0.0.1"); err == nil {
		t.Error("a coordinator dialled a peer of another CA")
	}

	// A principal's NATS client certificate is no Raft server certificate.
	p := mustPrincipal(t, d, auth.Coordinator)
	pc, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	bad := srv.Clone()
	bad.Certificates = []tls.Certificate{pc}
	if err := handshake(t, bad, cli, "127.0.0.1"); err == nil {
		t.Error("a client-only certificate served the raft transport")
	}
}
