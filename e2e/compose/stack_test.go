package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/tools/auth"
)

// composeCmd is how docker-compose is invoked: the standalone
// docker-compose (1.x, what Debian ships) or the `docker compose` v2 plugin.
type composeCmd []string

// findCompose returns the compose command, or why there is none. The
// standalone binary is preferred because it is what the suite was written
// against; the compose file is valid for both.
func findCompose(ctx context.Context) (composeCmd, error) {
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return composeCmd{p}, nil
	}
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err == nil {
		return composeCmd{"docker", "compose"}, nil
	}
	return nil, errors.New("neither docker-compose nor the docker compose plugin is installed")
}

// dockerAnswers reports whether a Docker engine answers `docker info`.
func dockerAnswers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker info: %w: %s", err, bytes.TrimSpace(out))
	}
	// Some clients print their half and exit 0 when the engine is away.
	if len(bytes.TrimSpace(out)) == 0 {
		return errors.New("docker info: no server version")
	}
	return nil
}

// repoRoot is the directory of the workspace's go.work, where the Makefile
// and docker-compose.yml live.
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOWORK").Output()
	if err == nil {
		if gowork := strings.TrimSpace(string(out)); gowork != "" && gowork != "off" {
			return filepath.Dir(gowork), nil
		}
	}
	// Without a go command (or with GOWORK=off) look upwards for go.work.
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.work above the working directory")
		}
		dir = parent
	}
}

// childEnv is the environment of the make and docker-compose children:
// this process's, without the variables of an enclosing make (a make run
// from `make test` must not try to join its parent's job server).
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// buildImages runs `make images-core` in the repository root.
func buildImages(ctx context.Context, root string) error {
	cmd := exec.CommandContext(ctx, "make", "images-core")
	cmd.Dir = root
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make images-core: %w\n%s", err, out)
	}
	return nil
}

// imageExists reports whether the engine has image ref.
func imageExists(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil
}

// freePorts returns n distinct TCP ports that are free on 127.0.0.1 now.
// Holding every listener until all are chosen keeps them distinct; another
// process may still take one before compose binds it (in `make test` the
// other packages' tests pick ports too), which fails the start:
// startStack then starts again with other ports (portTaken).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// stack is one compose project of the repository's docker-compose.yml.
type stack struct {
	t        *testing.T
	compose  composeCmd
	root     string
	project  string
	profiles []string
	files    []string // compose files, relative to root
	env      []string

	natsPort     int
	jaegerUIPort int
	// starts is which start of startStack this project is (from 1).
	starts int
	// secrets is the stack's own credentials (brook-auth's deployment),
	// mounted into every container through BROOK_SECRETS_DIR.
	secrets *auth.Deployment
}

// stackConfig chooses what a stack runs.
type stackConfig struct {
	// Profiles are compose profiles to enable (e.g. "traces").
	Profiles []string
	// OTLPEndpoint is passed to the services as OTEL_EXPORTER_OTLP_ENDPOINT
	// (through BROOK_OTLP_ENDPOINT); empty turns exporting off.
	OTLPEndpoint string
	// TLS generates the credentials with a development CA and adds
	// docker-compose.tls.yml: every connection to nats is TLS.
	TLS bool
	// FirstPorts, when set, are the host ports of the first start
	// (nats, nats http, attention, jaeger UI, jaeger OTLP) instead of
	// free ones: a test passes one that is taken to prove the start is
	// tried again with other ports.
	FirstPorts []int
}

// hostPorts is how many host ports a stack binds (stackConfig.FirstPorts).
const hostPorts = 5

// portTaken reports whether a failed `up` failed because a host port was
// taken between freePorts and compose binding it.
func portTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "address already in use") || strings.Contains(msg, "port is already allocated")
}

// newStack prepares a project with a unique name and free host ports, and
// registers its removal (containers, volumes, network) as a cleanup that
// runs however the test ends, after printing the services' logs if it
// failed.
func newStack(t *testing.T, compose composeCmd, root string, cfg stackConfig, ports []int) (*stack, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("project name: %w", err)
	}
	if ports == nil {
		var err error
		if ports, err = freePorts(hostPorts); err != nil {
			return nil, err
		}
	}
	secrets, err := generateSecrets(filepath.Join(t.TempDir(), "secrets"), cfg.TLS)
	if err != nil {
		return nil, err
	}
	s := &stack{
		t:        t,
		compose:  compose,
		root:     root,
		project:  projectPrefix + hex.EncodeToString(b[:]),
		profiles: cfg.Profiles,
		files:    []string{"docker-compose.yml"},
		// Every variable the compose file reads is set, so nothing from
		// the caller's environment (a BROOK_NATS_PORT of their own, an
		// OTLP endpoint) leaks into the test's stack.
		env: childEnv(
			"BROOK_BIND_ADDR=127.0.0.1",
			"BROOK_NATS_PORT="+strconv.Itoa(ports[0]),
			"BROOK_NATS_HTTP_PORT="+strconv.Itoa(ports[1]),
			"BROOK_ATTENTION_PORT="+strconv.Itoa(ports[2]),
			"BROOK_JAEGER_UI_PORT="+strconv.Itoa(ports[3]),
			"BROOK_JAEGER_OTLP_PORT="+strconv.Itoa(ports[4]),
			"BROOK_OTLP_ENDPOINT="+cfg.OTLPEndpoint,
			"BROOK_SECRETS_DIR="+secrets.Dir,
		),
		natsPort:     ports[0],
		jaegerUIPort: ports[3],
		secrets:      secrets,
	}
	if cfg.TLS {
		s.files = append(s.files, "docker-compose.tls.yml")
	}
	t.Cleanup(s.remove)
	return s, nil
}

// NATSURL is the URL of the stack's published NATS port (no credentials in
// it: see ClientOptions).
func (s *stack) NATSURL() string {
	return fmt.Sprintf("nats://127.0.0.1:%d", s.natsPort)
}

// ClientOptions authenticate a client as principal (auth.Admin for the
// admin verbs, auth.Client for an application) of the stack's deployment.
func (s *stack) ClientOptions(principal string) []client.Option {
	p, ok := s.secrets.Principal(principal)
	if !ok {
		s.t.Fatalf("the stack's deployment has no principal %q", principal)
	}
	opts := []client.Option{client.WithNkeySeedFile(p.SeedFile), client.WithInboxPrefix(p.InboxPrefix)}
	if s.secrets.TLS {
		opts = append(opts, client.WithTLS(s.secrets.CAFile, p.CertFile, p.KeyFile))
	}
	return opts
}

// The user the images run as (deploy/Dockerfile's USER).
const containerUID, containerGID = 65532, 65532

// generateSecrets writes a stack's own credentials into dir with brook-auth's
// generator (make compose-secrets does the same into deploy/secrets), so a
// run never touches a developer's deployment. The containers run as
// 65532:65532 and must read their seeds: as root the files are given to
// that user (brook-auth --owner), as anyone else they are made readable by
// all (dir 0755, files 0644), which exposes them to nobody else since t's
// temporary directory above dir stays 0700.
//
// With useTLS it also writes a development CA and certificates, as make
// compose-secrets-tls does: the server's (all three NATS servers share it)
// names nats1, nats2 and nats3 (which the services dial) and 127.0.0.1 (the
// published ports the test dials), and auth.conf names the files where the
// servers mount them.
func generateSecrets(dir string, useTLS bool) (*auth.Deployment, error) {
	nodes := make([]string, hostCount)
	for i := range nodes {
		nodes[i] = "h" + strconv.Itoa(i+1)
	}
	spec := auth.Spec{Nodes: nodes}
	if useTLS {
		spec.TLS, spec.ServerDir = true, "/etc/secrets"
		spec.Hosts = append(slices.Clone(natsServers), "127.0.0.1", "localhost")
	}
	d, err := auth.Generate(dir, spec)
	if err != nil {
		return nil, fmt.Errorf("generate the stack's credentials: %w", err)
	}
	if os.Geteuid() == 0 {
		return d, auth.Chown(d, containerUID, containerGID)
	}
	if err := os.Chmod(d.Dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range d.Files() {
		if err := os.Chmod(f, 0o644); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// JaegerURL is the base URL of the Jaeger UI and API on its published port.
func (s *stack) JaegerURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d", s.jaegerUIPort)
}

// Network is the project's default network, which every service joins.
func (s *stack) Network() string { return s.project + "_default" }

// run runs a compose subcommand of the project and returns its output.
func (s *stack) run(ctx context.Context, args ...string) (string, error) {
	full := append([]string{}, s.compose[1:]...)
	full = append(full, "-p", s.project)
	for _, f := range s.files {
		full = append(full, "-f", filepath.Join(s.root, f))
	}
	for _, p := range s.profiles {
		full = append(full, "--profile", p)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, s.compose[0], full...)
	cmd.Dir = s.root
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", s.compose[0], strings.Join(full, " "), err, out)
	}
	return string(out), nil
}

// Up starts every service of the project in the background.
func (s *stack) Up(ctx context.Context) error {
	_, err := s.run(ctx, "up", "-d")
	return err
}

// Logs returns the last n lines of every service's log.
func (s *stack) Logs(ctx context.Context, n int) string {
	out, err := s.run(ctx, "logs", "--no-color", "--tail="+strconv.Itoa(n))
	if err != nil {
		return fmt.Sprintf("(logs unavailable: %v)", err)
	}
	return out
}

// remove is the stack's cleanup: logs on failure, then `down -v`, then
// whatever of the project's containers, volumes and network is left (a
// down that failed halfway, a container created outside compose's view).
func (s *stack) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if s.t.Failed() {
		s.t.Logf("docker-compose logs of %s (last 150 lines per service):\n%s", s.project, s.Logs(ctx, 150))
	}
	if _, err := s.run(ctx, "down", "-v", "--remove-orphans", "--timeout", "5"); err != nil {
		s.t.Logf("compose down: %v", err)
	}
	removeProject(ctx, s.project)
	label := "label=com.docker.compose.project=" + s.project
	// Say so when something could not be removed, so a leak is noticed.
	if left := dockerLines(ctx, "ps", "-aq", "--filter", label); len(left) > 0 {
		s.t.Errorf("containers of project %s left behind: %v", s.project, left)
	}
	if left := dockerLines(ctx, "volume", "ls", "-q", "--filter", label); len(left) > 0 {
		s.t.Errorf("volumes of project %s left behind: %v", s.project, left)
	}
}

// projectPrefix starts the name of every project the suite creates.
const projectPrefix = "brooke2e"

// staleAfter is how old a project of the suite must be before a later run
// removes it: far beyond the suite's own timeout, so a run never removes the
// stack of another run still going on the same engine.
const staleAfter = 30 * time.Minute

// sweepStale removes the containers, volumes and networks of projects of
// this suite created more than staleAfter ago: what a run killed before its
// cleanup (a go test timeout panic, a SIGKILL) left behind.
func sweepStale(ctx context.Context, t *testing.T) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--filter", "label=com.docker.compose.project",
		"--format", `{{.ID}} {{.Label "com.docker.compose.project"}}`).Output()
	if err != nil {
		return
	}
	stale := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		id, project, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.HasPrefix(project, projectPrefix) || stale[project] {
			continue
		}
		created, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.Created}}", id).Output()
		if err != nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(created)))
		if err == nil && time.Since(at) > staleAfter {
			stale[project] = true
		}
	}
	for project := range stale {
		t.Logf("removing project %s left behind by an earlier run", project)
		removeProject(ctx, project)
	}
}

// removeProject removes every container, volume and network labelled with
// project, whatever compose knows about them.
func removeProject(ctx context.Context, project string) {
	label := "label=com.docker.compose.project=" + project
	if ids := dockerLines(ctx, "ps", "-aq", "--filter", label); len(ids) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
	}
	if vols := dockerLines(ctx, "volume", "ls", "-q", "--filter", label); len(vols) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"volume", "rm", "-f"}, vols...)...).Run()
	}
	if nets := dockerLines(ctx, "network", "ls", "-q", "--filter", label); len(nets) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"network", "rm"}, nets...)...).Run()
	}
}

// dockerLines runs a docker command and returns the non-empty lines of its
// output (nil on error).
func dockerLines(ctx context.Context, args ...string) []string {
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// docker runs a docker command, returning its combined output on error.
func docker(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Container returns the id of the container of a compose service, found by
// the project and service labels compose puts on it.
func (s *stack) Container(ctx context.Context, service string) (string, error) {
	ids := dockerLines(ctx, "ps", "-aq",
		"--filter", "label=com.docker.compose.project="+s.project,
		"--filter", "label=com.docker.compose.service="+service)
	if len(ids) != 1 {
		return "", fmt.Errorf("service %s of project %s: want one container, found %v", service, s.project, ids)
	}
	return ids[0], nil
}

// Published returns the address on this machine (host:port) where the
// container of service publishes its TCP port: nats2 and nats3 publish
// theirs on ports the engine picks, new on every start.
func (s *stack) Published(ctx context.Context, service string, port int) (string, error) {
	id, err := s.Container(ctx, service)
	if err != nil {
		return "", err
	}
	addrs := dockerLines(ctx, "port", id, strconv.Itoa(port)+"/tcp")
	if len(addrs) == 0 {
		return "", fmt.Errorf("service %s of project %s publishes no port %d", service, s.project, port)
	}
	return addrs[0], nil
}

// errNoAnswer is getJSON's error for a request that got no answer, or one
// other than 200 OK: worth asking again.
var errNoAnswer = errors.New("no answer")

// getJSON GETs u and decodes its 200 answer into v.
func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", u, errNoAnswer, err)
	}
	defer func() { _ = resp.Body.Close() }() // a read-only body: nothing to act on
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %w: status %s", u, errNoAnswer, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", u, err)
	}
	return nil
}

// containerState is what docker inspect says about one container.
type containerState struct {
	Service string
	Status  string // created, running, exited, ...
	Health  string // starting, healthy, unhealthy; "" without a health check
}

// States returns the state of every container of the project, by service.
func (s *stack) States(ctx context.Context) (map[string]containerState, error) {
	ids := dockerLines(ctx, "ps", "-aq", "--filter", "label=com.docker.compose.project="+s.project)
	if len(ids) == 0 {
		return nil, fmt.Errorf("project %s has no containers", s.project)
	}
	format := `{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}`
	out, err := exec.CommandContext(ctx, "docker", append([]string{"inspect", "--format", format}, ids...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("docker inspect: %w", err)
	}
	states := map[string]containerState{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		health := f[2]
		if health == "none" {
			health = ""
		}
		states[f[0]] = containerState{Service: f[0], Status: f[1], Health: health}
	}
	return states, nil
}

// healthLogs returns docker's record of the last health probes of each of
// services that is not healthy in states: whether the probe ran, and what it
// printed and returned.
func (s *stack) healthLogs(services []string, states map[string]containerState) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	for _, svc := range services {
		if st, ok := states[svc]; ok && st.Health == "healthy" {
			continue
		}
		id, err := s.Container(ctx, svc)
		if err != nil {
			fmt.Fprintf(&b, "\n%s: %v", svc, err)
			continue
		}
		out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{json .State.Health}}", id).CombinedOutput()
		fmt.Fprintf(&b, "\n%s health: %s (inspect err %v)", svc, bytes.TrimSpace(out), err)
	}
	return b.String()
}

// WaitHealthy waits until every one of services has a running, healthy
// container. A container that exited fails at once: it will not recover.
func (s *stack) WaitHealthy(ctx context.Context, services ...string) error {
	var last map[string]containerState
	var lastErr error // the last failed look, if any: docker itself may be slow
	for {
		states, err := s.States(ctx)
		lastErr = err
		if err == nil {
			last = states
			ready := true
			for _, svc := range services {
				st, ok := states[svc]
				switch {
				case ok && st.Status == "exited":
					return fmt.Errorf("service %s exited before it became healthy", svc)
				case !ok || st.Status != "running" || st.Health != "healthy":
					ready = false
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for healthy services: %w (last states: %v; last look's error: %v)%s", ctx.Err(), last, lastErr, s.healthLogs(services, last))
		case <-time.After(500 * time.Millisecond):
		}
	}
}
