package brookload

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/brook-streams/brook/tools/cluster"
)

// Nodes kills and restarts stream hosts by node id ("h1").
type Nodes interface {
	// Kill SIGKILLs the node's process and returns a description of what
	// was killed (process id or container).
	Kill(ctx context.Context, node string) (string, error)
	// Restart starts the node again with its data.
	Restart(ctx context.Context, node string) (string, error)
}

// LocalNodes are the stream hosts of a local process cluster.
type LocalNodes struct{ C *cluster.Cluster }

// Kill implements Nodes.
func (l LocalNodes) Kill(_ context.Context, node string) (string, error) {
	p := l.C.HostByNode(node)
	if p == nil {
		return "", fmt.Errorf("kill %s: no such stream host in the local cluster", node)
	}
	pid := p.Pid()
	if err := l.C.Kill(p, syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("kill %s: %w", node, err)
	}
	return fmt.Sprintf("pid %d", pid), nil
}

// Restart implements Nodes.
func (l LocalNodes) Restart(ctx context.Context, node string) (string, error) {
	p := l.C.HostByNode(node)
	if p == nil {
		return "", fmt.Errorf("restart %s: no such stream host in the local cluster", node)
	}
	if err := l.C.Restart(ctx, p); err != nil {
		return "", fmt.Errorf("restart %s: %w", node, err)
	}
	return fmt.Sprintf("pid %d", p.Pid()), nil
}

// ComposeNodes are the stream hosts of the compose stack: node hN runs in
// the container of compose service hostN.
type ComposeNodes struct {
	// Docker is the docker command (default "docker").
	Docker string

	mu         sync.Mutex
	containers map[string]string // node -> container id, remembered at the kill
}

// ComposeService is the compose service of node hN: hostN.
func ComposeService(node string) (string, error) {
	n, ok := strings.CutPrefix(node, "h")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return "", fmt.Errorf("node %q is not of the form hN", node)
	}
	return "host" + n, nil
}

func (d *ComposeNodes) docker(ctx context.Context, args ...string) (string, error) {
	bin := d.Docker
	if bin == "" {
		bin = "docker"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// container finds the running container of node's compose service.
func (d *ComposeNodes) container(ctx context.Context, node string) (string, error) {
	svc, err := ComposeService(node)
	if err != nil {
		return "", err
	}
	out, err := d.docker(ctx, "ps", "-q", "--filter", "label=com.docker.compose.service="+svc)
	if err != nil {
		return "", err
	}
	ids := strings.Fields(out)
	if len(ids) != 1 {
		return "", fmt.Errorf("compose service %s: want one running container, found %d", svc, len(ids))
	}
	return ids[0], nil
}

// Kill implements Nodes with docker kill --signal KILL.
func (d *ComposeNodes) Kill(ctx context.Context, node string) (string, error) {
	id, err := d.container(ctx, node)
	if err != nil {
		return "", fmt.Errorf("kill %s: %w", node, err)
	}
	if _, err := d.docker(ctx, "kill", "--signal", "KILL", id); err != nil {
		return "", fmt.Errorf("kill %s: %w", node, err)
	}
	d.mu.Lock()
	if d.containers == nil {
		d.containers = map[string]string{}
	}
	d.containers[node] = id
	d.mu.Unlock()
	return "container " + id, nil
}

// Restart implements Nodes with docker start of the container killed.
func (d *ComposeNodes) Restart(ctx context.Context, node string) (string, error) {
	d.mu.Lock()
	id := d.containers[node]
	d.mu.Unlock()
	if id == "" {
		return "", fmt.Errorf("restart %s: it was not killed by this run", node)
	}
	if _, err := d.docker(ctx, "start", id); err != nil {
		return "", fmt.Errorf("restart %s: %w", node, err)
	}
	return "container " + id, nil
}
