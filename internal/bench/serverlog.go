package bench

import (
	"fmt"
	"strings"
	"sync"
)

// serverWarnings keeps the embedded server's last warnings and errors, so a
// figure that fails on an API error can say what the server logged about
// it: a stream create the server refuses answers only "error creating store
// for stream", and the reason is in its log.
type serverWarnings struct {
	mu    sync.Mutex
	lines []string
}

// serverWarningsKept is how many lines serverWarnings keeps.
const serverWarningsKept = 8

func (w *serverWarnings) keep(level, format string, v ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, level+" "+fmt.Sprintf(format, v...))
	if len(w.lines) > serverWarningsKept {
		w.lines = w.lines[len(w.lines)-serverWarningsKept:]
	}
}

// said is the lines kept, joined, or "" when there are none (or w is nil:
// a bench against a server of its own has no log here).
func (w *serverWarnings) said() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "; ")
}

func (w *serverWarnings) Noticef(string, ...any) {}
func (w *serverWarnings) Debugf(string, ...any)  {}
func (w *serverWarnings) Tracef(string, ...any)  {}
func (w *serverWarnings) Warnf(format string, v ...any) {
	w.keep("[WRN]", format, v...)
}
func (w *serverWarnings) Errorf(format string, v ...any) {
	w.keep("[ERR]", format, v...)
}
func (w *serverWarnings) Fatalf(format string, v ...any) {
	w.keep("[FTL]", format, v...)
}

// withServerSaid adds to err what the embedded server last warned of.
func (e *env) withServerSaid(err error) error {
	if said := e.srvLog.said(); said != "" {
		return fmt.Errorf("%w (the server's last warnings: %s)", err, said)
	}
	return err
}
