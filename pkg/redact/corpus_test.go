package redact_test

import (
	"encoding/json"
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

func TestText_hides_a_private_key_tail_back_to_its_body(t *testing.T) {
	key, _ := redacttest.PEMKey()
	lines := strings.Split(key, "\n")
	tail := "$ tail -4 id_rsa\n" + strings.Join(lines[len(lines)-4:], "\n") + "\nok"
	if got, want := redact.Text(tail), "$ tail -4 id_rsa\n"+redact.Marker+"\nok"; got != want {
		t.Errorf("Text(tail):\n got %q\nwant %q", got, want)
	}
	// A job's tail: lines cleaned one by one, the key's short last line
	// among them.
	job := append([]string{"start"}, lines[len(lines)-3:]...)
	got := redact.Lines(job)
	if len(got) != 2 || got[0] != "start" || got[1] != redact.Marker {
		t.Errorf("Lines(%q) = %q", job, got)
	}
	plain := []string{"a", "----- separator -----", "b"}
	if got := redact.Lines(plain); &got[0] != &plain[0] {
		t.Errorf("Lines changed lines without a key: %q", got)
	}
}

func TestJSON_redacts_strings_as_text_and_keeps_the_command_shape(t *testing.T) {
	cases := redacttest.Corpus()
	var lines []string
	for _, c := range cases {
		lines = append(lines, c.Text)
	}
	pem, _ := redacttest.PEMKey()
	in, err := json.Marshal(map[string]any{"command": strings.Join(lines, "\n") + "\n" + pem, "timeout": 30, "password": "Hunter2pw"})
	if err != nil {
		t.Fatal(err)
	}
	out := redact.JSON(in)
	var got struct {
		Command  string
		Timeout  json.Number
		Password string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("JSON output is not JSON: %v\n%s", err, out)
	}
	for _, c := range cases {
		if strings.Contains(string(out), c.Secret) {
			t.Errorf("JSON keeps the %s: %q", c.Name, c.Secret)
		}
	}
	if got.Password != redact.Marker || got.Timeout != "30" || !strings.HasSuffix(got.Command, "\n"+redact.Marker) {
		t.Errorf("JSON = %s", out)
	}
	plain := json.RawMessage(`{"command":"go test ./pkg/redact/ -run Corpus","timeout":30}`)
	if out := redact.JSON(plain); &out[0] != &plain[0] {
		t.Errorf("JSON rewrote a document without secrets: %s", out)
	}
}
