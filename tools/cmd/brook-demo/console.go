package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// console writes the demo's output: lines, timestamped events relative to
// the kill, and one progress line kept at the bottom and redrawn with \r.
// When the output is not a terminal (a log file, a pipe) it is in line
// mode instead: each progress report is a line of its own and nothing is
// redrawn, so a log of the demo holds one line per interval.
// Events and the progress line come from several goroutines.
type console struct {
	mu       sync.Mutex
	w        io.Writer
	lines    bool   // line mode: no \r, one line per progress report
	progress string // the progress line on screen, "" if none
	killAt   time.Time
}

// newConsole returns a console that redraws its progress line, as on a
// terminal.
func newConsole(w io.Writer) *console { return &console{w: w} }

// newLineConsole returns a console in line mode.
func newLineConsole(w io.Writer) *console { return &console{w: w, lines: true} }

// consoleFor returns the console for w: redrawing on a terminal, line mode
// on anything else.
func consoleFor(w io.Writer) *console {
	if isTerminal(w) {
		return newConsole(w)
	}
	return newLineConsole(w)
}

// ignoreWrite drops the result of a write to the console: the demo's
// output is its terminal or log, and a failed write there has nowhere
// better to be reported.
func ignoreWrite(int, error) {}

// isTerminal reports whether w is a terminal (a character device such as a
// tty, not a file or a pipe).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressStride is how many progress ticks make one report: every tick
// redrawn on a terminal, every fourth (one line a second at the demo's
// 250 ms ticks) as lines.
func (c *console) progressStride() int {
	if c.lines {
		return 4
	}
	return 1
}

// clearLocked blanks the progress line, if one is shown, and returns to
// its start.
func (c *console) clearLocked() {
	if c.progress != "" {
		ignoreWrite(fmt.Fprintf(c.w, "\r%s\r", strings.Repeat(" ", len(c.progress))))
	}
}

// Printf prints a line above the progress line.
func (c *console) Printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	ignoreWrite(fmt.Fprintf(c.w, format+"\n", args...))
	if c.progress != "" {
		ignoreWrite(io.WriteString(c.w, c.progress))
	}
}

// setKill makes later events carry their time relative to at.
func (c *console) setKill(at time.Time) {
	c.mu.Lock()
	c.killAt = at
	c.mu.Unlock()
}

// Event prints a line stamped with the time since the kill.
func (c *console) Event(at time.Time, format string, args ...any) {
	c.mu.Lock()
	kill := c.killAt
	c.mu.Unlock()
	c.Printf("%s  %s", stamp(at, kill), fmt.Sprintf(format, args...))
}

// stamp renders at relative to the kill ("+  312 ms").
func stamp(at, kill time.Time) string {
	if kill.IsZero() {
		return "          "
	}
	d := at.Sub(kill).Milliseconds()
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%6d ms", sign, d)
}

// Progress redraws the progress line; in line mode it prints it as a line.
func (c *console) Progress(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lines {
		ignoreWrite(io.WriteString(c.w, line+"\n"))
		return
	}
	pad := ""
	if n := len(c.progress) - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	ignoreWrite(fmt.Fprintf(c.w, "\r%s%s", line, pad))
	if pad != "" {
		ignoreWrite(fmt.Fprintf(c.w, "\r%s", line))
	}
	c.progress = line
}

// EndProgress leaves the progress line as it is and moves below it.
func (c *console) EndProgress() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.progress != "" {
		ignoreWrite(io.WriteString(c.w, "\n"))
		c.progress = ""
	}
}

// progressLine renders the progress figures as one line.
func progressLine(p progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  publishing %5.1fs  %8d confirmed  %7.0f rec/s  p50 %7s", p.Elapsed.Seconds(), p.Confirmed, p.Rate, ms(p.P50))
	if p.Errors > 0 {
		fmt.Fprintf(&b, "  %d errors", p.Errors)
	}
	if p.Killed {
		fmt.Fprintf(&b, "  [owner killed %.1fs ago]", p.SinceKill.Seconds())
	}
	return b.String()
}
