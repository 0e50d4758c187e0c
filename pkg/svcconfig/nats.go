package svcconfig

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
)

// NATSAuth is how a service proves who it is to nats-server and checks the
// server in turn: an nkey seed file (--nats-nkey) and TLS files (--nats-ca,
// --nats-cert, --nats-key). All empty is an unauthenticated plain
// connection, or one whose user and password the URL carries.
type NATSAuth struct {
	// Nkey is the path of the principal's nkey seed file. The seed itself
	// is read when connecting and never logged.
	Nkey string `koanf:"nats-nkey"`
	// CA is a PEM file of the certificates that may sign the server's.
	CA string `koanf:"nats-ca"`
	// Cert and Key are the client's certificate and private key (PEM),
	// both or neither.
	Cert string `koanf:"nats-cert"`
	Key  string `koanf:"nats-key"`
}

// AddNATSAuthFlags defines --nats-nkey, --nats-ca, --nats-cert and
// --nats-key on fs, all empty by default.
func AddNATSAuthFlags(fs *pflag.FlagSet) {
	fs.String("nats-nkey", "", "nkey seed file this service authenticates to NATS with (written by brook-auth); empty: none")
	fs.String("nats-ca", "", "PEM file of the CA certificates that sign the NATS server's certificate (enables TLS)")
	fs.String("nats-cert", "", "PEM client certificate for NATS TLS (with --nats-key)")
	fs.String("nats-key", "", "PEM private key of --nats-cert")
}

// Validate checks that the certificate and its key come together.
func (a NATSAuth) Validate() error {
	if (a.Cert == "") != (a.Key == "") {
		return errors.New("--nats-cert and --nats-key go together: give both or neither")
	}
	return nil
}

// RedactURLs hides the password of every URL in a comma-separated list of
// NATS URLs (as --nats-url takes them), for logs.
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		u = strings.TrimSpace(u)
		if at := strings.LastIndex(u, "@"); at >= 0 {
			if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
				u = u[:scheme+3] + "***" + u[at:]
			} else {
				u = "***" + u[at:]
			}
		}
		parts[i] = u
	}
	return strings.Join(parts, ",")
}

// Options returns the NATS connection options of the settings, for a
// principal whose replies come to inboxPrefix ("" keeps nats.go's _INBOX):
// nats-server allows each principal to subscribe to its own inboxes only,
// so every request the connection makes (nc.Request, nc.NewInbox) must use
// that prefix. The seed file is read here, so a missing or bad seed is an
// error before connecting; the error names the file, never its contents.
func (a NATSAuth) Options(inboxPrefix string) ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(inboxPrefix))
	}
	if a.Nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(a.Nkey)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file %s: %w", a.Nkey, err)
		}
		opts = append(opts, opt)
	}
	if a.CA != "" {
		opts = append(opts, nats.RootCAs(a.CA))
	}
	if a.Cert != "" {
		opts = append(opts, nats.ClientCert(a.Cert, a.Key))
	}
	return opts, nil
}
