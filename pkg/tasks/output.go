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
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

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
//
// Cleaned lines are appended to buf and written to the file in batches
// (one write per Write call, per gulp of a command's pipe); the tail is
// brought up to date once per batch from the last lines of it, so the
// common line costs its cleaning and a copy, nothing per line besides.
type output struct {
	mu        sync.Mutex
	f         *os.File
	clean     func(dst, line []byte) []byte
	unchanged func(text []byte) bool // Config.Unchanged, or nil
	max       int64
	partial   []byte
	buf       []byte // cleaned lines not yet written, each ending in '\n'
	bytes     int64
	lines     int
	truncated bool
	tail      []string
	tailSize  int
	closed    bool
	err       error
}

// appendWith turns a Clean function into an appending one.
func appendWith(clean func([]byte) string) func(dst, line []byte) []byte {
	return func(dst, line []byte) []byte { return append(dst, clean(line)...) }
}

// newOutput writes to f; clean appends a cleaned line to its first
// argument (nil keeps valid UTF-8, KeepUTF8).
func newOutput(f *os.File, clean func(dst, line []byte) []byte, max int64) *output {
	if clean == nil {
		clean = appendWith(KeepUTF8)
	}
	return &output{f: f, clean: clean, max: max}
}

// Write takes any bytes; only whole lines reach the file. Past the output
// limit they are dropped but still consumed, so the writer never blocks.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.take(p)
	o.flush()
	return len(p), nil
}

// take cleans the whole lines of p into the pending buffer and keeps the
// rest of an unfinished line for later. A line longer than maxLine is cut
// into pieces of maxLine. Called with mu held.
func (o *output) take(p []byte) {
	if o.closed {
		return
	}
	start := len(o.buf)
	// Once the line left unfinished before is done, p goes in blocks of
	// whole lines: a block none of whose lines needs cleaning is copied as
	// it is, the lines of any other one are cleaned one by one (single,
	// bytes of them left). The first block is all of p's whole lines, the
	// common case; after one fails, blocks of blockSize (and on to the end
	// of the line there).
	single, size := 0, len(p)
	for len(p) > 0 {
		if o.unchanged != nil && single <= 0 && len(o.partial) == 0 && !o.truncated {
			end := len(p)
			if end > size {
				if k := bytes.IndexByte(p[size:], '\n'); k >= 0 {
					end = size + k + 1
				}
			}
			k := bytes.LastIndexByte(p[:end], '\n')
			if k >= 0 && o.block(p[:k+1]) {
				p = p[k+1:]
				continue
			}
			if k >= 0 && size != blockSize {
				size = blockSize // the whole did not do: judge smaller blocks
				continue
			}
			single = k + 1
		}
		i := bytes.IndexByte(p, '\n')
		single -= i + 1
		if i < 0 {
			o.partial = append(o.partial, p...)
			for len(o.partial) >= maxLine {
				o.line(o.partial[:maxLine])
				o.partial = append(o.partial[:0], o.partial[maxLine:]...)
			}
			break
		}
		if len(o.partial) == 0 && i < maxLine {
			o.line(p[:i])
		} else {
			o.partial = append(o.partial, p[:i]...)
			for len(o.partial) >= maxLine {
				o.line(o.partial[:maxLine])
				o.partial = append(o.partial[:0], o.partial[maxLine:]...)
			}
			o.line(o.partial)
			o.partial = o.partial[:0]
		}
		p = p[i+1:]
	}
	o.updateTail(start)
}

// blockSize is about how much output is judged at once for copying whole:
// small enough that one line to clean among many ordinary ones sends only
// its neighbours line by line. Measured on output.Write with 100-byte lines
// (MB/s, all ordinary / one in 100 coloured / one in 10): one block per
// 256 KiB gulp 780/350/270, 16 KiB 690/280/215, 2 KiB 700/590/240; so a
// gulp is first judged whole, and in blocks of this size once that fails.
const blockSize = 2 << 10

// block copies text, whole lines each ending in '\n', into the pending
// buffer when none of them needs cleaning, cutting or splitting, and
// reports whether it did; otherwise the lines go one by one. Called with mu
// held.
func (o *output) block(text []byte) bool {
	if o.max > 0 && o.bytes+int64(len(text)) > o.max {
		return false
	}
	// No line of maxLine bytes or more: a line that long would hold one of
	// these aligned windows of half that size whole, without a newline.
	const half = maxLine / 2
	for k := 0; k+half <= len(text); k += half {
		if bytes.IndexByte(text[k:k+half], '\n') < 0 {
			return false
		}
	}
	if !o.unchanged(text) {
		return false
	}
	o.buf = append(o.buf, text...)
	o.bytes += int64(len(text))
	o.lines += bytes.Count(text, []byte{'\n'})
	return true
}

// line adds one cleaned line to the pending buffer. Called with mu held.
func (o *output) line(raw []byte) {
	if o.truncated {
		return
	}
	start := len(o.buf)
	o.buf = o.clean(o.buf, raw)
	n := len(o.buf) - start
	if o.max > 0 && o.bytes+int64(n)+1 > o.max {
		o.buf = o.buf[:start]
		o.truncated = true
		return
	}
	o.end(start)
}

// end finishes the line that starts at buf[start]: a newline a cleaner left
// in it becomes a space, so one line stays one line, and it is counted.
func (o *output) end(start int) {
	text := o.buf[start:]
	for {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			break
		}
		text[i] = ' '
		text = text[i+1:]
	}
	o.bytes += int64(len(o.buf)-start) + 1
	o.lines++
	o.buf = append(o.buf, '\n')
}

// put appends a line regardless of the limit (the manager's own notes).
func (o *output) put(text string) {
	start := len(o.buf)
	o.buf = append(o.buf, text...)
	o.end(start)
	o.updateTail(start)
}

// updateTail moves the lines of buf from start on into the tail: the last
// tailLines lines, each cut to tailBytes, and no more than tailBytes in all
// unless one line is all there is. Only the last tailLines of them can
// stay, so only those are looked at.
func (o *output) updateTail(start int) {
	b := o.buf[start:]
	if len(b) == 0 {
		return
	}
	// b ends with '\n': find where the last tailLines lines begin.
	from := len(b) - 1
	for n := 0; n < tailLines; n++ {
		i := bytes.LastIndexByte(b[:from], '\n')
		from = i // the '\n' before the line, or -1
		if i < 0 {
			break
		}
	}
	for _, l := range bytes.SplitAfter(b[from+1:], []byte{'\n'}) {
		if len(l) == 0 {
			continue
		}
		l = l[:len(l)-1]
		if len(l) > tailBytes {
			l = l[:tailBytes]
		}
		o.tail = append(o.tail, string(l))
		o.tailSize += len(l)
	}
	for len(o.tail) > tailLines || (o.tailSize > tailBytes && len(o.tail) > 1) {
		o.tailSize -= len(o.tail[0])
		o.tail = o.tail[1:]
	}
}

// Pipe reading. A command's output is read in large gulps and its cleaned
// lines written to the file in large batches, which is what makes capture
// cheap; but a line must not wait in memory while the command is quiet, or
// ReadLines on a running task would not see it. So the batch is written
// whenever the pipe has nothing more to read right now (the read would
// block), and otherwise once it reaches flushSize.
const (
	readSize  = 256 << 10
	flushSize = 256 << 10
	// pipeSize is asked for the output pipe (F_SETPIPE_SZ): a command
	// writing fast fills it while the reader works, instead of stopping
	// every 64 KiB (the default) for a context switch.
	pipeSize = 1 << 20
)

// readBufs holds the read buffers of readers that finished: a worker
// starting many short tasks reuses a few instead of allocating one each.
var readBufs = sync.Pool{New: func() any {
	b := make([]byte, readSize)
	return &b
}}

// readFrom copies the command's output pipe r into the output until the
// pipe is closed by every writer or r is closed.
func (o *output) readFrom(r *os.File) {
	rc, err := r.SyscallConn()
	if err != nil {
		_, _ = io.Copy(o, r)
		return
	}
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = syscall.Read(int(fd), buf)
				if rerr != syscall.EINTR {
					break
				}
			}
			if rerr == syscall.EAGAIN {
				// Nothing more for now: what was read goes to the file
				// before the wait for more.
				o.mu.Lock()
				o.flush()
				o.mu.Unlock()
				return false
			}
			return true
		})
		if err != nil || rerr != nil || n <= 0 {
			break // closed, failed, or every writer is gone
		}
		o.mu.Lock()
		o.take(buf[:n])
		if len(o.buf) >= flushSize {
			o.flush()
		}
		o.mu.Unlock()
	}
	o.mu.Lock()
	o.flush()
	o.mu.Unlock()
}

// growPipe asks for a larger pipe buffer; the default works too, so a
// refusal (an unprivileged process past pipe-max-size) is ignored.
func growPipe(r *os.File) {
	if rc, err := r.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
		})
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
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
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
