// Package auth generates brook's "trust on the bus" deployment (issue 13):
// one NKEY per principal, and a nats-server configuration that lets each
// principal publish and subscribe to exactly the subjects of its role.
//
// Generate writes, into one directory (mode 0700, to be kept out of git):
//
//   - a seed file (0600) per principal: client.nk, admin.nk, coordinator.nk,
//     coordinator-sys.nk, attention.nk and host-<node>.nk, for
//     nats.NkeyOptionFromSeed;
//   - host-keys.json, node -> the host's public user nkey, for the
//     coordinators' --host-keys (a disconnect advisory counts only when its
//     client.nkey is the key of the node its client.name claims);
//   - auth.conf, a nats-server include file: accounts BROOK and SYS with
//     every principal as an nkey user and its permissions, account limits,
//     system_account: SYS and, with Spec.TLS, the tls block. It holds no
//     listen settings, so a harness or an operator's own main file can
//     `include "auth.conf"`; the including file must set max_payload at
//     least Limits.MaxPayload (the server's limit caps the account's);
//   - nats.conf, a complete main file: port, max_payload, ServerSettings
//     and the include;
//   - deployment.json, the Deployment (paths and public keys, no secrets),
//     which Load reads back;
//   - with Spec.TLS, a development CA (ca.pem; its key is not kept: add a
//     node by generating a new deployment), the server's certificate and key
//     (server-cert.pem, server-key.pem) for Spec.Hosts, the coordinators'
//     Raft certificate and key (coordinator-raft-cert.pem,
//     coordinator-raft-key.pem: one pair for every replica, server and
//     client usage, for Spec.Hosts, which must then name the coordinators'
//     Raft hosts too; Dragonboat checks a peer against the host it
//     dialled and requires a client certificate of the CA), and one client
//     certificate and key per principal (<principal>-cert.pem,
//     <principal>-key.pem). The server verifies client certificates
//     (verify: true) but identity stays the NKEY: a certificate only proves
//     the CA issued it.
//
// Permissions (see Permissions) are enforced by nats-server: every role
// subscribes only to its own inbox prefix (Principal.InboxPrefix, for
// nats.CustomInboxPrefix), no role may publish to _INBOX.>, and responders
// answer through allow_responses (one reply per request received, within
// the server's default two minutes).
package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/nats-io/nkeys"

	"github.com/brook-streams/brook/pkg/wire"
)

// The accounts.
const (
	AccountBrook = "BROOK"
	AccountSys   = "SYS"
)

// The principals' names (a host's is HostPrincipal(node)). A principal's
// seed file is its name + ".nk".
const (
	Client         = "client"
	Admin          = "admin"
	Coordinator    = "coordinator"
	CoordinatorSys = "coordinator-sys"
	Attention      = "attention"
	hostPrefix     = "host-"
)

// The generated files' names.
const (
	AuthConfFile   = "auth.conf"
	NATSConfFile   = "nats.conf"
	HostKeysFile   = "host-keys.json"
	DeploymentFile = "deployment.json"
	CAFile         = "ca.pem"
	ServerCertFile = "server-cert.pem"
	ServerKeyFile  = "server-key.pem"
	RaftCertFile   = "coordinator-raft-cert.pem"
	RaftKeyFile    = "coordinator-raft-key.pem"
)

// DefaultPort is nats.conf's listen port.
const DefaultPort = 4222

// HostPrincipal is the principal name of stream host node.
func HostPrincipal(node string) string { return hostPrefix + node }

// Limits are account limits nats-server enforces in config mode (the
// accounts' limits block). MaxSubscriptions and MaxPayload apply to each
// connection of the account, MaxConnections to the account as a whole.
// Per-user limits exist only with JWT accounts (operator mode), which this
// configuration does not use.
type Limits struct {
	MaxConnections   int `json:"max_connections"`
	MaxSubscriptions int `json:"max_subscriptions"`
	MaxPayload       int `json:"max_payload"`
}

// DefaultLimits are account BROOK's limits when Spec.Limits is zero. A host
// holds two subscriptions per owned stream (its publishes, fetches and
// cursor commits on one, its followers' replication on the other).
var DefaultLimits = Limits{MaxConnections: 4096, MaxSubscriptions: 65536, MaxPayload: 8 << 20}

// SysLimits are account SYS's limits: the advisory listeners subscribe to
// two subjects each and publish nothing.
var SysLimits = Limits{MaxConnections: 64, MaxSubscriptions: 16, MaxPayload: 4096}

// Spec describes a deployment.
type Spec struct {
	// Nodes are the stream hosts' node names (wire.ValidName), one
	// principal each. At least one.
	Nodes []string
	// Coordinators is the number of coordinator replicas, for the record
	// only: they all share one principal (and one advisory principal).
	Coordinators int
	// TLS also generates a development CA and certificates, and requires
	// verified client certificates in auth.conf.
	TLS bool
	// Hosts are the server and Raft certificates' SANs (IP addresses or
	// DNS names): the names clients dial nats-server by, and the hosts of
	// the coordinators' Raft addresses; default 127.0.0.1 and localhost.
	Hosts []string
	// ServerDir is the deployment directory as nats-server will see it,
	// used for the certificate paths in auth.conf (nats-server resolves
	// them against its working directory, not the config file's); default
	// the absolute path of Generate's dir.
	ServerDir string
	// Port is nats.conf's listen port; default DefaultPort.
	Port int
	// Limits are account BROOK's limits; zero fields take DefaultLimits'.
	Limits Limits
	// Overwrite lets Generate replace an existing deployment in dir.
	// Files of the old one that the new one does not write (a removed
	// node's seed) are left; their keys are no longer in auth.conf.
	Overwrite bool
}

// Permissions of one principal, as in the server's permissions block.
type Permissions struct {
	PubAllow       []string `json:"pub_allow,omitempty"`
	PubDeny        []string `json:"pub_deny,omitempty"`
	SubAllow       []string `json:"sub_allow,omitempty"`
	AllowResponses bool     `json:"allow_responses,omitempty"`
}

// Principal is one generated identity.
type Principal struct {
	Name        string `json:"name"`
	Node        string `json:"node,omitempty"` // hosts only
	Account     string `json:"account"`
	InboxPrefix string `json:"inbox_prefix"` // for nats.CustomInboxPrefix
	// PublicKey is the user nkey (U...), SeedFile the absolute path of its
	// seed (for nats.NkeyOptionFromSeed).
	PublicKey   string      `json:"public_key"`
	SeedFile    string      `json:"seed_file"`
	Permissions Permissions `json:"permissions"`
	// CertFile and KeyFile are the client certificate and key (TLS only).
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
}

// Deployment is what Generate wrote; every path is absolute.
type Deployment struct {
	Dir      string `json:"dir"`
	AuthConf string `json:"auth_conf"`
	NATSConf string `json:"nats_conf"`
	HostKeys string `json:"host_keys"`
	// Nodes in Spec order; Principals in the order auth.conf lists them.
	Nodes      []string    `json:"nodes"`
	Principals []Principal `json:"principals"`
	Limits     Limits      `json:"limits"`
	Port       int         `json:"port"`
	// TLS only: the CA certificate and the server's certificate and key.
	TLS        bool     `json:"tls"`
	Hosts      []string `json:"hosts,omitempty"`
	CAFile     string   `json:"ca_file,omitempty"`
	ServerCert string   `json:"server_cert,omitempty"`
	ServerKey  string   `json:"server_key,omitempty"`
	// TLS only: the coordinators' Raft certificate and key (for
	// --raft-cert and --raft-key, with CAFile as --raft-ca), valid as a
	// server and as a client certificate for Hosts.
	RaftCert string `json:"raft_cert,omitempty"`
	RaftKey  string `json:"raft_key,omitempty"`
}

// Principal returns the principal named name.
func (d *Deployment) Principal(name string) (Principal, bool) {
	for _, p := range d.Principals {
		if p.Name == name {
			return p, true
		}
	}
	return Principal{}, false
}

// Host returns node's principal.
func (d *Deployment) Host(node string) (Principal, bool) {
	return d.Principal(HostPrincipal(node))
}

// HostKeyMap is host-keys.json's content: node -> public nkey.
func (d *Deployment) HostKeyMap() map[string]string {
	m := make(map[string]string, len(d.Nodes))
	for _, p := range d.Principals {
		if p.Node != "" {
			m[p.Node] = p.PublicKey
		}
	}
	return m
}

// ErrExists is returned by Generate for a directory that already holds a
// deployment, unless Spec.Overwrite.
var ErrExists = errors.New("auth: the directory already holds a deployment")

// Roles returns the principals of a deployment with nodes, with its account, inbox prefix and
// permissions (no keys), in auth.conf's order.
func Roles(nodes []string) []Principal {
	ps := []Principal{
		{Name: Client, Account: AccountBrook, InboxPrefix: "_INBOX.client", Permissions: ClientPermissions()},
		{Name: Admin, Account: AccountBrook, InboxPrefix: "_INBOX.admin", Permissions: AdminPermissions()},
		{Name: Coordinator, Account: AccountBrook, InboxPrefix: "_INBOX.coord", Permissions: CoordinatorPermissions()},
		{Name: Attention, Account: AccountBrook, InboxPrefix: "_INBOX.attention", Permissions: AttentionPermissions()},
	}
	for _, n := range nodes {
		ps = append(ps, Principal{Name: HostPrincipal(n), Node: n, Account: AccountBrook,
			InboxPrefix: "_INBOX.host." + n, Permissions: HostPermissions(n)})
	}
	return append(ps, Principal{Name: CoordinatorSys, Account: AccountSys, InboxPrefix: "_INBOX.coordsys",
		Permissions: CoordinatorSysPermissions()})
}

// noInbox is every BROOK role's publish deny list: replies travel only
// through allow_responses.
var noInbox = []string{"_INBOX.>"}

var clientPub = []string{
	"brook.s.*.pub", "brook.s.*.pubb", "brook.s.*.fetch", "brook.s.*.commit",
	"brook.admin.stream.info", "brook.admin.stream.list", "brook.admin.cluster.info",
	"brook.attention.list",
}

// ownerNotices is what clients subscribe to besides their inbox: a new
// owner's announcement (wire.OwnerNoticeSubject), a hint to retry at once.
const ownerNotices = "brook.s.*.owner.*"

// ClientPermissions are the applications': the data plane and the
// read-only admin verbs.
func ClientPermissions() Permissions {
	return Permissions{PubAllow: clone(clientPub), PubDeny: clone(noInbox), SubAllow: []string{"_INBOX.client.>", ownerNotices}}
}

// AdminPermissions are the operators': the client's and every admin verb.
func AdminPermissions() Permissions {
	return Permissions{PubAllow: append(clone(clientPub), "brook.admin.>"), PubDeny: clone(noInbox),
		SubAllow: []string{"_INBOX.admin.>", ownerNotices}}
}

// HostPermissions are stream host node's.
func HostPermissions(node string) Permissions {
	return Permissions{
		PubAllow: []string{
			"brook.hb." + node, "brook.assignments.pull", "brook.host." + node + ".leave",
			"brook.s.*.repl.*." + node, "brook.s.*.owner." + node, "brook.hostrepl.*." + node,
		},
		PubDeny: clone(noInbox),
		SubAllow: []string{
			"brook.s.>", "brook.assign." + node, wire.SealSubject(node), wire.SealBatchSubject(node), "brook.host." + node + ".handoff", "_INBOX.host." + node + ".>",
			"brook.hostrepl." + node + ".*", wire.HostProbeSubject(node),
		},
		AllowResponses: true,
	}
}

// CoordinatorPermissions are the coordinators' (all replicas share them).
func CoordinatorPermissions() Permissions {
	return Permissions{
		PubAllow: []string{"brook.assign.*", wire.SealSubject("*"), wire.SealBatchSubject("*"), "brook.host.*.handoff", wire.HostProbeSubject("*"), "brook.s.*.fetch"},
		PubDeny:  clone(noInbox),
		SubAllow: []string{
			"brook.admin.>", "brook.assignments.pull", "brook.hb.*", "brook.host.*.leave", "_INBOX.coord.>",
		},
		AllowResponses: true,
	}
}

// AttentionPermissions are the attention service's: it reads heartbeats
// and change notices, pulls the coordinators' stream list and cluster
// info, and answers brook.attention.list.
func AttentionPermissions() Permissions {
	return Permissions{
		PubAllow:       []string{"brook.admin.stream.list", "brook.admin.cluster.info"},
		PubDeny:        clone(noInbox),
		SubAllow:       []string{"brook.hb.*", "brook.assign.*", "brook.attention.list", "_INBOX.attention.>"},
		AllowResponses: true,
	}
}

// CoordinatorSysPermissions are the coordinators' advisory listener's, in
// the system account: BROOK's connect and disconnect advisories, and
// nothing else.
func CoordinatorSysPermissions() Permissions {
	return Permissions{
		PubDeny:  []string{">"},
		SubAllow: []string{"$SYS.ACCOUNT.BROOK.DISCONNECT", "$SYS.ACCOUNT.BROOK.CONNECT"},
	}
}

func clone(s []string) []string { return append([]string(nil), s...) }

// Generate creates a deployment for spec in dir (created with mode 0700).
func Generate(dir string, spec Spec) (*Deployment, error) {
	if len(spec.Nodes) == 0 {
		return nil, errors.New("auth: no nodes")
	}
	seen := map[string]bool{}
	for _, n := range spec.Nodes {
		if err := wire.ValidName("node", n); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		if seen[n] {
			return nil, fmt.Errorf("auth: node %s listed twice", n)
		}
		seen[n] = true
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if !spec.Overwrite {
		for _, f := range []string{DeploymentFile, AuthConfFile} {
			if _, err := os.Stat(filepath.Join(abs, f)); err == nil {
				return nil, fmt.Errorf("%w: %s", ErrExists, filepath.Join(abs, f))
			}
		}
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	d := &Deployment{
		Dir:      abs,
		AuthConf: filepath.Join(abs, AuthConfFile),
		NATSConf: filepath.Join(abs, NATSConfFile),
		HostKeys: filepath.Join(abs, HostKeysFile),
		Nodes:    clone(spec.Nodes),
		Limits:   withDefaults(spec.Limits),
		Port:     spec.Port,
		TLS:      spec.TLS,
	}
	if d.Port == 0 {
		d.Port = DefaultPort
	}
	for _, p := range Roles(spec.Nodes) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("auth: create nkey: %w", err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		p.PublicKey, err = kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		p.SeedFile = filepath.Join(abs, p.Name+".nk")
		// Seed returns the key pair's own bytes, which Wipe clears.
		err = writeSecret(p.SeedFile, append(append([]byte(nil), seed...), '\n'))
		kp.Wipe()
		if err != nil {
			return nil, err
		}
		d.Principals = append(d.Principals, p)
	}
	if spec.TLS {
		if err := generateTLS(d, spec); err != nil {
			return nil, err
		}
	}
	serverDir := spec.ServerDir
	if serverDir == "" {
		serverDir = abs
	}
	if err := writeSecret(d.AuthConf, []byte(authConf(d, serverDir))); err != nil {
		return nil, err
	}
	if err := writeSecret(d.NATSConf, []byte(natsConf(d))); err != nil {
		return nil, err
	}
	keys, err := json.MarshalIndent(d.HostKeyMap(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if err := writeSecret(d.HostKeys, append(keys, '\n')); err != nil {
		return nil, err
	}
	man, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if err := writeSecret(filepath.Join(abs, DeploymentFile), append(man, '\n')); err != nil {
		return nil, err
	}
	return d, nil
}

// Load reads the deployment Generate wrote into dir.
func Load(dir string) (*Deployment, error) {
	data, err := os.ReadFile(filepath.Join(dir, DeploymentFile))
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	var d Deployment
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", filepath.Join(dir, DeploymentFile), err)
	}
	return &d, nil
}

// Files lists every file of d, sorted.
func (d *Deployment) Files() []string {
	fs := []string{d.AuthConf, d.NATSConf, d.HostKeys, filepath.Join(d.Dir, DeploymentFile)}
	for _, p := range d.Principals {
		fs = append(fs, p.SeedFile)
		if p.CertFile != "" {
			fs = append(fs, p.CertFile, p.KeyFile)
		}
	}
	if d.TLS {
		fs = append(fs, d.CAFile, d.ServerCert, d.ServerKey)
	}
	if d.RaftCert != "" {
		fs = append(fs, d.RaftCert, d.RaftKey)
	}
	sort.Strings(fs)
	return fs
}

func withDefaults(l Limits) Limits {
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultLimits.MaxConnections
	}
	if l.MaxSubscriptions == 0 {
		l.MaxSubscriptions = DefaultLimits.MaxSubscriptions
	}
	if l.MaxPayload == 0 {
		l.MaxPayload = DefaultLimits.MaxPayload
	}
	return l
}

// writeSecret writes data to path with mode 0600 (also when path existed
// with another mode).
func writeSecret(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("auth: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	return nil
}
