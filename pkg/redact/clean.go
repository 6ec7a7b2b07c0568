// Package redact turns raw program output and log text into text that is safe
// to store, show to a person and hand to a model: valid UTF-8, no terminal
// control sequences, and no credentials.
//
// CleanLine is the cleaner a job's output goes through line by line (it fits
// tasks' Spec.Clean); Secrets redacts credentials in a line of text; Text in
// a whole text (tool results, summaries), private keys in PEM armour
// included; JSON in a tool call's arguments; Lines in a job's tail; Writer
// wraps a log destination so that service logs are redacted too.
// docs/SECURITY.md ("Redaction") says what is covered and where.
//
// Redaction is best effort: it recognises the credential shapes listed on
// Secrets and errs on the side of hiding a value when a name says it is a
// secret. It is a safety net for accidents, not a boundary against a program
// that wants to exfiltrate a secret (one that prints it reversed is not caught).
package redact

import (
	"strings"
	"unicode/utf8"
	"unsafe"
)

// maxLineRunes bounds the terminal emulation of one line, so that a stream of
// cursor movements cannot make CleanLine allocate without bound.
const maxLineRunes = 1 << 20

// CleanLine turns one raw output line (without its trailing newline) into
// clean text and redacts secrets in it. It:
//
//   - decodes UTF-8; a byte that is not part of a valid UTF-8 sequence is read
//     as Latin-1 when it is a printable Latin-1 character (0xA0–0xFF, so
//     "caf\xe9" becomes "café") and as U+FFFD otherwise (0x80–0x9F are C1
//     controls in Latin-1, and nothing printable);
//   - strips ANSI/VT escape sequences: CSI (colours, cursor movement), OSC
//     (titles, OSC 8 hyperlinks keep their visible text), DCS/SOS/PM/APC
//     strings, and two- or three-byte escapes such as ESC ( B or ESC 7;
//   - applies what a terminal would show for carriage return, backspace and
//     the line-editing CSIs (erase in line, cursor left/right/column), so a
//     progress bar redrawn with "\r" ends as its last state and "50%\r100%"
//     becomes "100%" ("abcdef\rXY" becomes "XYcdef", as a terminal shows it;
//     every rune counts as one column);
//   - removes every other C0 control, DEL and C1 control except tab;
//   - redacts secrets with Secrets.
//
// The result is valid UTF-8, holds no control character but tab, and
// CleanLine(CleanLine(x)) == CleanLine(x).
func CleanLine(line []byte) string {
	// The common line is printable ASCII with nothing to redact: one pass
	// over it (scan) and the copy it is returned as.
	s := string(line)
	raw, sus := scan(s, false)
	switch {
	case raw:
		return cleanRaw(line, Secrets)
	case sus && len(s) >= 8:
		return applyRules(s, false)
	}
	return s
}

// AppendCleanLine appends CleanLine(line) to dst and returns the extended
// slice. A line that needs no change is copied as it is, with no
// allocation: a job's output goes through here line by line.
func AppendCleanLine(dst, line []byte) []byte {
	// A read-only view of line, used only during this call.
	s := unsafe.String(unsafe.SliceData(line), len(line))
	raw, sus := scan(s, false)
	switch {
	case raw:
		return append(dst, cleanRaw(line, Secrets)...)
	case sus && len(s) >= 8:
		return append(dst, applyRules(s, false)...)
	}
	return append(dst, line...)
}

// cleanLine is CleanLine with the redaction step as a parameter and no fast
// path, so tests can hold CleanLine to it.
func cleanLine(line []byte, redact func(string) string) string {
	if plain(line) {
		return redact(string(line))
	}
	return cleanRaw(line, redact)
}

// cleanRaw decodes and emulates a line that is not plain, then redacts it.
func cleanRaw(line []byte, redact func(string) string) string {
	var t term
	t.run(line)
	return redact(string(t.buf))
}

// plain reports whether line is printable ASCII and tabs only, the common case
// that needs no decoding or emulation.
func plain(line []byte) bool {
	for _, c := range line {
		if (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// term is a one-line terminal: a row of cells and a cursor.
type term struct {
	buf []rune
	cur int
	// erased counts the cells blanked by "erase to start"; past a budget
	// proportional to the input, further ones are ignored so that a hostile
	// line cannot cost quadratic time.
	erased int
}

func (t *term) put(r rune) {
	if t.cur < len(t.buf) {
		t.buf[t.cur] = r
		t.cur++
		return
	}
	if len(t.buf) >= maxLineRunes {
		return
	}
	t.buf = append(t.buf, r)
	t.cur = len(t.buf)
}

const (
	esc = 0x1b
	bel = 0x07
)

// run feeds a raw line through the terminal.
func (t *term) run(line []byte) {
	t.buf = make([]rune, 0, len(line))
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == esc:
			i = t.escape(line, i+1)
		case c == '\r':
			t.cur = 0
			i++
		case c == '\b':
			if t.cur > 0 {
				t.cur--
			}
			i++
		case c == '\t':
			t.put('\t')
			i++
		case c < 0x20 || c == 0x7f:
			i++ // other C0 controls and DEL are dropped
		case c < utf8.RuneSelf:
			t.put(rune(c))
			i++
		default:
			r, n := utf8.DecodeRune(line[i:])
			switch {
			case r == utf8.RuneError && n <= 1:
				t.put(latin1(c))
				i++
			case r == 0x9b: // C1 CSI
				i = t.csi(line, i+n)
			case r == 0x9d || r == 0x90 || r == 0x98 || r == 0x9e || r == 0x9f: // C1 OSC, DCS, SOS, PM, APC
				i = skipString(line, i+n)
			case r >= 0x80 && r < 0xa0:
				i += n // other C1 controls are dropped
			default:
				t.put(r)
				i += n
			}
		}
	}
}

// latin1 decodes a byte that is not valid UTF-8.
func latin1(c byte) rune {
	if c >= 0xa0 {
		return rune(c)
	}
	return utf8.RuneError
}

// escape handles the bytes after an ESC at i and returns where ordinary text
// resumes.
func (t *term) escape(line []byte, i int) int {
	if i >= len(line) {
		return i
	}
	switch line[i] {
	case '[':
		return t.csi(line, i+1)
	case ']', 'P', 'X', '^', '_':
		return skipString(line, i+1)
	}
	// nF escapes: intermediates 0x20–0x2F then one final byte 0x30–0x7E
	// (ESC ( B, ESC # 8); Fp/Fe/Fs escapes are a single final byte (ESC 7).
	for i < len(line) && line[i] >= 0x20 && line[i] <= 0x2f {
		i++
	}
	if i < len(line) && line[i] >= 0x30 && line[i] <= 0x7e {
		i++
	}
	return i
}

// csi parses a control sequence whose parameters start at i, applies the
// line-editing ones and returns the index after it. A sequence broken by a
// byte that cannot belong to it ends there, and that byte is read as text.
func (t *term) csi(line []byte, i int) int {
	start := i
	for i < len(line) && line[i] >= 0x20 && line[i] <= 0x3f {
		i++
	}
	if i >= len(line) || line[i] < 0x40 || line[i] > 0x7e {
		return i
	}
	params := line[start:i]
	final := line[i]
	i++
	if len(params) > 0 && (params[0] < '0' || params[0] > '9') && params[0] != ';' {
		return i // private sequences (ESC [ ? 25 l) do not edit the line
	}
	n := firstParam(params)
	switch final {
	case 'K': // erase in line
		switch n {
		case 0:
			if t.cur < len(t.buf) {
				t.buf = t.buf[:t.cur]
			}
		case 1:
			if t.erased > 8*len(line)+1024 {
				break
			}
			for j := 0; j <= t.cur && j < len(t.buf); j++ {
				t.buf[j] = ' '
			}
			t.erased += t.cur + 1
		case 2:
			t.buf = t.buf[:0]
			t.cur = 0
		}
	case 'C': // cursor forward, never past what was written
		t.cur = min(t.cur+max(n, 1), len(t.buf))
	case 'D': // cursor back
		t.cur = max(t.cur-max(n, 1), 0)
	case 'G': // cursor to column
		t.cur = min(max(n, 1)-1, len(t.buf))
	}
	return i
}

// firstParam is the first numeric parameter of a CSI, 0 when absent; it
// saturates instead of overflowing.
func firstParam(p []byte) int {
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			break
		}
		if n < maxLineRunes {
			n = n*10 + int(c-'0')
		}
	}
	return n
}

// skipString skips an OSC/DCS/SOS/PM/APC string starting at i up to and
// including its terminator: BEL, ST (ESC \) or C1 ST (U+009C). An
// unterminated string runs to the end of the line.
func skipString(line []byte, i int) int {
	for i < len(line) {
		switch c := line[i]; {
		case c == bel:
			return i + 1
		case c == esc:
			if i+1 < len(line) && line[i+1] == '\\' {
				return i + 2
			}
			// An ESC that is not ST ends the string and starts a new escape.
			return i
		case c == 0xc2 && i+1 < len(line) && line[i+1] == 0x9c:
			return i + 2
		}
		i++
	}
	return i
}

// String cleans a whole multi-line text with CleanLine, line by line, keeping
// its newlines; "\r\n" line ends become "\n".
func String(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			b.WriteString(CleanLine([]byte(s)))
			return b.String()
		}
		b.WriteString(CleanLine([]byte(s[:i])))
		b.WriteByte('\n')
		s = s[i+1:]
	}
}
