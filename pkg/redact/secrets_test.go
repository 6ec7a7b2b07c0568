package redact

import (
	"strings"
	"testing"
)

// fake returns a deterministic random-looking alphanumeric string of length
// n; tests build credentials from it rather than committing real-looking keys.
func fake(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alphabet[x%uint32(len(alphabet))]
	}
	return string(b)
}

func base32Fake(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[(i*7+3)%len(alphabet)]
	}
	return string(b)
}

func TestSecrets_redacts_credentials(t *testing.T) {
	tok := fake(40)
	jwt := "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	tests := []struct {
		name, in, want string
	}{
		{"openai key", "key is sk-" + tok, "key is sk-[REDACTED]"},
		{"anthropic key keeps family", "ANTHROPIC=sk-ant-api03-" + tok, "ANTHROPIC=sk-ant-[REDACTED]"},
		{"openai project key", "using sk-proj-" + tok + " now", "using sk-proj-[REDACTED] now"},
		{"openai service account key", "sk-svcacct-" + tok, "sk-svcacct-[REDACTED]"},
		{"github classic pat", "ghp_" + fake(36), "ghp_[REDACTED]"},
		{"github oauth", "token gho_" + fake(36) + ".", "token gho_[REDACTED]."},
		{"github app token in url", "https://x-access-token:ghs_" + fake(36) + "@github.com/o/r.git", "https://x-access-token:[REDACTED]@github.com/o/r.git"},
		{"github fine grained pat", "github_pat_11ABCDEFG0_" + fake(59), "github_pat_[REDACTED]"},
		{"slack bot", "xoxb-1234567890-" + fake(24), "xoxb-[REDACTED]"},
		{"slack user", "(xoxp-12345-67890-abcdef)", "(xoxp-[REDACTED])"},
		{"aws access key id", "aws_access_key_id AKIAIOSFODNN7EXAMPLE", "aws_access_key_id AKIA[REDACTED]"},
		{"aws session key id", "ASIA" + "ZZZZ1234ZZZZ1234", "ASIA[REDACTED]"},
		{"nats seed", "SUA" + base32Fake(55), "S[REDACTED]"},
		{"jwt", "token " + jwt, "token eyJ[REDACTED]"},
		{"jwt with empty signature", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "eyJ[REDACTED]"},
		{"bearer header", "Authorization: Bearer abc123def456", "Authorization: Bearer [REDACTED]"},
		{"bearer lower case", "curl -H 'authorization: bearer " + tok + "'", "curl -H 'authorization: bearer [REDACTED]'"},
		{"bearer jwt", "Bearer " + jwt, "Bearer eyJ[REDACTED]"},
		{"basic auth header", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]"},
		{"auth header json", `{"Authorization":"Basic dXNlcjpwYXNz"}`, `{"Authorization":"Basic [REDACTED]"}`},
		{"url password", "postgres://app:hunter2@db:5432/x", "postgres://app:[REDACTED]@db:5432/x"},
		{"env token", "GITHUB_TOKEN=abc", "GITHUB_TOKEN=[REDACTED]"},
		{"env secret spaces", "CLIENT_SECRET = s3cr3t more", "CLIENT_SECRET = [REDACTED] more"},
		{"password colon", "password: letmein", "password: [REDACTED]"},
		{"passwd", "db_passwd=x1", "db_passwd=[REDACTED]"},
		{"api key dash", "x-api-key: 12345", "x-api-key: [REDACTED]"},
		{"apikey", "apikey=abcdef", "apikey=[REDACTED]"},
		{"camel api key", `{"apiKey": "abcdef"}`, `{"apiKey": "[REDACTED]"}`},
		{"private key", "PRIVATE_KEY='-----BEGIN'", "PRIVATE_KEY='[REDACTED]'"},
		{"credentials", "credentials=/run/creds.json", "credentials=[REDACTED]"},
		{"json password", `{"user":"bob","password":"p@ss \"w\" rd","n":1}`, `{"user":"bob","password":"[REDACTED]","n":1}`},
		{"json unquoted value stays json", `{"token_count":5}`, `{"token_count":"[REDACTED]"}`},
		{"escaped json", `msg="{\"secret\":\"xyz\"}"`, `msg="{\"secret\":\"[REDACTED]\"}"`},
		{"query string", "GET /cb?access_token=abc123&state=ok", "GET /cb?access_token=[REDACTED]&state=ok"},
		{"cli flag", "--password=hunter2", "--password=[REDACTED]"},
		{"access token camel", "accessToken: 'zzz'", "accessToken: '[REDACTED]'"},
		{"long random token", "session " + tok + " ok", "session [REDACTED] ok"},
		{"two secrets", "A_TOKEN=1 B_SECRET=2", "A_TOKEN=[REDACTED] B_SECRET=[REDACTED]"},
		{"pem body line", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj", "[REDACTED]"},
		{"pem last line with padding", "  Zm9vYmFyYmF6cXV4" + fake(30) + "+a/b==", "  [REDACTED]"},
		{"aws secret access key alone", "key " + fake(20)[3:] + "/" + fake(23) + " ok", "key [REDACTED] ok"},
		{"url keeps its words", "GET https://api.example.com/v1/" + tok + "/status", "GET https://api.example.com/v1/[REDACTED]/status"},
		{"value at end of line after colon", "invalid token: expired", "invalid token: [REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Secrets(tt.in); got != tt.want {
				t.Errorf("Secrets(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSecrets_leaves_ordinary_text_alone(t *testing.T) {
	tests := []struct{ name, in string }{
		{"git sha", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8"},
		{"sha256 digest", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"uuid", "run 123e4567-e89b-12d3-a456-426614174000 started"},
		{"path", "/home/runner/go/pkg/mod/github.com/nats-io/nats-server/v2@v2.15.2/server/jetstream.go:123"},
		{"go test name", "--- PASS: TestHeadline_is_one_short_line_and_more_words (0.00s)"},
		{"camel identifier", "AbstractSingletonProxyFactoryBean2Implementation"},
		{"task word", "task-1234567890abcdefghijklmnop done"},
		{"risk word", "risk-free-long-hyphenated-words-here"},
		{"llm usage", `{"input_tokens":1234,"output_tokens":56,"max_tokens":4096}`},
		{"usage kv", "max_tokens=4096 tokenizer=cl100k"},
		{"bearer prose", "Bearer authentication is configured"},
		{"bearer already", "Authorization: Bearer [REDACTED]"},
		{"empty value", `password=""`},
		{"placeholder env", "API_KEY=${API_KEY}"},
		{"placeholder dollar", "TOKEN=$GITHUB_TOKEN"},
		{"placeholder angle", "--token=<your-token>"},
		{"masked", "password: ********"},
		{"boolean", "require_password=true"},
		{"nested object", `"credentials": {"user": "bob"}`},
		{"comparison", "if token == nil {"},
		{"go assign", "token := os.Getenv(x)"},
		{"error prose", "failed to refresh token: context deadline exceeded"},
		{"file error", "open /etc/app/token: no such file or directory"},
		{"url without password", "https://user@example.com/path?q=1"},
		{"url port", "http://localhost:8080/v1/sessions"},
		{"go sum", "github.com/nats-io/nats.go v1.55.0 h1:Abcdefghijk0123456789LmnopQRSTuvwxYZ012345=/a+b"},
		{"short sk", "sk-short"},
		{"sk words", "sk-learning-is-fun-for-everyone"},
		{"akia too short", "AKIA1234"},
		{"base32 upper not seed", "SUMMARY OF THE RESULTS"},
		{"eyJ not jwt", "eyJhbGciOiJIUzI1NiJ9 alone"},
		{"prose", "The quick brown fox jumps over the lazy dog, 42 times."},
		{"hex upper", "0xDEADBEEFDEADBEEFDEADBEEFDEADBEEF00"},
		{"timestamp", "2026-11-30T12:34:56.789Z level=info msg=started"},
		{"headline", "job 3 (gh) exited 0 after 21m"},
		{"long slash path", "/home/runner/work/Jetway2/jetway/pkg/workspace/testdata/fuzz/FuzzResolve/Case12"},
		{"base64 words", "c29tZSBwbGFpbiB0ZXh0 is base64 for some plain text"},
		{"url path", "https://github.com/nats-io/nats-server/blob/main/server/jetstream_cluster.go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Secrets(tt.in); got != tt.in {
				t.Errorf("Secrets(%q) = %q, want it unchanged", tt.in, got)
			}
		})
	}
}

func TestSecrets_is_idempotent_on_its_cases(t *testing.T) {
	for _, in := range []string{
		"sk-ant-api03-" + fake(50),
		"token=ghp_" + fake(36),
		"https://token:abc@host/x",
		`{"token_count":5,"password":"x"}`,
		"Bearer abc123 Bearer def456",
		"Authorization: Basic abc ghp_" + fake(30),
		"password: letmein",
	} {
		once := Secrets(in)
		if twice := Secrets(once); twice != once {
			t.Errorf("Secrets not idempotent on %q:\n once %q\ntwice %q", in, once, twice)
		}
		if once == in {
			t.Errorf("Secrets(%q) redacted nothing", in)
		}
	}
}

func TestRandomLooking_accepts_random_and_refuses_words(t *testing.T) {
	if !randomLooking(fake(32)) {
		t.Errorf("fake(32) = %q not judged random", fake(32))
	}
	for _, w := range []string{"AbstractSingletonProxyFactoryBean2", "ThisIsAVeryLongCamelCaseName123456", strings.Repeat("aB1", 3) + strings.Repeat("x", 30)} {
		if randomLooking(w) {
			t.Errorf("%q judged random", w)
		}
	}
}

func TestSecretName_reads_name_styles(t *testing.T) {
	for name, want := range map[string]bool{
		"GITHUB_TOKEN": true, "accessToken": true, "x-api-key": true, "ApiKey": true, "APIKey": true,
		"client.secret": true, "DB_PASSWORD": true, "privateKey": true, "aws_credentials": true,
		"max_tokens": false, "tokenizer": false, "user": false, "path": false, "token2": true,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v (normalized %q)", name, got, want, normalizeName(name))
		}
	}
}
