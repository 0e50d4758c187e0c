package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"time"
)

// certValidity is how long the development certificates last.
const certValidity = 2 * 365 * 24 * time.Hour

// DefaultHosts are the server and Raft certificates' SANs when Spec.Hosts
// is empty.
var DefaultHosts = []string{"127.0.0.1", "localhost"}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// generateTLS writes the CA certificate, the server's certificate and key,
// the coordinators' Raft certificate and key, and one client certificate
// and key per principal, and records their paths in d. The CA's key is not written.
func generateTLS(d *Deployment, spec Spec) error {
	d.Hosts = clone(spec.Hosts)
	if len(d.Hosts) == 0 {
		d.Hosts = clone(DefaultHosts)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("auth: ca key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "brook development CA", Organization: []string{"brook"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("auth: ca certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("auth: ca certificate: %w", err)
	}
	ca := issuer{cert: caCert, key: caKey}
	d.CAFile = filepath.Join(d.Dir, CAFile)
	if err := writeSecret(d.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})); err != nil {
		return err
	}

	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "brook nats-server", Organization: []string{"brook"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	addSANs(server, d.Hosts)
	d.ServerCert = filepath.Join(d.Dir, ServerCertFile)
	d.ServerKey = filepath.Join(d.Dir, ServerKeyFile)
	if err := ca.issue(server, d.ServerCert, d.ServerKey); err != nil {
		return err
	}

	// One certificate for every coordinator's Raft transport: Dragonboat
	// presents it both as the server and as the client of a peer
	// connection, and a dialling peer checks it against the host of the
	// address it dialled.
	raft := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "brook coordinator raft", Organization: []string{"brook"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	addSANs(raft, d.Hosts)
	d.RaftCert = filepath.Join(d.Dir, RaftCertFile)
	d.RaftKey = filepath.Join(d.Dir, RaftKeyFile)
	if err := ca.issue(raft, d.RaftCert, d.RaftKey); err != nil {
		return err
	}

	for i := range d.Principals {
		p := &d.Principals[i]
		p.CertFile = filepath.Join(d.Dir, p.Name+"-cert.pem")
		p.KeyFile = filepath.Join(d.Dir, p.Name+"-key.pem")
		client := &x509.Certificate{
			Subject:     pkix.Name{CommonName: p.Name, Organization: []string{"brook"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := ca.issue(client, p.CertFile, p.KeyFile); err != nil {
			return err
		}
	}
	return nil
}

// addSANs adds hosts (IP addresses or DNS names) to the certificate's
// subject alternative names.
func addSANs(c *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			c.IPAddresses = append(c.IPAddresses, ip)
		} else {
			c.DNSNames = append(c.DNSNames, h)
		}
	}
}

// issue signs tmpl (a leaf) with a new P-256 key and writes the
// certificate and the PKCS #8 key.
func (ca issuer) issue(tmpl *x509.Certificate, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("auth: key: %w", err)
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = ca.cert.NotBefore
	tmpl.NotAfter = ca.cert.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("auth: certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("auth: key %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writeSecret(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return err
	}
	return writeSecret(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(fmt.Sprintf("auth: random serial: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}
