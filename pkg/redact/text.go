package redact

import "strings"

// Text redacts a whole text that a model or a person reads: a tool's
// result, a file read, a command the model wrote, a job's summary. It
// applies Secrets to each line, and replaces a private key in PEM armour,
// from its BEGIN line through its END line, with one Marker: its body
// lines are base64 that the line rules can only judge one at a time (a
// short last line looks like a word), and the block as a whole is certain.
// A BEGIN line without its END (output cut short) hides everything after
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

// privateKeys replaces PEM private key blocks (see Text).
func privateKeys(s string) string {
	if !strings.Contains(s, pemBegin) {
		return s
	}
	var b strings.Builder
	last := 0
	for from := 0; ; {
		j := strings.Index(s[from:], pemBegin)
		if j < 0 {
			break
		}
		start := from + j
		from = start + len(pemBegin)
		label, ok := pemLabel(s, from)
		if !ok || !strings.Contains(label, "PRIVATE KEY") {
			continue
		}
		end := len(s)
		if k := strings.Index(s[from:], pemEnd+label+"-----"); k >= 0 {
			end = from + k + len(pemEnd+label+"-----")
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

// pemLabel reads the label of a PEM line ("RSA PRIVATE KEY") from i up to
// its closing dashes.
func pemLabel(s string, i int) (string, bool) {
	e := span(s, i, func(c byte) bool { return isUpperDigit(c) || c == ' ' })
	if e == i || !strings.HasPrefix(s[e:], "-----") {
		return "", false
	}
	return s[i:e], true
}
