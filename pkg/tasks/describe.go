package tasks

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Describe is a one-line account of a task, shared by the task tool, the end
// notices and the trace: "t3 exited (exit 0) after 4m12s · 1.2 MB / 3400
// lines · go test ./... · out:sess:ab12"; a function task adds its error and
// progress ("t4 running for 3m · run 5, exit 0 · ...").
func Describe(i Info) string {
	var head string
	d := fmtDuration(i.Duration())
	switch i.Status {
	case Running:
		head = fmt.Sprintf("t%s running for %s", i.ID, d)
	case Exited, Failed:
		head = fmt.Sprintf("t%s %s (exit %d) after %s", i.ID, i.Status, i.ExitCode, d)
	case TimedOut:
		head = fmt.Sprintf("t%s timed out after %s", i.ID, d)
	default:
		head = fmt.Sprintf("t%s %s after %s", i.ID, i.Status, d)
	}
	parts := []string{head}
	if i.Progress != "" {
		parts = append(parts, i.Progress)
	}
	if i.Error != "" {
		parts = append(parts, "error: "+i.Error)
	}
	size := fmtBytes(i.Bytes) + " / " + plural(i.Lines, "line")
	if i.Truncated {
		size += " (truncated)"
	}
	parts = append(parts, size)
	if i.Summary != "" {
		parts = append(parts, i.Summary)
	}
	if i.Ref != "" {
		parts = append(parts, i.Ref)
	}
	return strings.Join(parts, " · ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// fmtDuration is "45s", "4m12s", "3m", "1h05m": precise enough to compare
// two runs, short enough for one line.
func fmtDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s < 0 {
		s = 0
	}
	switch h, m, sec := s/3600, s%3600/60, s%60; {
	case h > 0:
		return fmt.Sprintf("%dh%02dm", h, m)
	case m > 0 && sec == 0:
		return fmt.Sprintf("%dm", m)
	case m > 0:
		return fmt.Sprintf("%dm%02ds", m, sec)
	default:
		return fmt.Sprintf("%ds", sec)
	}
}

// fmtBytes is a size in decimal units, as people read file sizes: "1.2 MB".
func fmtBytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n), 0
	for v >= 1000 && unit < 5 {
		v /= 1000
		unit++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("BKMGTP"[unit]) + "B"
}

// fmtLimit is a configured duration: whole seconds and up as fmtDuration,
// shorter ones exactly (tests and tight limits).
func fmtLimit(d time.Duration) string {
	if d < time.Second {
		return d.String()
	}
	return fmtDuration(d)
}
