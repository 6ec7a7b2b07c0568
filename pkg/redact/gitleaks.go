package redact

//go:generate go run gen_gitleaks.go

import (
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// The maintained rules. gitleaks_rules.go is gitleaks's default rule set,
// generated from a pinned release (see gen_gitleaks.go for why a table and
// not the module); this file runs it the way gitleaks does: a rule's regular
// expression runs only on text holding one of its keywords (case-folded), a
// match counts only when its secret's Shannon entropy exceeds the rule's
// threshold, and the global and the rule's allowlists can drop it. What is
// replaced is the rule's secret group, not the whole match, so
// "token=glpat-…" keeps "token=".
//
// The rules run only on text that holds a run of 15 word bytes
// ([A-Za-z0-9_-]) or 32 base64 bytes ([A-Za-z0-9+/]), the same test the fast
// path (fast.go) makes, so that the fast path stays exact for them by
// construction. Every credential these rules describe has such a run (the
// shortest, a Stripe key, is "sk_live_" and ten more); a contrived match
// without one ("SG.a.b.c…", which gitleaks's SendGrid expression allows) is
// passed by, a price for not running 220 expressions on every line.

// glRule is one rule as gitleaks's configuration writes it.
type glRule struct {
	id          string
	regex       string
	keywords    []string // lower case; none means always run
	entropy     float64  // the secret's entropy must exceed it; 0: no test
	secretGroup int      // 0: the first non-empty group, or the match
	allow       []glAllow
}

// glAllow is an allowlist: a match is dropped when target (its secret, the
// whole match, or the line) matches one of regexes, or its secret holds one
// of stopwords. paths marks a list that also names file paths; with and
// set, the path must match too, which no text can, so such a list never
// drops a match.
type glAllow struct {
	target    string
	regexes   []string
	stopwords []string
	paths     bool
	and       bool
}

type compiledAllow struct {
	target    string
	res       []*regexp.Regexp
	stopwords []string
}

type compiledRule struct {
	*glRule
	re    *regexp.Regexp
	allow []compiledAllow
}

// keywordHit is a keyword and the rule it enables.
type keywordHit struct {
	word string
	rule int
}

// gitleaks is the compiled rule set, built on first use: compiling 220
// expressions costs milliseconds that a CLI command that never redacts
// should not pay.
var gitleaks = sync.OnceValue(func() *glSet {
	set := &glSet{global: compileAllow(gitleaksGlobalAllow), byPair: map[uint16][]keywordHit{}}
	for i := range gitleaksRules {
		r := &gitleaksRules[i]
		cr := compiledRule{glRule: r, re: regexp.MustCompile(r.regex)}
		for _, a := range r.allow {
			if a.paths && a.and {
				continue
			}
			cr.allow = append(cr.allow, compileAllow(a))
		}
		set.rules = append(set.rules, cr)
		if len(r.keywords) == 0 {
			set.always = append(set.always, i)
		}
		for _, k := range r.keywords {
			p := pairOf(k[0], k[1])
			set.first[p] = true
			set.byPair[p] = append(set.byPair[p], keywordHit{k, i})
		}
	}
	return set
})

type glSet struct {
	rules  []compiledRule
	global compiledAllow
	always []int
	// first marks the keywords' first two bytes, byPair lists them: one
	// pass over the text finds every keyword (case-folded) with a table
	// look-up a byte, as gitleaks's Aho-Corasick prefilter does.
	first  [1 << 16]bool
	byPair map[uint16][]keywordHit
}

func pairOf(a, b byte) uint16 { return uint16(lowerASCII(a))<<8 | uint16(lowerASCII(b)) }

func lowerASCII(c byte) byte {
	if isUpper(c) {
		return c + 'a' - 'A'
	}
	return c
}

// lowerEqual reports whether s, in ASCII lower case, equals w. Unlike
// foldEqual it leaves bytes other than letters alone ("sk_live").
func lowerEqual(s, w string) bool {
	for i := 0; i < len(w); i++ {
		if lowerASCII(s[i]) != w[i] {
			return false
		}
	}
	return true
}

func compileAllow(a glAllow) compiledAllow {
	c := compiledAllow{target: a.target, stopwords: a.stopwords}
	for _, r := range a.regexes {
		c.res = append(c.res, regexp.MustCompile(r))
	}
	return c
}

// allowed reports whether an allowlist drops a finding.
func (a *compiledAllow) allowed(secret, match, line string) bool {
	target := secret
	switch a.target {
	case "match":
		target = match
	case "line":
		target = line
	}
	for _, re := range a.res {
		if re.MatchString(target) {
			return true
		}
	}
	if len(a.stopwords) > 0 {
		low := strings.ToLower(secret)
		for _, w := range a.stopwords {
			if strings.Contains(low, w) {
				return true
			}
		}
	}
	return false
}

// entropy is the Shannon entropy of s in bits a byte, as gitleaks computes it.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var h float64
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// active returns the rules whose keywords s holds, and the rules without
// keywords.
func (g *glSet) active(s string) []int {
	var on [4]uint64 // one bit a rule; there are fewer than 256
	var list []int
	add := func(i int) {
		if on[i/64]&(1<<(i%64)) == 0 {
			on[i/64] |= 1 << (i % 64)
			list = append(list, i)
		}
	}
	for _, i := range g.always {
		add(i)
	}
	for i := 0; i+1 < len(s); i++ {
		p := pairOf(s[i], s[i+1])
		if !g.first[p] {
			continue
		}
		for _, h := range g.byPair[p] {
			if len(s)-i >= len(h.word) && lowerEqual(s[i:i+len(h.word)], h.word) {
				add(h.rule)
			}
		}
	}
	return list
}

// gitleaksSecrets replaces the secrets gitleaks's rules find in s.
func gitleaksSecrets(s string) string {
	g := gitleaks()
	type span struct{ from, to, keep int }
	var spans []span
	for _, ri := range g.active(s) {
		r := &g.rules[ri]
		for _, m := range r.re.FindAllStringSubmatchIndex(s, -1) {
			from, to := m[0], m[1]
			switch {
			case r.secretGroup > 0 && 2*r.secretGroup+1 < len(m):
				from, to = m[2*r.secretGroup], m[2*r.secretGroup+1]
			case r.secretGroup == 0:
				for k := 2; k+1 < len(m); k += 2 {
					if m[k] >= 0 && m[k+1] > m[k] {
						from, to = m[k], m[k+1]
						break
					}
				}
			}
			if from < 0 || to <= from {
				continue
			}
			secret := s[from:to]
			// A secret across a quote or a backslash is a match across the
			// strings of a JSON document (a log event) or an escape, which
			// replacing would break; no credential has either.
			if strings.Contains(secret, Marker) || strings.ContainsAny(secret, "\"\\") {
				continue
			}
			if r.entropy != 0 && entropy(secret) <= r.entropy {
				continue
			}
			match := s[m[0]:m[1]]
			if g.global.allowed(secret, match, s) {
				continue
			}
			dropped := false
			for k := range r.allow {
				if r.allow[k].allowed(secret, match, s) {
					dropped = true
					break
				}
			}
			if dropped {
				continue
			}
			spans = append(spans, span{from, to, keptPrefix(secret, r.keywords)})
		}
	}
	if len(spans) == 0 {
		return s
	}
	// Overlapping findings (two rules on one token) become one redaction.
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		if sp.to <= last {
			continue
		}
		from := max(sp.from, last)
		if from == sp.from {
			from += sp.keep
		}
		b.WriteString(s[last:from])
		b.WriteString(Marker)
		last = sp.to
	}
	b.WriteString(s[last:])
	return b.String()
}

// keptPrefix is how much of a secret stays readable: a keyword of its rule
// it starts with, when that keyword is a credential's public prefix
// ("glpat-", "AIza", "sk_live", with the separator after it) and leaves 12
// or more bytes to hide.
func keptPrefix(secret string, keywords []string) int {
	keep := 0
	for _, k := range keywords {
		if len(k) < 3 || len(k) <= keep || len(secret) < len(k) || !lowerEqual(secret[:len(k)], k) {
			continue
		}
		n := len(k)
		if n < len(secret) && strings.IndexByte("_-.", secret[n]) >= 0 && strings.IndexByte("_-.", k[n-1]) < 0 {
			n++
		}
		if len(secret)-n >= 12 {
			keep = n
		}
	}
	return keep
}
