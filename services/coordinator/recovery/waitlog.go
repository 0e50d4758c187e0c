package recovery

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// waitExamples is how many streams a wait summary names.
const waitExamples = 3

// WaitLog gathers the repeated waits of many workers (a mass failover's
// thousands of recoveries waiting round after round) into one summary line
// per Flush: the rounds that waited by kind, how many streams, and a few of
// them. A worker logs its own wait when its kind changes and its end
// (committed, stopped), so one stream's failover stays readable in the logs
// while their volume follows what changed. Safe for concurrent use.
type WaitLog struct {
	Logger *slog.Logger

	mu       sync.Mutex
	rounds   map[string]int // by wait kind
	streams  map[string]bool
	examples []string
	since    time.Time
}

// Note counts one more round of stream waiting with kind.
func (l *WaitLog) Note(stream, kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rounds == nil {
		l.rounds, l.streams = map[string]int{}, map[string]bool{}
	}
	l.rounds[kind]++
	if !l.streams[stream] {
		l.streams[stream] = true
		if len(l.examples) < waitExamples {
			l.examples = append(l.examples, stream)
		}
	}
}

// Flush logs the summary of the waits noted since the last Flush, if any,
// and starts a new one; now ends its period. A nil WaitLog logs nothing.
func (l *WaitLog) Flush(now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	rounds, streams, examples, since := l.rounds, len(l.streams), l.examples, l.since
	l.rounds, l.streams, l.examples, l.since = nil, nil, nil, now
	l.mu.Unlock()
	if len(rounds) == 0 || l.Logger == nil {
		return
	}
	args := []any{"streams", streams, "examples", examples}
	if !since.IsZero() {
		args = append(args, "over", now.Sub(since).Round(time.Millisecond))
	}
	for _, k := range slices.Sorted(maps.Keys(rounds)) {
		args = append(args, "rounds_"+k, rounds[k])
	}
	l.Logger.Info("recovery: waiting (summary of repeated waits)", args...)
}
