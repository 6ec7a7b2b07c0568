package redact

import (
	"bytes"
	"strings"
)

func isNameByte(c byte) bool { return isAlnum(c) || c == '_' || c == '-' || c == '.' }

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// secretWords are the name parts that mark a value as secret. TOKEN is
// handled apart because "tokens" and "tokenizer" are not secrets.
var secretWords = []string{"SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "PRIVATE_KEY", "CREDENTIAL"}

// normalizeName spells a key the one way secretName looks for: camelCase
// split into words, '-' and '.' as '_', upper case ("apiKey" and "api-key"
// become "API_KEY").
func normalizeName(name string) string {
	return string(appendNormalized(make([]byte, 0, len(name)+4), name))
}

// appendNormalized appends the normalized name to b (see normalizeName).
func appendNormalized(b []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if isUpper(c) && i > 0 {
			p := name[i-1]
			nextLower := i+1 < len(name) && isLower(name[i+1])
			if isLower(p) || isDigit(p) || (isUpper(p) && nextLower) {
				b = append(b, '_')
			}
		}
		switch {
		case c == '-' || c == '.':
			c = '_'
		case isLower(c):
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// secretName reports whether a key names a secret.
func secretName(name string) bool { return secretNormalized([]byte(normalizeName(name))) }

// secretNormalized reports whether a normalized key names a secret.
func secretNormalized(n []byte) bool {
	if pathName(n) {
		return false
	}
	for _, w := range secretWords {
		if bytes.Contains(n, []byte(w)) {
			return true
		}
	}
	// PASS as a word of its own next to another (DB_PASS, SMTP_PASS), not
	// inside one (PASSED, BYPASS, PASSTHROUGH) and not alone, which is go
	// test's "--- PASS: TestName".
	if len(n) > len("PASS") && namePart(n, "PASS") {
		return true
	}
	for from := 0; ; {
		j := bytes.Index(n[from:], []byte("TOKEN"))
		if j < 0 {
			return false
		}
		end := from + j + len("TOKEN")
		if end == len(n) || !isUpper(n[end]) {
			return true
		}
		from = end
	}
}

// namePart reports whether w is one of the '_'-separated parts of the
// normalized name n.
func namePart(n []byte, w string) bool {
	for from := 0; from+len(w) <= len(n); {
		j := bytes.Index(n[from:], []byte(w))
		if j < 0 {
			return false
		}
		at, end := from+j, from+j+len(w)
		if (at == 0 || n[at-1] == '_') && (end == len(n) || n[end] == '_') {
			return true
		}
		from = at + 1
	}
	return false
}

// keyNormalized reports whether a normalized key has KEY as a part of its
// own (SIGNING_KEY, ENCRYPTION_KEY, KEY): often a secret, but as often a
// sort key, a primary key or a YAML "key: app". Its value is redacted only
// when it looks like key material (see keyMaterial), where a secret name's
// value always is.
func keyNormalized(n []byte) bool { return !pathName(n) && namePart(n, "KEY") }

// pathName reports whether a normalized key names where a secret is kept
// rather than the secret (PASSWORD_FILE, KEY_PATH, SECRETS_DIR, as Docker
// and Kubernetes spell them), whose value is a path to show.
func pathName(n []byte) bool {
	for _, suffix := range []string{"_FILE", "_PATH", "_DIR"} {
		if bytes.HasSuffix(n, []byte(suffix)) {
			return true
		}
	}
	return false
}

// keyMaterial reports whether the value of a KEY name looks like a key: 16
// or more bytes of hex or base64 that are 32 or more hex digits, or mix
// letters and digits the way random text does.
func keyMaterial(v string) bool {
	if len(v) < 16 {
		return false
	}
	hex := true
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !isB64URL(c) && c != '+' && c != '/' && c != '=' {
			return false
		}
		hex = hex && (isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
	}
	if hex {
		return len(v) >= 32
	}
	return randomLooking(strings.TrimRight(v, "="))
}

// authNormalized reports whether a normalized key is an Authorization
// header, whose value is a scheme followed by credentials.
func authNormalized(n []byte) bool {
	return bytes.HasSuffix(n, []byte("AUTHORIZATION"))
}

// keepValue reports whether a value is left alone although its name is
// secret: nothing, a literal, a placeholder, a structure, or a value another
// rule already redacted (which keeps its non-secret prefix).
func keepValue(v string) bool {
	if v == "" || strings.Contains(v, Marker) {
		return true
	}
	switch v[0] {
	case '{', '[', '$':
		return true
	}
	if v[0] == '<' && v[len(v)-1] == '>' {
		return true
	}
	if strings.Trim(v, "*") == "" {
		return true
	}
	for _, lit := range []string{"true", "false", "null", "none", "nil"} {
		if strings.EqualFold(v, lit) {
			return true
		}
	}
	return false
}

// unquotedEnd is where an unquoted value starting at i ends. A Marker in it
// is one piece, so its ']' does not end the value, and so is a backslash
// escape, so that a value is never cut inside one (a JSON string would
// break).
func unquotedEnd(s string, i int) int {
	for i < len(s) {
		if strings.HasPrefix(s[i:], Marker) {
			i += len(Marker)
			continue
		}
		c := s[i]
		if c == '\\' {
			i = min(i+2, len(s))
			continue
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || strings.IndexByte(",;&\"')]}", c) >= 0 {
			break
		}
		i++
	}
	return i
}

// quotedEnd is where the content of a string opened with quote q at i-1
// ends: before the closing quote, skipping backslash escapes, or at the end.
// A single-quoted string also ends before a double quote, which in a log
// line is more likely the end of the JSON string around it.
func quotedEnd(s string, i int, q byte) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
			continue
		case q:
			return i
		case '"':
			return i
		}
		i++
	}
	return len(s)
}

// escapedQuotedEnd is where the content of a string opened with a
// backslash-escaped quote (\" or \') ends: before the matching escaped
// quote, or before an unescaped double quote (the end of the JSON string that
// holds it), or at the end.
func escapedQuotedEnd(s string, i int, q byte) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			if i+1 < len(s) && s[i+1] == q {
				return i
			}
			i += 2
			continue
		case '"':
			return i
		}
		i++
	}
	return len(s)
}

// keyValues redacts the values of keys that name secrets (see Secrets).
func keyValues(s string, inJSON bool) string {
	if !strings.ContainsAny(s, "=:") {
		return s
	}
	var b strings.Builder
	var buf [64]byte
	norm := buf[:0]
	last := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '=' && c != ':' {
			continue
		}
		next := byte(0)
		if i+1 < len(s) {
			next = s[i+1]
		}
		if next == '=' || (c == '=' && i > 0 && strings.IndexByte("=!<>:+-*/|&^%", s[i-1]) >= 0) {
			continue // ==, !=, :=, +=: code, not configuration
		}
		// The key, backwards: blanks, an optional closing quote (maybe
		// backslash-escaped), then name bytes.
		name, keyQuote, escaped, k := keyBefore(s, i)
		if name == "" || k < last {
			continue
		}
		norm = appendNormalized(norm[:0], name)
		auth := authNormalized(norm)
		weak := false
		if !auth && !secretNormalized(norm) {
			if !keyNormalized(norm) {
				continue
			}
			weak = true
		}
		// The value.
		v := i + 1
		for v < len(s) && isBlank(s[v]) {
			v++
		}
		if v >= len(s) {
			continue
		}
		var cs, ce int
		quoted := true
		switch {
		case s[v] == '\\' && v+1 < len(s) && (s[v+1] == '"' || s[v+1] == '\''):
			cs = v + 2
			ce = escapedQuotedEnd(s, cs, s[v+1])
		case inJSON && s[v] == '"' && (keyQuote != '"' || escaped):
			// In JSON an opening quote inside a string would be escaped:
			// this one ends the string that holds "name:".
			i = v
			continue
		case s[v] == '"' || s[v] == '\'':
			cs = v + 1
			ce = quotedEnd(s, cs, s[v])
		default:
			quoted = false
			cs = v
			ce = unquotedEnd(s, cs)
		}
		if auth {
			cs, ce = authCredentials(s, cs, ce, quoted)
		}
		if keepValue(s[cs:ce]) || (weak && !keyMaterial(s[cs:ce])) || (!auth && !quoted && c == ':' && keyQuote == 0 && prose(s, cs, ce)) {
			// Skip the value as a whole: rescanning it from the next
			// separator could take quadratic time on hostile input.
			i = max(i, ce-1)
			continue
		}
		b.WriteString(s[last:cs])
		if !quoted && keyQuote == '"' && !escaped {
			b.WriteString(`"` + Marker + `"`) // keep JSON valid
		} else {
			b.WriteString(Marker)
		}
		last = ce
		i = ce - 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// prose reports whether the unquoted value s[cs:ce] after "name:" reads as
// the rest of a sentence ("invalid token: context deadline exceeded"): a
// lower-case word followed by more words. Such text stays readable; a
// "password: letmein" at the end of a line is still redacted.
func prose(s string, cs, ce int) bool {
	for _, e := range osErrors {
		if strings.HasPrefix(s[cs:], e) {
			return true
		}
	}
	for i := cs; i < ce; i++ {
		if !isLower(s[i]) {
			return false
		}
	}
	return ce+1 < len(s) && isBlank(s[ce]) && !isBlank(s[ce+1])
}

// osErrors are the messages programs print after "name: " when a file or
// a command named like a secret (secrets.sh, /etc/app/token) is missing or
// refused: "secrets.sh: No such file or directory" is no password.
var osErrors = []string{
	"No such file or directory", "Permission denied", "Is a directory", "Not a directory",
	"command not found", "not found", "Operation not permitted", "File exists",
	"cannot open", "cannot access", "No such ", "Read-only file system",
}

// authCredentials narrows an Authorization value to the credentials after
// its scheme ("Basic dXNlcjpwdw==" → "dXNlcjpwdw=="); a value without a
// scheme is all credentials.
func authCredentials(s string, cs, ce int, quoted bool) (int, int) {
	w := span(s, cs, isAlpha)
	if w == cs || w >= len(s) || !isBlank(s[w]) {
		return cs, ce
	}
	c := w
	for c < len(s) && isBlank(s[c]) {
		c++
	}
	if quoted {
		if c > ce {
			return ce, ce
		}
		return c, ce
	}
	return c, unquotedEnd(s, c)
}
