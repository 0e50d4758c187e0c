// Command brook-auth generates a brook deployment's credentials and
// nats-server authorization (issue 13, package tools/auth): one NKEY seed
// per principal, host-keys.json for the coordinators, auth.conf (an include
// file with the accounts, users and permissions), nats.conf (a complete
// main file) and, with --tls, a development CA and certificates.
//
//	go run ./tools/cmd/brook-auth --dir .brook-auth --nodes h1,h2,h3,h4 [--tls] [--owner UID:GID]
//
// --owner gives the directory and its files to the user the services run as
// (the compose stack's containers: 65532:65532); it needs root.
//
// It refuses to replace an existing deployment unless --force. Keep the
// directory out of git (.brook-auth/ and deploy/secrets/ are ignored).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/brook-streams/brook/tools/auth"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "brook-auth:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("brook-auth", flag.ContinueOnError)
	dir := fs.String("dir", ".brook-auth", "deployment directory (created 0700; keep it out of git)")
	nodes := fs.String("nodes", "", "stream host node names, comma-separated (required)")
	coordinators := fs.Int("coordinators", 3, "coordinator replicas (they share one principal; for the record)")
	useTLS := fs.Bool("tls", false, "also generate a development CA, server and client certificates, and require verified client certificates")
	hosts := fs.String("hosts", strings.Join(auth.DefaultHosts, ","), "the server certificate's SANs (IPs or DNS names), comma-separated (--tls)")
	serverDir := fs.String("server-dir", "", "the directory as nats-server sees it, for auth.conf's certificate paths (default: --dir, absolute)")
	port := fs.Int("port", auth.DefaultPort, "nats.conf's listen port")
	force := fs.Bool("force", false, "replace an existing deployment in --dir (every key changes)")
	owner := fs.String("owner", "", "UID:GID to give the directory and its files to, e.g. 65532:65532 for the compose stack's containers (needs root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	spec := auth.Spec{
		Nodes:        split(*nodes),
		Coordinators: *coordinators,
		TLS:          *useTLS,
		ServerDir:    *serverDir,
		Port:         *port,
		Overwrite:    *force,
	}
	if *useTLS {
		spec.Hosts = split(*hosts)
	}
	if len(spec.Nodes) == 0 {
		return errors.New("--nodes is required (e.g. --nodes h1,h2,h3,h4)")
	}
	uid, gid := -1, -1
	if *owner != "" {
		var err error
		if uid, gid, err = auth.ParseOwner(*owner); err != nil {
			return fmt.Errorf("--owner: %w", err)
		}
	}
	d, err := auth.Generate(*dir, spec)
	if errors.Is(err, auth.ErrExists) {
		return fmt.Errorf("%w (use --force to replace it: every key changes)", err)
	}
	if err != nil {
		return err
	}
	if uid >= 0 {
		if err := auth.Chown(d, uid, gid); err != nil {
			return fmt.Errorf("--owner %s: %w", *owner, err)
		}
	}
	report(out, d)
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func report(out io.Writer, d *auth.Deployment) {
	p := func(format string, a ...any) { _, _ = fmt.Fprintf(out, format, a...) }
	p("wrote %s (mode 0700):\n", d.Dir)
	for _, f := range d.Files() {
		p("  %s\n", f)
	}
	p("\nprincipals:\n")
	for _, pr := range d.Principals {
		p("  %-18s %-5s %s  inbox %s\n", pr.Name, pr.Account, pr.PublicKey, pr.InboxPrefix)
	}
	p("\nrun: nats-server -c %s\n", d.NATSConf)
	p("or include %s from your own main file (it must set max_payload: %d, and should set %s)\n", d.AuthConf, d.Limits.MaxPayload,
		strings.TrimSpace(auth.ServerSettings))
	p("coordinators: --host-keys %s\n", d.HostKeys)
	if d.TLS {
		p("TLS: CA %s, server certificate for %s; the CA's key was not kept\n", d.CAFile, strings.Join(d.Hosts, ", "))
	}
}
