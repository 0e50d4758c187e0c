package raftstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	dblog "github.com/lni/dragonboat/v4/logger"
)

// routeOnce guards dragonboat's logger factory, which panics if set twice.
var routeOnce sync.Once

// RouteDragonboatLogs sends Dragonboat's logs to log (as records with the
// attribute "pkg"), so a coordinator's logs are all in one format. Call it
// once at process start, before Open; later calls do nothing, because the
// library's factory is process-wide and can be set only once.
func RouteDragonboatLogs(log *slog.Logger) {
	routeOnce.Do(func() {
		dblog.SetLoggerFactory(func(pkg string) dblog.ILogger {
			return &slogAdapter{log: log.With("pkg", "dragonboat/"+pkg), level: dblog.WARNING}
		})
	})
}

type slogAdapter struct {
	log   *slog.Logger
	mu    sync.Mutex
	level dblog.LogLevel
}

func (a *slogAdapter) SetLevel(l dblog.LogLevel) {
	a.mu.Lock()
	a.level = l
	a.mu.Unlock()
}

func (a *slogAdapter) emit(l dblog.LogLevel, sl slog.Level, format string, args []any) {
	a.mu.Lock()
	on := l <= a.level
	a.mu.Unlock()
	if on {
		a.log.Log(context.Background(), sl, fmt.Sprintf(format, args...))
	}
}

func (a *slogAdapter) Debugf(format string, args ...any) {
	a.emit(dblog.DEBUG, slog.LevelDebug, format, args)
}
func (a *slogAdapter) Infof(format string, args ...any) {
	a.emit(dblog.INFO, slog.LevelInfo, format, args)
}
func (a *slogAdapter) Warningf(format string, args ...any) {
	a.emit(dblog.WARNING, slog.LevelWarn, format, args)
}
func (a *slogAdapter) Errorf(format string, args ...any) {
	a.emit(dblog.ERROR, slog.LevelError, format, args)
}

// Panicf logs and panics, as Dragonboat's own loggers do: the library calls
// it only for invariant violations it cannot continue from.
func (a *slogAdapter) Panicf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	a.log.Error(msg)
	panic(msg)
}
