package redact

import (
	"strings"
)

// Marker replaces a secret. A short prefix that names the kind of credential
// and is not itself secret is kept in front of it ("sk-ant-[REDACTED]",
// "ghp_[REDACTED]", "Bearer [REDACTED]", "API_KEY=[REDACTED]"), so a reader can
// still tell which credential was there.
const Marker = "[REDACTED]"

// Secrets returns s with credentials replaced by Marker. It recognises:
//
//   - API keys by their prefix: sk-… (OpenAI and Anthropic, keeping sk-ant-,
//     sk-proj-, sk-svcacct-, sk-admin-; the rest must be 20 or more of
//     [A-Za-z0-9_-] holding a letter and a digit), GitHub ghp_, gho_, ghs_,
//     ghu_, ghr_ (20 or more alphanumerics) and github_pat_, Slack xoxb-,
//     xoxp-, xoxa-, xoxr-, xoxs-, AWS access key ids AKIA…/ASIA… (16 more
//     of [A-Z0-9]), NATS nkey seeds (S + O/A/U/N/C/X + 56 base32) and
//     jetway's tokens and codes (jw_, jwn_, jwp_, jwsi_ + 20 or more
//     base64url, redacted whole);
//     a prefix counts only at the start of a word ("task-…" is no "sk-…");
//   - JWTs: three dot-separated base64url segments, the first starting eyJ
//     (kept: "eyJ[REDACTED]");
//   - the credentials after "Bearer " (case-insensitive) when they hold a digit
//     or are 20 characters or longer (so "Bearer authentication" stays), and
//     after the scheme of an Authorization header ("Authorization: Basic …");
//   - the password in a URL's user info (https://user:[REDACTED]@host);
//   - the value of NAME=value, NAME: value, "name": "value" and the same with
//     single or backslash-escaped quotes, when NAME — split at camelCase,
//     '-' and '.' into '_'-joined upper-case words — contains TOKEN, SECRET,
//     PASSWORD, PASSWD, API_KEY, APIKEY, PRIVATE_KEY or CREDENTIAL. TOKEN
//     counts only when no letter follows it, so the token counts of LLM usage
//     (max_tokens, input_tokens) and "tokenizer" stay readable. A quoted value
//     is replaced up to its closing quote, an unquoted one up to the next
//     space or one of , ; & " ' ) ] } (so a passphrase with spaces in an
//     unquoted "password: two words" loses only its first word). Left alone
//     are values that are empty, true, false, null, a placeholder ($VAR,
//     ${VAR}, <...>, ***), start with { or [ (an object or a list), or were
//     already redacted by a rule above (keeping their prefix); the right
//     side of == and :=, which is code, not configuration; and after an
//     unquoted "name:" a lower-case word followed by more words, which is
//     prose ("failed to refresh token: context deadline exceeded"). An
//     unquoted value after a double-quoted key becomes "[REDACTED]" with
//     quotes, so that JSON stays JSON;
//   - any other run of 32 or more ASCII letters and digits that mixes upper
//     case and lower case, has digits in two or more places apart, and
//     changes between those three classes at 30% or more of its positions,
//     as random tokens do (a random alphanumeric string changes at about 60%
//     and holds 16% digits; about 3% of random 32-character strings fail the
//     test, under 1% of 40-character ones). Hex digests and UUIDs (one
//     case), paths and identifiers (CamelCaseName123 has one digit group)
//     stay, and so do the hashes after h1:, sha1-, sha256-, sha384- and
//     sha512-. A run of 40 or more base64 characters holding '+' or '/'
//     (a line of a PEM private key, an AWS secret key) is judged whole, the
//     same way, when at most one in 16 of its characters is '/' (paths have
//     more) and it does not continue a name across '.', '-', '_', '@', '%'
//     or '~' ("example.com/v1/…" is a path), and is redacted with its '='
//     padding; other tokens written with
//     other characters ('_', '-', '+', '/') are judged by their alphanumeric
//     runs;
//   - names with PASS as a word next to another (DB_PASS), and names with
//     KEY as a word (SIGNING_KEY) when the value looks like key material;
//     names ending in _FILE, _PATH or _DIR stay (they say where a secret
//     is), and so does an OS error after "name: " ("secrets.sh: No such
//     file or directory");
//   - credentials in command-line flags (cmdline.go): --password x and any
//     flag named like a secret, curl -u / --user name:password, mysql's
//     -ppassword;
//   - whatever gitleaks's rules find (gitleaks.go), on text holding a run
//     of 15 word bytes or 32 base64 bytes.
//
// The rules are applied until nothing changes, so
// Secrets(Secrets(s)) == Secrets(s).
func Secrets(s string) string { return secrets(s, false) }

// maxPasses bounds the passes of secrets; text needing more is contrived.
const maxPasses = 8

// secrets is Secrets; inJSON is set for text that is one JSON document
// (a zerolog event), where a double quote right after "name:" closes the
// string that holds it instead of opening a value.
//
// The rules run again until nothing changes, because one redaction can
// expose another: a key whose value was skipped as already redacted, or a
// key name that was itself a random-looking run, reads differently once its
// neighbours are markers. Running to the fixed point is what makes
// Secrets(Secrets(s)) == Secrets(s). Text without secrets takes one pass.
func secrets(s string, inJSON bool) string {
	if len(s) < 8 || !suspect(s) {
		return s
	}
	return applyRules(s, inJSON)
}

// applyRules runs the rules to their fixed point, without the fast path.
func applyRules(s string, inJSON bool) string {
	for range maxPasses {
		t := pass(s, inJSON)
		if t == s {
			break
		}
		s = t
	}
	return s
}

// pass applies every rule once.
func pass(s string, inJSON bool) string {
	s = prefixed(s)
	s = jwts(s)
	s = bearers(s)
	s = userinfo(s)
	s = keyValues(s, inJSON)
	s = commandLine(s, inJSON)
	if longRuns(s) {
		s = gitleaksSecrets(s)
	}
	s = longTokens(s)
	return s
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return isLower(c) || isUpper(c) }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }

// isWord is what may stand right before a credential prefix without making
// it part of a longer word.
func isWord(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

func isB64URL(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

func isBase32(c byte) bool { return isUpper(c) || (c >= '2' && c <= '7') }

func isUpperDigit(c byte) bool { return isUpper(c) || isDigit(c) }

// wordStart reports whether a word may start at s[i]: at the start, after a
// byte that is not a word byte, or after an escape such as the \n of text
// quoted in JSON.
func wordStart(s string, i int) bool {
	return i == 0 || !isWord(s[i-1]) || escapeEnd(s, i) == i
}

// escaped reports whether s[i] follows an odd run of backslashes, so that it
// is the second byte of an escape (\n, \", \u…).
func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// escapeEnd returns where the escape that holds s[i-1] ends: i when s[i-1]
// closes a one-letter escape (\n \t \r \b \f) or \uXXXX ends at i, and -1
// when s[i-1] is not the end of an escape.
func escapeEnd(s string, i int) int {
	if i >= 2 && escaped(s, i-1) && strings.IndexByte("ntrbf", s[i-1]) >= 0 {
		return i
	}
	if i >= 6 && s[i-5] == 'u' && escaped(s, i-5) && isHex4(s[i-4:i]) {
		return i
	}
	return -1
}

// skipEscape returns where ordinary text resumes when s[i] is the escaped
// byte of a backslash escape (so a run of word bytes after "\n" or
// "\u00e9" does not take the escape's letters), or i otherwise.
func skipEscape(s string, i int) int {
	if i == 0 || !escaped(s, i) {
		return i
	}
	if s[i] == 'u' && i+5 <= len(s) && isHex4(s[i+1:i+5]) {
		return i + 5
	}
	return i + 1
}

func isHex4(h string) bool {
	for j := 0; j < len(h); j++ {
		c := h[j]
		if !isDigit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F') {
			return false
		}
	}
	return len(h) == 4
}

// span returns the end of the run of bytes from i that satisfy ok.
func span(s string, i int, ok func(byte) bool) int {
	for i < len(s) && ok(s[i]) {
		i++
	}
	return i
}

// prefixRule is a credential recognised by its prefix.
type prefixRule struct {
	prefix string
	body   func(byte) bool
	min    int // fewest body bytes
	exact  bool
	check  func(body string) bool
}

var prefixRules = []prefixRule{
	{prefix: "sk-", body: isB64URL, min: 20, check: letterAndDigit},
	{prefix: "ghp_", body: isAlnum, min: 20},
	{prefix: "gho_", body: isAlnum, min: 20},
	{prefix: "ghs_", body: isAlnum, min: 20},
	{prefix: "ghu_", body: isAlnum, min: 20},
	{prefix: "ghr_", body: isAlnum, min: 20},
	{prefix: "github_pat_", body: func(c byte) bool { return isAlnum(c) || c == '_' }, min: 20},
	{prefix: "xoxb-", body: isB64URL, min: 10},
	{prefix: "xoxp-", body: isB64URL, min: 10},
	{prefix: "xoxa-", body: isB64URL, min: 10},
	{prefix: "xoxr-", body: isB64URL, min: 10},
	{prefix: "xoxs-", body: isB64URL, min: 10},
	{prefix: "jw_", body: isB64URL, min: 20},
	{prefix: "jwn_", body: isB64URL, min: 20},
	{prefix: "jwp_", body: isB64URL, min: 20},
	{prefix: "jwsi_", body: isB64URL, min: 20},
	{prefix: "AKIA", body: isUpperDigit, min: 16, exact: true},
	{prefix: "ASIA", body: isUpperDigit, min: 16, exact: true},
	{prefix: "SO", body: isBase32, min: 56, exact: true},
	{prefix: "SA", body: isBase32, min: 56, exact: true},
	{prefix: "SU", body: isBase32, min: 56, exact: true},
	{prefix: "SN", body: isBase32, min: 56, exact: true},
	{prefix: "SC", body: isBase32, min: 56, exact: true},
	{prefix: "SX", body: isBase32, min: 56, exact: true},
}

// skKinds are the non-secret family names kept after "sk-".
var skKinds = []string{"ant-", "proj-", "svcacct-", "admin-"}

func letterAndDigit(s string) bool {
	var l, d bool
	for i := 0; i < len(s); i++ {
		l = l || isAlpha(s[i])
		d = d || isDigit(s[i])
	}
	return l && d
}

// prefixed redacts credentials recognised by their prefix.
func prefixed(s string) string {
	if !strings.ContainsAny(s, "sgxjAS") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 's', 'g', 'x', 'j', 'A', 'S':
		default:
			continue
		}
		if !wordStart(s, i) {
			continue
		}
		for _, r := range prefixRules {
			if !strings.HasPrefix(s[i:], r.prefix) {
				continue
			}
			from := i + len(r.prefix)
			end := span(s, from, r.body)
			n := end - from
			if n < r.min || (r.exact && n != r.min) {
				continue
			}
			if r.check != nil && !r.check(s[from:end]) {
				continue
			}
			keep := from
			if r.prefix == "sk-" {
				for _, k := range skKinds {
					if strings.HasPrefix(s[from:end], k) {
						keep += len(k)
						break
					}
				}
			}
			if r.prefix[0] == 'S' && len(r.prefix) == 2 {
				keep = i + 1 // "S" alone: the second letter is part of the key
			}
			b.WriteString(s[last:keep])
			b.WriteString(Marker)
			last = end
			i = end - 1
			break
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// jwts redacts JSON Web Tokens, keeping "eyJ".
func jwts(s string) string {
	if !strings.Contains(s, "eyJ") {
		return s
	}
	var b strings.Builder
	last := 0
	for from := 0; ; {
		j := strings.Index(s[from:], "eyJ")
		if j < 0 {
			break
		}
		i := from + j
		from = i + 3
		if !wordStart(s, i) {
			continue
		}
		e1 := span(s, i, isB64URL)
		if e1-i < 10 || e1 >= len(s) || s[e1] != '.' {
			continue
		}
		e2 := span(s, e1+1, isB64URL)
		if e2-e1-1 < 2 || e2 >= len(s) || s[e2] != '.' {
			continue
		}
		e3 := span(s, e2+1, isB64URL)
		b.WriteString(s[last : i+3])
		b.WriteString(Marker)
		last = e3
		from = e3
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isToken68(c byte) bool {
	return isAlnum(c) || strings.IndexByte("-._~+/", c) >= 0
}

// bearers redacts the credentials after "Bearer ".
func bearers(s string) string {
	var b strings.Builder
	last := 0
	for from := 0; ; {
		i := indexFold(s, from, "bearer")
		if i < 0 {
			break
		}
		from = i + 6
		if i > 0 && isAlpha(s[i-1]) && escapeEnd(s, i) != i {
			continue
		}
		k := i + 6
		ws := span(s, k, func(c byte) bool { return c == ' ' || c == '\t' })
		if ws == k {
			continue
		}
		end := span(s, ws, isToken68)
		for end > ws && s[end-1] == '.' {
			end-- // a sentence's full stop, not part of the token
		}
		end = span(s, end, func(c byte) bool { return c == '=' })
		tok := s[ws:end]
		if !credentialLike(tok) {
			continue
		}
		b.WriteString(s[last:ws])
		b.WriteString(Marker)
		last = end
		from = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// credentialLike tells a credential after an auth scheme from a word.
func credentialLike(tok string) bool {
	if len(tok) >= 20 {
		return true
	}
	for i := 0; i < len(tok); i++ {
		if isDigit(tok[i]) {
			return true
		}
	}
	return false
}

// userinfo redacts the password of scheme://user:password@host.
func userinfo(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	last := 0
	for from := 0; ; {
		j := strings.Index(s[from:], "://")
		if j < 0 {
			break
		}
		start := from + j + 3
		from = start
		end := start
		for end < len(s) && strings.IndexByte("/?# \t\"'<>", s[end]) < 0 {
			end++
		}
		at := strings.LastIndexByte(s[start:end], '@')
		if at < 0 {
			continue
		}
		at += start
		colon := strings.IndexByte(s[start:at], ':')
		if colon < 0 {
			continue
		}
		pw := start + colon + 1
		if pw == at || strings.HasPrefix(s[pw:at], Marker) {
			continue
		}
		b.WriteString(s[last:pw])
		b.WriteString(Marker)
		last = at
		from = at
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// indexFold is the index of the first ASCII case-insensitive match of the
// lower-case word w in s at or after from, or -1; it allocates nothing.
func indexFold(s string, from int, w string) int {
	for i := from; i+len(w) <= len(s); i++ {
		if s[i]|0x20 == w[0] && strings.EqualFold(s[i:i+len(w)], w) {
			return i
		}
	}
	return -1
}

// digestPrefixes introduce hashes that look random but are not secrets.
var digestPrefixes = []string{"h1:", "sha1-", "sha256-", "sha384-", "sha512-"}

func isStdBase64(c byte) bool { return isAlnum(c) || c == '+' || c == '/' || c == '=' }

// longTokens redacts long random-looking alphanumeric runs (see Secrets).
func longTokens(s string) string {
	if len(s) < minTokenLen {
		return s
	}
	var b strings.Builder
	last := 0
	redact := func(from, to int) {
		b.WriteString(s[last:from])
		b.WriteString(Marker)
		last = to
	}
	for i := 0; i < len(s); {
		if !isB64Body(s[i]) {
			i++
			continue
		}
		if j := skipEscape(s, i); j != i {
			i = j
			continue
		}
		if digestAt(s, i) {
			i = span(s, i, isStdBase64)
			continue
		}
		end := span(s, i, isB64Body)
		if run := s[i:end]; len(run) >= minBase64Len && strings.ContainsAny(run, "+/") &&
			strings.Count(run, "/")*16 <= len(run) && !joined(s, i, end) && randomLooking(run) {
			redact(i, span(s, end, func(c byte) bool { return c == '=' }))
			i = last
			continue
		}
		for k := i; k < end; {
			if !isAlnum(s[k]) {
				k++
				continue
			}
			e := span(s, k, isAlnum)
			if e-k >= minTokenLen && randomLooking(s[k:e]) {
				redact(k, e)
			}
			k = e
		}
		i = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isB64Body(c byte) bool { return isAlnum(c) || c == '+' || c == '/' }

// joined reports whether the run s[i:end] continues a host name, file name
// or word ("example.com/v1/…"), so it is a path, not one base64 value.
func joined(s string, i, end int) bool {
	const glue = ".-_@%~"
	return (i > 0 && strings.IndexByte(glue, s[i-1]) >= 0) ||
		(end < len(s) && strings.IndexByte(glue, s[end]) >= 0)
}

// digestAt reports whether the run at i follows a digest prefix (h1:,
// sha256-, ...) that starts a word.
func digestAt(s string, i int) bool {
	for _, p := range digestPrefixes {
		if strings.HasSuffix(s[:i], p) && (i == len(p) || !isAlnum(s[i-len(p)-1])) {
			return true
		}
	}
	return false
}

// minBase64Len is the shortest run with '+' or '/' judged whole as base64
// (a PEM body line is 64); shorter ones are judged by their alphanumeric
// runs, so a URL path keeps its words.
const minBase64Len = 40

const minTokenLen = 32

// randomLooking reports whether a run mixes upper case, lower case and
// digits, has digits in two or more places and switches between the classes
// (upper, lower, digit, and base64's '+' and '/') at 30% or more of its
// positions. Identifiers fail on the digits (CamelCaseName123 has one group)
// or the switches (long words).
func randomLooking(t string) bool {
	class := func(c byte) int {
		switch {
		case isUpper(c):
			return 0
		case isLower(c):
			return 1
		case isDigit(c):
			return 2
		}
		return 3 // '+' and '/' of base64
	}
	var seen [4]bool
	changes, digitRuns := 0, 0
	prev := -1
	for i := 0; i < len(t); i++ {
		c := class(t[i])
		seen[c] = true
		if c != prev {
			if prev >= 0 {
				changes++
			}
			if c == 2 {
				digitRuns++
			}
		}
		prev = c
	}
	return seen[0] && seen[1] && digitRuns >= 2 && changes*10 >= (len(t)-1)*3
}
