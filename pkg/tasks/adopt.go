package tasks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// Adopt takes ownership of a command that is already running. It is used
// when a foreground shell reaches its handoff threshold; the caller's
// process tree and output stream are transferred before the manager starts
// waiting for it. Adopt does not count against MaxRunning: refusing would
// leave the caller to kill a command the model is waiting for; a caller that
// wants the limit to hold for the command (it may outlive its caller's wait
// and run on as a background task) reserves its place with Reserve before
// starting it and passes RunningCommand.Reservation. On error the caller
// still owns the command.
func (m *Manager) Adopt(ctx context.Context, spec Spec, running RunningCommand) (Info, error) {
	sid := m.SessionOf(ctx)
	if sid == "" {
		return Info{}, errors.New("tasks: adopt: no session in context")
	}
	if running.Tree == nil || running.Wait == nil || running.AttachOutput == nil {
		return Info{}, errors.New("tasks: adopt: RunningCommand needs Tree, Wait and AttachOutput")
	}
	if spec.Cmd == nil {
		spec.Cmd = running.Cmd
	}
	started := running.Started
	if started.IsZero() {
		started = time.Now()
	}
	maxDur := running.MaxDuration
	if maxDur <= 0 {
		maxDur = m.lim.MaxDuration
	}
	admit := admitFree
	if running.Reservation != nil {
		if running.Reservation.m != m || running.Reservation.sid != sid {
			return Info{}, errors.New("tasks: adopt: the reservation is for another manager or session")
		}
		admit = admitReserved
	}
	t, err := m.register(sid, spec, admit, running.Reservation, started, maxDur)
	if err != nil {
		return Info{}, err
	}
	// From here on the manager owns the tree: the task is published before
	// anything can fail, so the command is never unowned.
	t.tree = running.Tree
	running.AttachOutput(t.out)
	go func() {
		err := <-running.Wait
		if kerr := t.tree.Kill(); kerr != nil && err == nil {
			err = kerr
		}
		t.exited <- commandResult(err)
	}()
	m.publish(t)
	go m.supervise(t)
	return m.snapshot(t), nil
}

// Reservation is one place under Limits.MaxRunning held for a command its
// caller is about to start (Reserve).
type Reservation struct {
	m    *Manager
	sid  string
	used bool // taken over by a task, or released; guarded by m.mu
}

// Reserve holds one of the session's MaxRunning places, counted like a
// running task, for a command the caller starts itself and hands over with
// Adopt (RunningCommand.Reservation). A foreground command reserved this
// way counts from before it starts, so every live process tree of the
// session counts against the limit, whether it ends in the foreground or
// runs on in the background. It fails with ErrTooManyRunning when the
// session has no place left. Release gives back a place Adopt did not take.
func (m *Manager) Reserve(sessionID string) (*Reservation, error) {
	if sessionID == "" {
		return nil, errors.New("tasks: reserve: no session")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	s := m.sessionLocked(sessionID)
	if n := m.runningLocked(s); n >= m.lim.MaxRunning {
		return nil, &TooManyRunningError{Session: sessionID, Running: n, Limit: m.lim.MaxRunning}
	}
	s.starting++
	return &Reservation{m: m, sid: sessionID}, nil
}

// Release gives the place back unless a task took it over; calling it
// again, or after Adopt, does nothing.
func (r *Reservation) Release() {
	if r == nil {
		return
	}
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.used {
		return
	}
	r.used = true
	m.sessions[r.sid].starting--
}

// Handoff is the output of a foreground command that may be adopted: it
// keeps what the command writes until Attach, then hands that and all later
// output to the task. Use it as the command's Stdout and Stderr and Attach
// as RunningCommand.AttachOutput.
type Handoff struct {
	mu  sync.Mutex
	buf bytes.Buffer
	w   io.Writer
}

// Write keeps p for the foreground caller, or passes it on once attached.
func (h *Handoff) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w != nil {
		return h.w.Write(p)
	}
	return h.buf.Write(p)
}

// Attach switches the output to w, writing to it first what was kept, in
// one step so no byte is lost or reordered.
func (h *Handoff) Attach(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf.Len() > 0 {
		_, _ = w.Write(h.buf.Bytes())
		h.buf.Reset()
	}
	h.w = w
}

// Bytes returns what was written before Attach (for a command that ended
// in the foreground).
func (h *Handoff) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return bytes.Clone(h.buf.Bytes())
}
