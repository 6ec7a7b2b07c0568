package redact

import "strings"

// Credentials written as command-line flags, which no NAME=value rule sees
// because the name and the value are separate words: "--password hunter2",
// "--api-key x", "curl -u user:pw", "curl --user=user:pw" and mysql's
// glued "-phunter2". The model writes such commands, and a person reads
// them back in job summaries, tool-use events and transcripts.

// flagSecret reports whether a flag starts at s[i] (a '-' at the start of
// a word) whose value is a credential, and where that credential lies.
// Both the rule (commandLine) and the fast path (scan) ask it, so they
// cannot disagree.
func flagSecret(s string, i int, inJSON bool) (from, to int, ok bool) {
	// A flag starts a word: after a blank, a quote, or a newline (a block
	// of lines, which the fast path reads at once, holds them).
	if i+2 >= len(s) || (i > 0 && !isBlank(s[i-1]) && s[i-1] != '"' && s[i-1] != '\'' && s[i-1] != '\n') {
		return 0, 0, false
	}
	switch s[i+1] {
	case '-':
		e := span(s, i+2, isWord)
		if e == i+2 || e >= len(s) {
			return 0, 0, false
		}
		var buf [64]byte
		n := appendNormalized(buf[:0], s[i+2:e])
		user := string(n) == "USER"
		switch {
		case s[e] == '=' && user:
			// --user=name:password; a secret name's --name=value is the
			// key-value rule's.
			return userPassword(s, e+1, inJSON)
		case isBlank(s[e]) && user:
			return userPassword(s, skipBlanks(s, e), inJSON)
		case isBlank(s[e]) && (secretNormalized(n) || authNormalized(n)):
			return flagValue(s, skipBlanks(s, e), inJSON)
		}
	case 'u':
		if isBlank(s[i+2]) {
			return userPassword(s, skipBlanks(s, i+2), inJSON) // curl -u name:password
		}
	case 'p':
		// mysql and its tools take the password glued to -p; elsewhere
		// (mkdir -p, gcc -pthread) -p is no password.
		if !isBlank(s[i+2]) && (strings.Contains(s[:i], "mysql") || strings.Contains(s[:i], "mariadb")) {
			return flagValue(s, i+2, inJSON)
		}
	}
	return 0, 0, false
}

func skipBlanks(s string, i int) int { return span(s, i, isBlank) }

// flagValue is the value that starts at v, quoted or not, unless it is a
// placeholder or another flag. In a JSON document (inJSON) a double quote
// there ends the string that holds the flag: there is no value.
func flagValue(s string, v int, inJSON bool) (from, to int, ok bool) {
	if v >= len(s) || s[v] == '-' || (inJSON && s[v] == '"') {
		return 0, 0, false
	}
	from, to = v, unquotedEnd(s, v)
	if s[v] == '"' || s[v] == '\'' {
		from = v + 1
		to = quotedEnd(s, from, s[v])
	}
	if keepValue(s[from:to]) {
		return 0, 0, false
	}
	return from, to, true
}

// userPassword is the password of a name:password value that starts at v.
func userPassword(s string, v int, inJSON bool) (from, to int, ok bool) {
	from, to, ok = flagValue(s, v, inJSON)
	if !ok {
		return 0, 0, false
	}
	c := strings.IndexByte(s[from:to], ':')
	if c < 0 || from+c+1 == to || keepValue(s[from+c+1:to]) {
		return 0, 0, false
	}
	return from + c + 1, to, true
}

// commandLine redacts the credentials of command-line flags (see
// flagSecret); inJSON as for secrets.
func commandLine(s string, inJSON bool) string {
	if !strings.Contains(s, "-") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '-' || i < last {
			continue
		}
		from, to, ok := flagSecret(s, i, inJSON)
		if !ok || from < last {
			continue
		}
		b.WriteString(s[last:from])
		b.WriteString(Marker)
		last = to
		i = to - 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}
