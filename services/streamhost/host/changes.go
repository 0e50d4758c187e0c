package host

import (
	"sync"
)

// changeSet names the copies whose reported status (heartbeat) may have
// changed since it was last taken. The store marks a copy at every change
// of its tails, epoch or seal (streamlog.Options.OnChange), a replica at
// every change of its role (publishStatus), an owner when its confirmed
// watermark moves. A mark costs a map insert under a lock of its own,
// taken by nothing else (the store calls it with the copy's lock held).
type changeSet struct {
	mu    sync.Mutex
	names map[string]struct{}
}

// mark names stream as changed.
func (s *changeSet) mark(stream string) {
	s.mu.Lock()
	if s.names == nil {
		s.names = map[string]struct{}{}
	}
	s.names[stream] = struct{}{}
	s.mu.Unlock()
}

// take returns the streams named since the last take, in no order (the
// heartbeat's report sorts what it lists), and forgets them.
func (s *changeSet) take() []string {
	s.mu.Lock()
	names := s.names
	s.names = nil
	s.mu.Unlock()
	out := make([]string, 0, len(names))
	for name := range names {
		out = append(out, name)
	}
	return out
}

// replicaSet is a set of replicas: those the retention loop visits, the
// ones with a role and a retention that bounds something (publishStatus
// keeps it), so that a host of thousands of unbounded copies walks none.
type replicaSet struct {
	mu sync.Mutex
	m  map[*replica]struct{}
}

// set adds r to the set when in, else removes it.
func (s *replicaSet) set(r *replica, in bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !in {
		delete(s.m, r)
		return
	}
	if s.m == nil {
		s.m = map[*replica]struct{}{}
	}
	s.m[r] = struct{}{}
}

// list returns the replicas in the set.
func (s *replicaSet) list() []*replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*replica, 0, len(s.m))
	for r := range s.m {
		out = append(out, r)
	}
	return out
}
