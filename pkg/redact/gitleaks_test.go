package redact

import (
	"testing"
)

func TestGitleaksRules_keywords_are_lower_case(t *testing.T) {
	for _, r := range gitleaksRules {
		for _, k := range r.keywords {
			for i := 0; i < len(k); i++ {
				if isUpper(k[i]) {
					t.Errorf("rule %s: keyword %q is not lower case; the prefilter folds only the text", r.id, k)
				}
			}
		}
	}
}
