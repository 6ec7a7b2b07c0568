package redact

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"unsafe"
)

// The fast path. Almost every line a program prints holds no credential, and
// running every rule on it costs about ten times what reading it once does.
// suspect is one pass over the text that finds every place where some rule
// could start to match; text without one is returned untouched and the
// rules run only on the rest. It must never say "clean" for text a rule
// would change: the differential tests (fast path against the rules alone,
// on token soup and under fuzzing) hold it to that.

// Byte classes of the fast path's one pass.
const (
	// clsWord: [A-Za-z0-9_-], what credential prefixes and their bodies
	// (sk-…, ghp_…, xoxb-…, AKIA…, nkey seeds) are made of.
	clsWord = 1 << iota
	// clsToken: [A-Za-z0-9+/], what long random tokens and base64 runs are
	// made of.
	clsToken
	// clsMark: a byte where a rule may start: '=' and ':' (after a secret
	// name, or "://"), '@' (user info), 'b'/'B' ("Bearer"), 'J' ("eyJ").
	clsMark
	// clsRaw: a byte CleanLine must decode or emulate: a control other
	// than tab, DEL, or any byte of a multi-byte or invalid sequence.
	clsRaw
)

var byteClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		if isWord(b) {
			t[c] |= clsWord
		}
		if isB64Body(b) {
			t[c] |= clsToken
		}
		if (b < 0x20 && b != '\t') || b >= 0x7f {
			t[c] |= clsRaw
		}
	}
	for _, c := range []byte("=:@bBJ") {
		t[c] |= clsMark
	}
	return t
}()

// minPrefixedRun is the shortest run of word bytes a prefix rule can
// redact: "xoxb-" and ten more.
const minPrefixedRun = len("xoxb-") + 10

// suspect reports whether a rule of Secrets could change s. False means
// Secrets(s) == s; true means only that the rules must look.
func suspect(s string) bool {
	_, sus := scan(s, false)
	return sus
}

// Unchanged reports whether CleanLine returns every line of text (lines
// separated by '\n') as it is. It is the fast path for a block of lines at
// once, one pass over all of them: a job's output, read in large gulps, is
// mostly blocks of such lines, which can be copied whole. False means only
// that the lines must be cleaned one by one.
func Unchanged(text []byte) bool {
	// A read-only view of text, used only during this call.
	raw, sus := scan(unsafe.String(unsafe.SliceData(text), len(text)), true)
	return !raw && !sus
}

// SWAR constants: a byte of ones, and the top bit of every byte.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// eqMask sets the top bit of each byte of x that equals v. Every byte of x
// must be ASCII (below 0x80), so that no addition carries into the next.
func eqMask(x uint64, v byte) uint64 {
	return ^((x ^ uint64(v)*lsb) + 0x7f*lsb) & msb
}

// rangeMask sets the top bit of each byte of x within [lo, hi]; every byte
// of x must be ASCII.
func rangeMask(x uint64, lo, hi byte) uint64 {
	return (x + uint64(0x80-lo)*lsb) &^ (x + uint64(0x7f-hi)*lsb) & msb
}

// gather packs the top bits of the eight bytes of m into one byte, byte k
// of m (in memory order) becoming bit k.
func gather(m uint64) uint8 { return uint8((m >> 7) * 0x0102040810204080 >> 56) }

// tailWord reads the last len(s)-i (under eight) bytes of s as a
// little-endian word; missing bytes read as spaces, which no rule looks at.
func tailWord(s string, i int) uint64 {
	x := uint64(' ') * lsb
	for k := 0; i+k < len(s); k++ {
		x = x&^(0xff<<(8*k)) | uint64(s[i+k])<<(8*k)
	}
	return x
}

// classifyBytes classifies a word that is not all ASCII, where the masks
// would carry between bytes: one byte at a time, by table. It returns
// whether a byte is raw, and the word, token and mark bytes, one bit each.
func classifyBytes(x uint64) (raw bool, word, token, mark uint8) {
	for k := 0; k < 8; k++ {
		cls := byteClass[byte(x>>(8*k))]
		raw = raw || cls&clsRaw != 0
		word |= (cls & clsWord) << k
		token |= (cls & clsToken >> 1) << k
		mark |= (cls & clsMark >> 2) << k
	}
	return raw, word, token, mark
}

// scan is the fast path's pass over s, eight bytes at a time: raw reports
// whether s holds a byte CleanLine must decode or emulate (see clsRaw), sus
// whether a rule of Secrets could change s.
//
// It first measures runs of visible bytes (above space), a superset of both
// word and token bytes that costs two operations per eight bytes: a line
// without a run of minPrefixedRun of them (most prose and build output) is
// done. Only a line with such a run (a path, a URL, a long identifier) is
// read again for the exact runs.
func scan(s string, lines bool) (raw, sus bool) {
	// In a block of lines a newline is no raw byte; it ends runs as any
	// byte below space does, and the key of a mark is never read across it
	// (keyBefore stops at it), so each line is judged as it would be alone
	// (user info conservatively: "://" and '@' on different lines count).

	// A read-only view of the string's bytes, for word loads.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	var visible, longest int
	at, scheme := false, false
	for i := 0; i < len(b); i += 8 {
		var x uint64
		if i+8 <= len(b) {
			x = binary.LittleEndian.Uint64(b[i:])
		} else {
			x = tailWord(s, i)
		}
		var v, m uint8
		if x&msb == 0 {
			// Bytes below 0x20 and DEL (0x7f + 1 sets the top bit); a tab
			// among them is fine, so such a word is looked at exactly.
			if (^(x+0x60*lsb)|(x+lsb))&msb != 0 {
				ok := eqMask(x, '\t')
				if lines {
					ok |= eqMask(x, '\n')
				}
				raw = raw || (^(x+0x60*lsb)&^ok|eqMask(x, 0x7f))&msb != 0
			}
			v = gather((x + (0x80-0x21)*lsb) & msb)
			// '=' ':' '@' 'B' 'J' all lie in ':'..'J', and 'b' apart; the
			// switch below passes over the other bytes of that range.
			m = gather(rangeMask(x, ':', 'J') | eqMask(x, 'b'))
		} else {
			r, w, t, mm := classifyBytes(x)
			raw = raw || r
			v, m = w|t, mm
		}
		visible, longest = extendRun(visible, v, longest, 1)
		for m != 0 {
			j := i + bits.TrailingZeros8(m)
			m &= m - 1
			if j >= len(s) {
				break
			}
			switch c := s[j]; c {
			case '=', ':':
				if c == ':' && j+2 < len(s) && s[j+1] == '/' && s[j+2] == '/' {
					scheme = true
				}
				sus = sus || secretKeyBefore(s, j)
			case '@':
				at = true
			case 'b', 'B':
				sus = sus || (j+6 <= len(s) && foldEqual(s[j+1:j+6], "earer"))
			case 'J':
				sus = sus || (j >= 2 && s[j-2] == 'e' && s[j-1] == 'y') // a JWT's header
			}
		}
		if lines && (raw || sus) {
			// A block is settled at its first line that needs cleaning:
			// the caller goes on in smaller blocks.
			return raw, true
		}
	}
	// User info, a prefixed credential, a long token or base64 run, a
	// command-line flag.
	sus = sus || (at && scheme) || (longest >= minPrefixedRun && longRuns(s)) || anyFlag(s)
	return raw, sus
}

// anyFlag reports whether s holds a command-line flag with a credential
// (see flagSecret). It looks for '-' with IndexByte rather than in scan's
// word masks: a separate vectorised pass costs less than a fourth mark
// test in every eight bytes of every line.
func anyFlag(s string) bool {
	for i := 0; ; i++ {
		j := strings.IndexByte(s[i:], '-')
		if j < 0 {
			return false
		}
		i += j
		if _, _, ok := flagSecret(s, i, false); ok { // the widest reading
			return true
		}
	}
}

// longRuns reports whether s holds a run of word bytes long enough for a
// prefix rule or a run of token bytes long enough for a long token.
func longRuns(s string) bool {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	var word, token, longest int
	for i := 0; i < len(b); i += 8 {
		var x uint64
		if i+8 <= len(b) {
			x = binary.LittleEndian.Uint64(b[i:])
		} else {
			x = tailWord(s, i)
		}
		var w, t uint8
		if x&msb == 0 {
			low := x | 0x20*lsb
			alnum := rangeMask(low, 'a', 'z') | rangeMask(x, '0', '9')
			w = gather(alnum | eqMask(x, '_') | eqMask(x, '-'))
			t = gather(alnum | eqMask(x, '+') | eqMask(x, '/'))
		} else {
			_, w, t, _ = classifyBytes(x)
		}
		// Scaled so that one comparison covers both thresholds.
		word, longest = extendRun(word, w, longest, minTokenLen)
		token, longest = extendRun(token, t, longest, minPrefixedRun)
	}
	return longest >= minPrefixedRun*minTokenLen
}

// extendRun continues a run of run bytes with the next eight (bits, one
// per byte in order) and returns the run that reaches their end and the
// longest run seen, scaled by scale. A run within the eight bytes alone is
// shorter than any threshold; only runs that reach an edge can matter.
func extendRun(run int, bits8 uint8, longest, scale int) (int, int) {
	if bits8 == 0xff {
		run += 8
		return run, max(longest, run*scale)
	}
	longest = max(longest, (run+bits.TrailingZeros8(^bits8))*scale)
	return bits.LeadingZeros8(^bits8), longest
}

// foldEqual reports whether s equals the lower-case ASCII word w, ignoring
// ASCII case.
func foldEqual(s, w string) bool {
	for i := 0; i < len(w); i++ {
		if s[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}

// secretKeyBefore reports whether the key keyValues would read before the
// separator at s[i] names a secret or an Authorization header.
func secretKeyBefore(s string, i int) bool {
	name, _, _, _ := keyBefore(s, i)
	if name == "" {
		return false
	}
	var buf [64]byte
	n := appendNormalized(buf[:0], name)
	return authNormalized(n) || secretNormalized(n) || keyNormalized(n)
}

// keyBefore reads the key before the separator at s[i] backwards: blanks, an
// optional closing quote (maybe backslash-escaped), then name bytes. It
// returns the name, the quote (0 without), whether the quote was escaped,
// and where the name starts.
func keyBefore(s string, i int) (name string, quote byte, escaped bool, start int) {
	k := i
	for k > 0 && isBlank(s[k-1]) {
		k--
	}
	if k > 0 && (s[k-1] == '"' || s[k-1] == '\'') {
		quote = s[k-1]
		k--
		if k > 0 && s[k-1] == '\\' {
			escaped = true
			k--
		}
	}
	end := k
	for k > 0 && isNameByte(s[k-1]) {
		k--
	}
	return s[k:end], quote, escaped, k
}
