package redact_test

import (
	"strings"
	"testing"

	"jetway/pkg/auth"
	"jetway/pkg/redact"
	"jetway/pkg/redact/redacttest"
)

func TestCorpus_every_credential_is_redacted_everywhere(t *testing.T) {
	for _, c := range redacttest.Corpus() {
		t.Run(c.Name, func(t *testing.T) {
			for name, got := range map[string]string{
				"Secrets":   redact.Secrets(c.Text),
				"Text":      redact.Text(c.Text),
				"CleanLine": redact.CleanLine([]byte(c.Text)),
			} {
				if strings.Contains(got, c.Secret) {
					t.Errorf("%s(%q) = %q: the secret is still there", name, c.Text, got)
				}
				if !strings.Contains(got, redact.Marker) {
					t.Errorf("%s(%q) = %q: no marker", name, c.Text, got)
				}
				if again := redact.Secrets(got); again != got {
					t.Errorf("%s not idempotent: %q then %q", name, got, again)
				}
			}
		})
	}
}

func TestCorpus_ordinary_text_comes_through_unchanged(t *testing.T) {
	for _, in := range redacttest.Ordinary {
		if got := redact.Secrets(in); got != in {
			t.Errorf("Secrets(%q) = %q, want it unchanged", in, got)
		}
		if got := redact.CleanLine([]byte(in)); got != in {
			t.Errorf("CleanLine(%q) = %q, want it unchanged", in, got)
		}
	}
	all := strings.Join(redacttest.Ordinary, "\n") + "\n"
	if got := redact.Text(all); got != all {
		t.Errorf("Text changed ordinary text:\n%s", got)
	}
}

func TestText_hides_a_private_key_block_whole(t *testing.T) {
	key, body := redacttest.PEMKey()
	in := "$ cat id_rsa\n" + key + "\n$ echo done\ndone\n"
	got := redact.Text(in)
	if want := "$ cat id_rsa\n" + redact.Marker + "\n$ echo done\ndone\n"; got != want {
		t.Errorf("Text:\n got %q\nwant %q", got, want)
	}
	// Cut short, the block hides everything after its BEGIN line.
	cut := "key:\n" + key[:200]
	if got := redact.Text(cut); got != "key:\n"+redact.Marker {
		t.Errorf("Text(cut block) = %q", got)
	}
	for _, line := range strings.Split(body, "\n") {
		if len(line) >= 32 && strings.Contains(redact.CleanLine([]byte(line)), line) {
			t.Errorf("CleanLine passed a key body line %q", line)
		}
	}
}

func TestCorpus_every_jetway_token_is_redacted_whole(t *testing.T) {
	const n = 10000
	for i := range n {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range []string{tok, "JETWAY_TOKEN=" + tok, "curl -H 'Authorization: Bearer " + tok + "' " + tok[:0], "grant " + tok + " ok"} {
			got := redact.Secrets(in)
			// No piece of the token's random part of 6 bytes or more
			// may survive ("jw_[REDACTED]-JMng94" once did).
			body := tok[len("jw_"):]
			for k := 0; k+6 <= len(body); k++ {
				if strings.Contains(got, body[k:k+6]) {
					t.Fatalf("token %d: Secrets(%q) = %q keeps %q", i, in, got, body[k:k+6])
				}
			}
		}
	}
}
