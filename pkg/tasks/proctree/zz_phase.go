package proctree

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var (
	phaseMu sync.Mutex
	phaseT0 time.Time
	phaseOn = os.Getenv("JW_PHASES") != ""
)

// PhaseStart is temporary instrumentation.
func PhaseStart() {
	if !phaseOn {
		return
	}
	phaseMu.Lock()
	phaseT0 = time.Now()
	phaseMu.Unlock()
}

// Phase is temporary instrumentation.
func Phase(name string) {
	if !phaseOn {
		return
	}
	phaseMu.Lock()
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	fmt.Fprintf(os.Stderr, "PHASE %s %d %d\n", name, time.Since(phaseT0).Microseconds(), ts.Nano())
	phaseMu.Unlock()
}
