package tasks

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"jetway/pkg/tasks/proctree"
)

const (
	tailLines = 20
	tailBytes = 4 << 10
	// maxLine splits a line that never ends (a progress bar without
	// newlines), so the file and the tail stay line-shaped.
	maxLine = 64 << 10
)

// KeepUTF8 is the default cleaner: the line as it is, with invalid UTF-8
// replaced and a carriage return before the newline dropped.
func KeepUTF8(line []byte) string {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if utf8.Valid(line) {
		return string(line)
	}
	return strings.ToValidUTF8(string(line), "\uFFFD")
}

// output writes a task's output to its file one cleaned line at a time, and
// keeps the counters and tail a snapshot shows. It is the io.Writer a
// function task gets and what a command's pipe is copied into.
type output struct {
	mu        sync.Mutex
	f         *os.File
	clean     func([]byte) string
	max       int64
	partial   []byte
	buf       []byte // lines of one Write, written with one syscall
	bytes     int64
	lines     int
	truncated bool
	tail      []string
	tailSize  int
	closed    bool
	err       error
}

func newOutput(f *os.File, clean func([]byte) string, max int64) *output {
	if clean == nil {
		clean = KeepUTF8
	}
	return &output{f: f, clean: clean, max: max}
}

// Write takes any bytes; only whole lines reach the file. Past the output
// limit they are dropped but still consumed, so the writer never blocks.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.partial = append(o.partial, p...)
			for len(o.partial) >= maxLine {
				o.line(o.partial[:maxLine])
				o.partial = append(o.partial[:0], o.partial[maxLine:]...)
			}
			break
		}
		if len(o.partial) > 0 {
			o.partial = append(o.partial, p[:i]...)
			o.line(o.partial)
			o.partial = o.partial[:0]
		} else {
			o.line(p[:i])
		}
		p = p[i+1:]
	}
	o.flush()
	return n, nil
}

// line adds one cleaned line to the pending buffer. Called with mu held.
func (o *output) line(raw []byte) {
	if o.truncated {
		return
	}
	text := o.clean(raw)
	if o.max > 0 && o.bytes+int64(len(text))+1 > o.max {
		o.truncated = true
		return
	}
	o.put(text)
}

// put appends a line regardless of the limit (the manager's own notes).
func (o *output) put(text string) {
	text = strings.ReplaceAll(text, "\n", " ")
	o.buf = append(o.buf, text...)
	o.buf = append(o.buf, '\n')
	o.bytes += int64(len(text)) + 1
	o.lines++
	if len(text) > tailBytes {
		text = text[:tailBytes]
	}
	o.tail = append(o.tail, text)
	o.tailSize += len(text)
	for len(o.tail) > tailLines || (o.tailSize > tailBytes && len(o.tail) > 1) {
		o.tailSize -= len(o.tail[0])
		o.tail = o.tail[1:]
	}
}

func (o *output) flush() {
	if len(o.buf) == 0 || o.err != nil {
		o.buf = o.buf[:0]
		return
	}
	if _, err := o.f.Write(o.buf); err != nil {
		o.err = fmt.Errorf("write output %s: %w", o.f.Name(), err)
	}
	o.buf = o.buf[:0]
}

// note writes a line of the manager's own past the output limit.
func (o *output) note(text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.put(text)
	o.flush()
}

// close writes what is left of an unfinished line and the truncation note,
// and closes the file. Writes after close are dropped.
func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	if len(o.partial) > 0 {
		o.line(o.partial)
		o.partial = nil
	}
	if o.truncated {
		o.put(fmt.Sprintf("[tasks] output truncated: past the %s limit", proctree.Bytes(o.max)))
	}
	o.flush()
	o.closed = true
	_ = o.f.Close()
}

type outStats struct {
	bytes     int64
	lines     int
	truncated bool
	tail      []string
}

func (o *output) stats() outStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return outStats{o.bytes, o.lines, o.truncated, append([]string(nil), o.tail...)}
}

func (o *output) tailText() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.tail, "\n")
}

// eachLine calls fn with every complete line of the file (numbered from 1).
// A last line without its newline is still being written and is skipped.
func eachLine(path string, fn func(n int, line string) bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open task output: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	n := 0
	for {
		s, err := r.ReadString('\n')
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read task output %s: %w", path, err)
		}
		n++
		if !fn(n, s[:len(s)-1]) {
			return n, nil
		}
	}
}

// ReadLines returns up to limit lines of a task's output from line offset
// (1-based; values below 1 read from the start), the total number of lines
// written so far and whether more follow. It works while the task runs. A
// limit below 1 reads to the end.
func ReadLines(path string, offset, limit int) (lines []string, total int, more bool, err error) {
	if offset < 1 {
		offset = 1
	}
	total, err = eachLine(path, func(n int, line string) bool {
		if n >= offset && (limit < 1 || len(lines) < limit) {
			lines = append(lines, line)
		}
		return true
	})
	return lines, total, offset-1+len(lines) < total, err
}

// GrepLines returns the lines (numbered "n: text") of a task's output that
// match pattern (RE2), at most limit, and how many matched in all.
func GrepLines(path, pattern string, limit int) ([]string, int, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, 0, fmt.Errorf("grep pattern: %w", err)
	}
	var out []string
	matched := 0
	_, err = eachLine(path, func(n int, line string) bool {
		if re.MatchString(line) {
			matched++
			if limit < 1 || len(out) < limit {
				out = append(out, strconv.Itoa(n)+": "+line)
			}
		}
		return true
	})
	return out, matched, err
}

// TailText is the last n lines of the task's tail, one per line.
func TailText(i Info, n int) string {
	t := i.Tail
	if n >= 0 && len(t) > n {
		t = t[len(t)-n:]
	}
	return strings.Join(t, "\n")
}
