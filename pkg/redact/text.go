package redact

import "strings"

// Text redacts a whole text that a model or a person reads: a tool's
// result, a file read, a command the model wrote, a job's summary. It
// applies Secrets to each line, and replaces a private key in PEM armour,
// from its BEGIN line through its END line, with one Marker: its body
// lines are base64 that the line rules can only judge one at a time (a
// short last line looks like a word), and the block as a whole is certain.
// A BEGIN line without its END (output cut short) hides everything after
// it; an END line without its BEGIN (a tail) hides the base64 lines before
// it. Unlike CleanLine it keeps control bytes and line ends as they are, so
// that a file read through it keeps its bytes where nothing is secret.
func Text(s string) string {
	s = privateKeys(s)
	if len(s) < 8 {
		return s
	}
	if raw, sus := scan(s, true); !raw && !sus {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			b.WriteString(Secrets(s))
			return b.String()
		}
		b.WriteString(Secrets(s[:i]))
		b.WriteByte('\n')
		s = s[i+1:]
	}
}

const pemBegin, pemEnd = "-----BEGIN ", "-----END "

// privateKeys replaces PEM private key blocks (see Text). A block cut
// short at its end (output that stops) runs to the end of s; one cut short
// at its start (a tail of output, "tail key.pem") runs back over the
// base64 lines before its END line.
func privateKeys(s string) string {
	if !strings.Contains(s, "-----") {
		return s
	}
	var b strings.Builder
	last := 0
	for from := 0; ; {
		j := strings.Index(s[from:], "-----")
		if j < 0 {
			break
		}
		at := from + j
		from = at + 5
		var begin bool
		switch {
		case strings.HasPrefix(s[at:], pemBegin):
			begin = true
		case strings.HasPrefix(s[at:], pemEnd):
		default:
			continue
		}
		marker := pemEnd
		if begin {
			marker = pemBegin
		}
		label, ok := pemLabel(s, at+len(marker))
		if !ok || !strings.Contains(label, "PRIVATE KEY") {
			continue
		}
		start, end := at, at+len(marker)+len(label)+5
		if begin {
			end = len(s)
			if k := strings.Index(s[from:], pemEnd+label+"-----"); k >= 0 {
				end = from + k + len(pemEnd+label+"-----")
			}
		} else {
			start = base64LinesBefore(s, at, last)
		}
		b.WriteString(s[last:start])
		b.WriteString(Marker)
		last, from = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// base64LinesBefore is where the run of lines of base64 (a key's body)
// that ends right before s[at] starts, no earlier than floor: the line
// right before, whatever its length (a body's last line is short), and
// before it lines of 40 or more (a body's lines are 64 or 70), so that a
// word on a line of its own above a key's tail stays.
func base64LinesBefore(s string, at, floor int) int {
	start := at
	for first := true; start > floor; first = false {
		// s[start-1] ends the previous line.
		if s[start-1] != '\n' {
			break
		}
		ls := strings.LastIndexByte(s[floor:start-1], '\n') + 1 + floor
		line := strings.TrimSuffix(s[ls:start-1], "\r")
		if line == "" || span(line, 0, isStdBase64) != len(line) || (!first && len(line) < 40) {
			break
		}
		start = ls
	}
	return start
}

// Lines applies Text's private key rule to lines of output kept apart (a
// job's tail): CleanLine, which cleaned each, sees one line at a time and
// cannot tell a key's short last line from a word. It returns lines itself
// when they hold no private key.
func Lines(lines []string) []string {
	for _, l := range lines {
		if strings.Contains(l, "-----") {
			joined := strings.Join(lines, "\n")
			if out := privateKeys(joined); out != joined {
				return strings.Split(out, "\n")
			}
			return lines
		}
	}
	return lines
}

// pemLabel reads the label of a PEM line ("RSA PRIVATE KEY") from i up to
// its closing dashes.
func pemLabel(s string, i int) (string, bool) {
	e := span(s, i, func(c byte) bool { return isUpperDigit(c) || c == ' ' })
	if e == i || !strings.HasPrefix(s[e:], "-----") {
		return "", false
	}
	return s[i:e], true
}
