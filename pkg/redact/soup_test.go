package redact

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// soupParts are the pieces the rules look at; random sequences of them reach
// the corners of the rules far faster than random bytes do.
var soupParts = []string{
	"token", "TOKEN", "password", "apiKey", "Authorization", "secret", "max_tokens",
	"=", ":", ": ", " = ", "==", ":=", `"`, `\"`, "'", `\'`, "\\", `\\`, `\n`, `\u00e9`,
	"Bearer ", "bearer\t", "Basic ", "://", "@", "user", "sk-", "sk-ant-", "ghp_", "AKIA",
	"eyJ", ".", "-", "_", " ", "{", "}", "[", "]", ",", ";", "&", "$", "<", ">", "*",
	Marker, "abc", "x1", "true", "\t", "/", "h1:", "é",
	"--password ", "--api-key=", " -u ", "mysql -p", "\n", "jw_", "sk_live_", "glpat-", "AIza", "SG.",
	"DB_PASS", "SIGNING_KEY", "_FILE", "No such file or directory", "-----BEGIN RSA PRIVATE KEY-----",
}

func soup(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(14) + 1 {
		if r.IntN(8) == 0 {
			b.WriteString(fake(20 + r.IntN(30))[r.IntN(10):])
			continue
		}
		b.WriteString(soupParts[r.IntN(len(soupParts))])
	}
	return b.String()
}

func TestSecrets_is_idempotent_on_token_soup(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range soupRounds {
		in := soup(r)
		once := Secrets(in)
		if twice := Secrets(once); twice != once {
			t.Fatalf("Secrets not idempotent on %q:\n once %q\ntwice %q", in, once, twice)
		}
	}
}

func TestWriter_output_is_json_on_token_soup(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var buf bytes.Buffer
	log := zerolog.New(Writer(&buf))
	for range soupRounds {
		buf.Reset()
		key, value, msg := soup(r), soup(r), soup(r)
		log.Info().Str(key, value).Msg(msg)
		if !json.Valid(buf.Bytes()) {
			t.Fatalf("Str(%q, %q).Msg(%q): redacted event is not JSON:\n%s", key, value, msg, buf.Bytes())
		}
	}
}

// soupRounds keeps the soup tests to seconds: most soup holds some of
// gitleaks's keywords and long runs, so its expressions run on it.
var soupRounds = 8000
