// Package redacttest holds the redaction corpus: credentials in the shapes
// jobs and models write them, and ordinary text that must pass unchanged.
// It is shared by pkg/redact's tests and by the tests that check every
// surface a person or a model reads (tool results, tool-use events, job
// lines, transcripts, SSE, logs), so that all of them hold the same list.
package redacttest

import "strings"

// fakeKey returns deterministic random-looking text of length n over
// alphabet; the corpus builds credentials from it rather than committing
// real-looking keys.
func fakeKey(n int, seed uint32, alphabet string) string {
	b := make([]byte, n)
	x := seed | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alphabet[x%uint32(len(alphabet))]
	}
	return string(b)
}

const (
	alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	hex   = "0123456789abcdef"
	b64   = alnum + "+/"
	// base32 is the nkeys alphabet (RFC 4648).
	base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
)

// SecretCase is a text holding one credential, the credential, and where
// it came from.
type SecretCase struct {
	Name, Text, Secret string
}

// Corpus is every credential shape redaction must catch, each in the
// context a job or a model writes it in.
func Corpus() []SecretCase {
	awsSecret := fakeKey(18, 11, alnum) + "/" + fakeKey(21, 12, alnum)
	ant := "sk-ant-api03-" + fakeKey(93, 13, alnum+"-_") + "AA"
	sg := "SG." + fakeKey(22, 14, alnum+"-_") + "." + fakeKey(43, 15, alnum+"-_")
	hook := fakeKey(24, 16, alnum)
	hex64 := fakeKey(64, 17, hex)
	return []SecretCase{
		{"aws access key id", "aws_access_key_id = AKIA" + fakeKey(16, 1, upper), fakeKey(16, 1, upper)},
		{"aws secret key file", "aws_secret_access_key=" + awsSecret, awsSecret},
		{"aws secret key export", "export AWS_SECRET_ACCESS_KEY=" + awsSecret, awsSecret},
		{"aws secret key alone", "found " + awsSecret + " in config", awsSecret},
		{"github classic", "remote: ghp_" + fakeKey(36, 2, alnum), fakeKey(36, 2, alnum)},
		{"github oauth", "gho_" + fakeKey(36, 3, alnum), fakeKey(36, 3, alnum)},
		{"github app", "GH=ghs_" + fakeKey(36, 4, alnum), fakeKey(36, 4, alnum)},
		{"github fine-grained", "github_pat_11A" + fakeKey(70, 5, alnum+"_"), fakeKey(70, 5, alnum+"_")},
		{"anthropic", "key " + ant, ant[7:]},
		{"anthropic export", "export ANTHROPIC_API_KEY=" + ant + " && ./run", ant[7:]},
		{"openai", "OPENAI=sk-" + fakeKey(48, 6, alnum), fakeKey(48, 6, alnum)},
		{"openai project", "sk-proj-" + fakeKey(48, 7, alnum+"-_"), fakeKey(48, 7, alnum+"-_")},
		{"gitlab", "git clone https://oauth2@gitlab.com glpat-" + fakeKey(20, 8, alnum), fakeKey(20, 8, alnum)},
		{"google api key", "key=AIza" + fakeKey(35, 9, alnum+"-_"), fakeKey(35, 9, alnum+"-_")},
		{"google api key alone", "maps AIza" + fakeKey(35, 10, alnum) + " quota", fakeKey(35, 10, alnum)},
		{"stripe live", "stripe sk_live_" + fakeKey(24, 18, alnum), fakeKey(24, 18, alnum)},
		{"stripe restricted", "rk_live_" + fakeKey(24, 19, alnum), fakeKey(24, 19, alnum)},
		{"sendgrid", "SENDGRID=" + sg + " done", sg[3:]},
		{"sendgrid alone", "using " + sg, sg[3:]},
		{"slack webhook", "curl -X POST https://hooks.slack.com/services/T0" + fakeKey(8, 20, upper) + "/B0" + fakeKey(9, 21, upper) + "/" + hook, hook},
		{"slack bot", "xoxb-2048-" + fakeKey(24, 22, alnum), fakeKey(24, 22, alnum)},
		{"slack user", "xoxp-1234-5678-" + fakeKey(24, 23, alnum), fakeKey(24, 23, alnum)},
		{"mysql glued password", "mysql -u root -pHunter2pw mydb", "Hunter2pw"},
		{"mysqldump quoted password", "mysqldump -h db -p'Hunter2 pw' app > dump.sql", "Hunter2 pw"},
		{"db pass", "DB_PASS=Hunter2pw", "Hunter2pw"},
		{"smtp password", "SMTP_PASSWORD=Hunter2pw ./send", "Hunter2pw"},
		{"client secret", "OAUTH_CLIENT_SECRET=Hunter2pw", "Hunter2pw"},
		{"token assignment", "NPM_TOKEN=Hunter2pw npm publish", "Hunter2pw"},
		{"password flag", "psql --password Hunter2pw -h db", "Hunter2pw"},
		{"password flag equals", "app --password=Hunter2pw", "Hunter2pw"},
		{"api key flag", "cli --api-key Hunter2pw", "Hunter2pw"},
		{"curl user", "curl -u admin:Hunter2pw https://api.example.com", "Hunter2pw"},
		{"curl user long", "curl --user admin:Hunter2pw https://api.example.com", "Hunter2pw"},
		{"url password", "git clone https://bob:Hunter2pw@git.example.com/r.git", "Hunter2pw"},
		{"postgres url", "DATABASE_URL=postgres://app:Hunter2pw@db:5432/app", "Hunter2pw"},
		{"hex key named", "SIGNING_KEY=" + hex64, hex64},
		{"hex secret", "webhook secret: " + hex64, hex64},
		{"hex encryption key", `{"encryption_key": "` + hex64 + `"}`, hex64},
		{"jwt", "Authorization: " + "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + fakeKey(43, 24, alnum+"-_"), fakeKey(43, 24, alnum+"-_")},
		{"jwt alone", "cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + fakeKey(43, 25, alnum+"-_"), fakeKey(43, 25, alnum+"-_")},
		{"bearer", "curl -H 'Authorization: Bearer " + fakeKey(30, 26, alnum) + "'", fakeKey(30, 26, alnum)},
		{"jetway token", "JETWAY_TOKEN=jw_" + fakeKey(43, 27, alnum+"-_"), fakeKey(43, 27, alnum+"-_")},
		{"jetway token alone", "token jw_" + fakeKey(43, 28, alnum+"-_") + " granted", fakeKey(43, 28, alnum+"-_")},
		{"jetway dev bus token", "NATS_TOKEN=jwn_" + fakeKey(43, 29, alnum+"-_"), fakeKey(43, 29, alnum+"-_")},
		{"jetway dev bus token alone", "jwn_" + fakeKey(43, 30, alnum+"-_"), fakeKey(43, 30, alnum+"-_")},
		{"nats deploy password in a url", "NATS_URL=tls://jobs:jwp_" + fakeKey(32, 31, alnum+"-_") + "@nats-1:4222", fakeKey(32, 31, alnum+"-_")},
		{"nats deploy password alone", "password jwp_" + fakeKey(32, 32, alnum+"-_") + " set", fakeKey(32, 32, alnum+"-_")},
		{"nats deploy password from before its prefix", "NATS_PASSWORD_JOBS=" + fakeKey(32, 33, alnum+"-_"), fakeKey(32, 33, alnum+"-_")},
		{"nats user jwt of a creds file", natsJWT, natsJWT[strings.LastIndexByte(natsJWT, '.')+1:]},
		{"nats user nkey seed", "SU" + fakeKey(56, 35, base32), fakeKey(56, 35, base32)},
		{"nats account nkey seed", "seed: SA" + fakeKey(56, 36, base32), fakeKey(56, 36, base32)},
	}
}

// natsJWT is the shape of the JWT line of a NATS credentials file: an
// ed25519-nkey signed user JWT (header, claims, 64-byte signature).
var natsJWT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ." + fakeKey(180, 34, alnum+"-_") + "." + fakeKey(86, 37, alnum+"-_")

// CredsFile is a NATS credentials file (nsc's layout) around a user JWT and
// seed: what a job that found one would print.
func CredsFile(jwt, seed string) string {
	return "-----BEGIN NATS USER JWT-----\n" + jwt + "\n------END NATS USER JWT------\n\n" +
		"************************* IMPORTANT *************************\n" +
		"NKEY Seed printed below can be used to sign and prove identity.\n" +
		"NKEYs are sensitive and should be treated as secrets.\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + seed + "\n------END USER NKEY SEED------\n\n" +
		"*************************************************************\n"
}

// PEMKey is an RSA private key's armour around a random body.
func PEMKey() (text, body string) {
	var lines []string
	for i := range 12 {
		lines = append(lines, fakeKey(64, uint32(100+i), b64))
	}
	lines = append(lines, fakeKey(20, 99, b64)+"==")
	body = strings.Join(lines, "\n")
	return "-----BEGIN RSA PRIVATE KEY-----\n" + body + "\n-----END RSA PRIVATE KEY-----", body
}

// Ordinary is text a job or a tool prints that holds no credential and
// must come through redaction exactly as it is.
var Ordinary = []string{
	"bash: ./secrets.sh: No such file or directory",
	"secrets.sh: No such file or directory",
	"cat: /etc/app/token: No such file or directory",
	"Password: ",
	"Enter password:",
	"Password for 'https://alice@github.com': ",
	"The password must be at least 12 characters.",
	"--- PASS: TestHeadline_is_one_short_line (0.00s)",
	"--- FAIL: TestTokenRefresh (0.12s)",
	"PASS",
	"ok  \tjetway/pkg/redact\t1.692s\tcoverage: 91.2% of statements",
	"FAIL\tjetway/pkg/auth [build failed]",
	"./main.go:12:3: undefined: secretKey",
	"pkg/auth/load.go:206:6: tokenFile declared and not used",
	"commit 36490aa1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7",
	"Merge: 1a2b3c4 5d6e7f8",
	"Author: Dev Person <dev@example.com>",
	"36490aa redact: gitleaks rules as a generated table",
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  jetway-linux-amd64.tar.gz",
	"docker pull nginx@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	"550e8400-e29b-41d4-a716-446655440000",
	"/home/runner/go/pkg/mod/github.com/nats-io/nats-server/v2@v2.15.2/server/jetstream.go:123:4",
	"go: downloading github.com/zricethezav/gitleaks/v8 v8.30.1",
	"mkdir -p build/out && cd build/out",
	"gcc -pthread -O2 -o app main.c",
	"sort -u names.txt | uniq -c",
	"git push -u origin main",
	"curl -u $API_USER:$API_PASS https://api.example.com",
	"psql --password -h db app",
	"app --password-file /run/secrets/db",
	"export PATH=$PATH:/usr/local/go/bin",
	"sort_key=created_at primary_key: id",
	"  - key: app.kubernetes.io/name",
	"key: app",
	"max_tokens=4096 tokenizer=cl100k",
	"passed=12 failed=0 bypass_cache=true",
	"AKIA is how AWS access key ids start",
	"sk-learning-is-fun-for-everyone",
	"job 3 (go test ./pkg/redact/) exited 0 after 2s",
	"c29tZSBwbGFpbiB0ZXh0 is base64 for some plain text",
	"-----BEGIN CERTIFICATE REQUEST----- is not a key",
	"2026-12-03T00:34:54Z INF request done path=/v1/sessions status=200",
	"npm WARN deprecated glob@7.2.3: Glob versions prior to v9 are no longer supported",
}
