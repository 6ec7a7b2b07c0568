package workspace

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"
)

// ErrBinary is matched by a Read of a file that holds NUL bytes: its text
// would mean nothing to a model.
var ErrBinary = errors.New("binary file")

// ErrNoMatch is matched by an Edit whose old text is not in the file.
var ErrNoMatch = errors.New("old text not found")

// ErrMultipleMatches is matched by an Edit whose old text is in the file more
// than once while All is not set; the message says how many times.
var ErrMultipleMatches = errors.New("old text matches more than once")

// ReadRequest asks for lines of a text file.
type ReadRequest struct {
	Path string `json:"path"`
	// Offset is the first line to return, counting from 1; 0 means 1.
	Offset int `json:"offset,omitempty"`
	// Limit is how many lines to return; 0 means Config.ReadLines.
	Limit int `json:"limit,omitempty"`
	// Images asks for a file whose bytes are an image (one of ImageTypes)
	// to come back whole in ReadResult.Image instead of as text; Offset and
	// Limit do not apply to it. It is an option so one request, and one
	// open file, both detects and reads the image.
	Images bool `json:"images,omitempty"`
}

// ReadResult is a range of lines. Content holds them numbered like cat -n
// ("     3\ttext\n"), which is what a model is shown.
type ReadResult struct {
	Path       string `json:"path"`       // resolved, relative to the workspace
	Content    string `json:"content"`    // the numbered lines
	StartLine  int    `json:"start_line"` // first line in Content, 0 when none
	EndLine    int    `json:"end_line"`   // last line in Content, 0 when none
	TotalLines int    `json:"total_lines"`
	// Truncated says Content stopped before Limit lines (and before the
	// end of the file) because it reached Config.MaxReadBytes.
	Truncated bool `json:"truncated,omitempty"`
	// Image is the file when the request set Images and the file is an
	// image; the line fields are then zero.
	Image *Image `json:"image,omitempty"`
}

// lineCut ends a line shortened to Config.MaxLineBytes.
const lineCut = " [… line truncated]"

// Read returns lines Offset to Offset+Limit-1 of a text file, numbered, with
// the file's total line count. Lines longer than Config.MaxLineBytes are cut
// and the text is capped at Config.MaxReadBytes; invalid UTF-8 is shown as
// U+FFFD. A file with NUL bytes is refused with ErrBinary. With Images set,
// an image file is returned whole instead (see ReadImage for the limits),
// and a picture of another type is refused with ErrNotImage.
func (w *Workspace) Read(ctx context.Context, req ReadRequest) (ReadResult, error) {
	rel, err := w.resolve(req.Path)
	if err != nil {
		return ReadResult{}, err
	}
	if req.Offset < 0 || req.Limit < 0 {
		return ReadResult{}, fmt.Errorf("workspace: read %s: offset and limit may not be negative", req.Path)
	}
	first := max(req.Offset, 1)
	limit := req.Limit
	if limit == 0 {
		limit = w.cfg.ReadLines
	}
	f, fi, err := w.openRegular("read", req.Path, rel)
	if err != nil {
		return ReadResult{}, err
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing

	res := ReadResult{Path: filepath.ToSlash(rel)}
	var out strings.Builder
	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(8000)
	if req.Images {
		if mt := ImageType(head); mt != "" {
			img, err := w.readImage(ctx, req.Path, rel, br, fi.Size(), mt)
			if err != nil {
				return ReadResult{}, err
			}
			return ReadResult{Path: img.Path, Image: &img}, nil
		}
		if err := unsupportedImage(req.Path, head); err != nil {
			return ReadResult{}, err
		}
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return ReadResult{}, fmt.Errorf("workspace: read %s: %w", req.Path, ErrBinary)
	}
	n := 0
	err = eachLine(br, w.cfg.MaxLineBytes, func(line []byte, cut bool) error {
		n++
		if n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if n < first || n >= first+limit || res.Truncated {
			return nil
		}
		text := strings.ToValidUTF8(string(line), "\uFFFD")
		if cut {
			text += lineCut
		}
		entry := fmt.Sprintf("%6d\t%s\n", n, text)
		if out.Len()+len(entry) > w.cfg.MaxReadBytes && res.StartLine != 0 {
			res.Truncated = true
			return nil
		}
		out.WriteString(entry)
		if res.StartLine == 0 {
			res.StartLine = n
		}
		res.EndLine = n
		return nil
	})
	if err != nil {
		return ReadResult{}, fmt.Errorf("workspace: read %s: %w", req.Path, err)
	}
	res.TotalLines = n
	if first > n && !(n == 0 && first == 1) {
		return ReadResult{}, fmt.Errorf("workspace: read %s: offset %d is past the end of the file (%d lines)", req.Path, first, n)
	}
	res.Content = out.String()
	return res, nil
}

// openRegular opens the resolved path rel for reading and refuses anything
// but a regular file. It opens without blocking, so a FIFO a command left in
// the workspace cannot hang the tool waiting for a writer, and checks the
// type on the open file, so the check holds for what is read.
func (w *Workspace) openRegular(op, name, rel string) (*os.File, fs.FileInfo, error) {
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, rootErr(op, name, err)
	}
	// refuse closes f, opened read only, where a failed close loses
	// nothing, and returns why it is refused.
	refuse := func(err error) (*os.File, fs.FileInfo, error) {
		_ = f.Close()
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return refuse(rootErr(op, name, err))
	}
	switch {
	case fi.IsDir():
		return refuse(fmt.Errorf("workspace: %s %s: is a directory (use glob to list it)", op, name))
	case !fi.Mode().IsRegular():
		return refuse(fmt.Errorf("workspace: %s %s: not a regular file (%s)", op, name, fi.Mode().Type()))
	}
	if n := linkCount(fi); n > 1 {
		// A hard link is the same file under another name, and nothing
		// tells where its other names are without searching the whole file
		// system: one may lie outside the workspace (a link made to
		// ../../tokens.json). The file tools run with the worker's reach,
		// so they refuse every file with more than one name; a job, which
		// is confined, can still read it (cat) if it may.
		return refuse(fmt.Errorf("workspace: %s %s: refused: the file has %d hard links and another one may be outside the workspace; read it with a command instead (cat %s)", op, name, n, name))
	}
	return f, fi, nil
}

// linkCount is the file's number of hard links, 1 where the system does not
// say.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// eachLine calls fn with every line of r without its line end ("\n" or
// "\r\n"); a line longer than maxLen is given cut to maxLen bytes (on a
// UTF-8 boundary) with cut set. A last line without a newline counts; an
// empty input has no lines.
func eachLine(r *bufio.Reader, maxLen int, fn func(line []byte, cut bool) error) error {
	var long []byte // a line longer than r's buffer, kept up to maxLen
	total, spilled := 0, false
	keep := func(b []byte) {
		if len(long) < maxLen {
			long = append(long, b[:min(len(b), maxLen-len(long))]...)
		}
		total += len(b)
	}
	for {
		chunk, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			keep(chunk)
			spilled = true
			continue
		}
		if err != nil && err != io.EOF {
			return err
		}
		if len(chunk) == 0 && !spilled {
			return nil // end of input right after a newline
		}
		line := bytes.TrimSuffix(chunk, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if spilled {
			keep(line)
			line = long
		} else {
			total = len(line)
		}
		cut := total > maxLen
		if cut {
			line = trimToRune(line[:min(len(line), maxLen)])
		}
		if ferr := fn(line, cut); ferr != nil {
			return ferr
		}
		if err == io.EOF {
			return nil
		}
		long, total, spilled = long[:0], 0, false
	}
}

// trimToRune drops a UTF-8 sequence cut in the middle at the end of b.
func trimToRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		r, size := utf8.DecodeLastRune(b[:len(b)-i])
		if r != utf8.RuneError || size > 1 {
			return b[:len(b)-i]
		}
	}
	return b
}

// WriteRequest asks to create or replace a file with Content.
type WriteRequest struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// WriteResult says what Write did.
type WriteResult struct {
	Path    string `json:"path"` // resolved, relative to the workspace
	Bytes   int    `json:"bytes"`
	Created bool   `json:"created"` // the file did not exist before
}

// Write creates or replaces a file, creating its parent directories. The file
// is written to a temporary file beside it and renamed into place, so a reader
// sees the old content or the new, never a part. A replaced file keeps its
// permissions; a new one gets 0644.
func (w *Workspace) Write(ctx context.Context, req WriteRequest) (WriteResult, error) {
	rel, err := w.resolve(req.Path)
	if err != nil {
		return WriteResult{}, err
	}
	if int64(len(req.Content)) > w.cfg.MaxFileBytes {
		return WriteResult{}, fmt.Errorf("workspace: write %s: %d bytes is more than the limit of %d", req.Path, len(req.Content), w.cfg.MaxFileBytes)
	}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, fmt.Errorf("workspace: write %s: %w", req.Path, err)
	}
	perm := fs.FileMode(0o644)
	created := true
	fi, err := w.root.Lstat(rel)
	switch {
	case err == nil && fi.IsDir():
		return WriteResult{}, fmt.Errorf("workspace: write %s: is a directory", req.Path)
	case err == nil:
		perm, created = fi.Mode().Perm(), false
	case !errors.Is(err, fs.ErrNotExist):
		return WriteResult{}, rootErr("write", req.Path, err)
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return WriteResult{}, rootErr("write", req.Path, err)
		}
	}
	if err := w.writeAtomic(rel, []byte(req.Content), perm, !created); err != nil {
		return WriteResult{}, rootErr("write", req.Path, err)
	}
	return WriteResult{Path: filepath.ToSlash(rel), Bytes: len(req.Content), Created: created}, nil
}

// writeAtomic writes data to a new temporary file in rel's directory and
// renames it over rel. chmod sets perm exactly (past the umask), to keep
// the mode of a file being replaced.
func (w *Workspace) writeAtomic(rel string, data []byte, perm fs.FileMode, chmod bool) error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	// fail removes the temporary file, saying so if it cannot (a stray
	// dot-file left in the workspace), and returns err.
	fail := func(err error) error {
		_ = f.Close() // err is the one to report
		return errors.Join(err, w.root.Remove(tmp))
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if chmod {
		if err := f.Chmod(perm); err != nil {
			return fail(err)
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return errors.Join(err, w.root.Remove(tmp))
	}
	if err := w.root.Rename(tmp, rel); err != nil {
		return errors.Join(err, w.root.Remove(tmp))
	}
	return nil
}

// EditRequest asks to replace Old with New in a file.
type EditRequest struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
	// All replaces every occurrence; without it Old must occur exactly once.
	All bool `json:"all,omitempty"`
}

// EditResult says how many occurrences Edit replaced.
type EditResult struct {
	Path         string `json:"path"` // resolved, relative to the workspace
	Replacements int    `json:"replacements"`
}

// Edit replaces the exact text Old with New in a file and writes it back
// atomically (as Write does). Old must occur exactly once unless All is set:
// no occurrence is ErrNoMatch, several without All is ErrMultipleMatches
// naming the count, so the model can widen Old to make it unique.
func (w *Workspace) Edit(ctx context.Context, req EditRequest) (EditResult, error) {
	rel, err := w.resolve(req.Path)
	if err != nil {
		return EditResult{}, err
	}
	if req.Old == "" {
		return EditResult{}, fmt.Errorf("workspace: edit %s: old text is empty (use write to create a file)", req.Path)
	}
	if req.Old == req.New {
		return EditResult{}, fmt.Errorf("workspace: edit %s: old and new text are the same", req.Path)
	}
	f, fi, err := w.openRegular("edit", req.Path, rel)
	if err != nil {
		return EditResult{}, err
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	if fi.Size() > w.cfg.MaxFileBytes {
		return EditResult{}, fmt.Errorf("workspace: edit %s: %d bytes is more than the limit of %d", req.Path, fi.Size(), w.cfg.MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, w.cfg.MaxFileBytes+1))
	if err != nil {
		return EditResult{}, rootErr("edit", req.Path, err)
	}
	if int64(len(data)) > w.cfg.MaxFileBytes {
		return EditResult{}, fmt.Errorf("workspace: edit %s: the file grew past the limit of %d bytes", req.Path, w.cfg.MaxFileBytes)
	}
	if err := ctx.Err(); err != nil {
		return EditResult{}, fmt.Errorf("workspace: edit %s: %w", req.Path, err)
	}
	text := string(data)
	n := strings.Count(text, req.Old)
	switch {
	case n == 0:
		return EditResult{}, fmt.Errorf("workspace: edit %s: %w (it must match exactly, including whitespace)", req.Path, ErrNoMatch)
	case n > 1 && !req.All:
		return EditResult{}, fmt.Errorf("workspace: edit %s: %w: it occurs %d times; add surrounding lines to make it unique, or set all to replace every one", req.Path, ErrMultipleMatches, n)
	}
	text = strings.ReplaceAll(text, req.Old, req.New)
	if int64(len(text)) > w.cfg.MaxFileBytes {
		return EditResult{}, fmt.Errorf("workspace: edit %s: the result, %d bytes, is more than the limit of %d", req.Path, len(text), w.cfg.MaxFileBytes)
	}
	if err := w.writeAtomic(rel, []byte(text), fi.Mode().Perm(), true); err != nil {
		return EditResult{}, rootErr("edit", req.Path, err)
	}
	return EditResult{Path: filepath.ToSlash(rel), Replacements: n}, nil
}
