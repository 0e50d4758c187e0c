package wire

import "time"

// MaxFetchWait is the longest an owner holds a fetch that finds nothing
// new (FetchRequest.WaitMS is capped to it).
const MaxFetchWait = 30 * time.Second

// WaitUpTo converts a wait in milliseconds taken from a request into a
// duration between 0 and limit. A value that would overflow a
// time.Duration (about 292 years) is capped like any other value above
// limit, never wrapped into a short or negative wait.
func WaitUpTo(ms int64, limit time.Duration) time.Duration {
	if ms <= 0 || limit <= 0 {
		return 0
	}
	if ms >= int64(limit/time.Millisecond) {
		return limit
	}
	return time.Duration(ms) * time.Millisecond
}
