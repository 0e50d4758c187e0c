package auth

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ParseOwner parses "UID:GID" (numeric ids, as in chown), e.g. "65532:65532".
func ParseOwner(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("auth: owner %q: want UID:GID", s)
	}
	if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("auth: owner %q: bad uid", s)
	}
	if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
		return 0, 0, fmt.Errorf("auth: owner %q: bad gid", s)
	}
	return uid, gid, nil
}

// Chown gives d's directory and every file in it to uid:gid, for
// services that run as another user than the one that generated it (the
// compose stack's containers run as 65532:65532). Modes stay 0700 and
// 0600: only that user (and root) can read the seeds. Changing a file's
// owner to another user needs root (CAP_CHOWN).
func Chown(d *Deployment, uid, gid int) error {
	entries, err := os.ReadDir(d.Dir)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	paths := []string{d.Dir}
	for _, e := range entries {
		paths = append(paths, filepath.Join(d.Dir, e.Name()))
	}
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
	}
	return nil
}
