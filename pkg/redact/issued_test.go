package redact_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"jetway/deploy/certs"
	"jetway/pkg/auth"
	"jetway/pkg/redact"
	"jetway/pkg/redact/redacttest"
)

// issuer is one of jetway's generators of credentials, run as it is.
type issuer struct {
	name string
	gen  func() (string, error)
	// prefix is what may stay: the prefix that says what the value is.
	prefix string
}

// issuers are every credential jetway makes. TestEvery_file_that_makes_random_values_is_known
// keeps the list whole: a new generator fails that test until it is here
// (or said not to make a credential).
var issuers = []issuer{
	{"HTTP token (pkg/auth.NewToken)", auth.NewToken, "jw_"},
	{"dev bus token (pkg/auth.NewDevBusToken)", auth.NewDevBusToken, "jwn_"},
	{"console sign-in code (pkg/auth.NewSignInCode)", auth.NewSignInCode, "jwsi_"},
	{"NATS user password (deploy/certs.NewPassword)", certs.NewPassword, "jwp_"},
	{"NATS user nkey seed of a credentials file", func() (string, error) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		seed, err := kp.Seed()
		return string(seed), err
	}, "S"},
}

// contexts are the ways a job or a model prints a credential.
var contexts = []string{
	"%s",
	"got %s, done.",
	"export NATS_TOKEN=%s",
	"NATS_PASSWORD_JOBS=%s",
	"nats://jobs:%s@nats-1:4222",
	"tls://jobs:%s@nats-1:4222,tls://jobs:%s@nats-2:4222",
	"jetway jobs-worker --nats-password %s --id w1",
	"curl -H 'Authorization: Bearer %s' http://127.0.0.1:8080/v1/sessions",
	`{"token":"%s","tenant":"acme"}`,
	"token=%s&tenant=acme",
}

// TestEvery_credential_jetway_issues_is_redacted_in_every_context runs
// each generator many times and prints each value in every context: no
// piece of six or more bytes of its random part may survive Secrets,
// Text or CleanLine. A shape jetway issues that the rules miss, even once
// in a while (two in three base64url passwords hold '-' or '_', which a
// rule for plain runs does not see), fails here.
func TestEvery_credential_jetway_issues_is_redacted_in_every_context(t *testing.T) {
	const n = 1000
	for _, is := range issuers {
		t.Run(is.name, func(t *testing.T) {
			for i := range n {
				v, err := is.gen()
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(v, is.prefix) {
					t.Fatalf("%q does not start with %q", v, is.prefix)
				}
				body := v[len(is.prefix):]
				for _, c := range contexts {
					in := strings.ReplaceAll(c, "%s", v)
					for name, got := range map[string]string{
						"Secrets":   redact.Secrets(in),
						"Text":      redact.Text(in),
						"CleanLine": redact.CleanLine([]byte(in)),
					} {
						for k := 0; k+6 <= len(body); k++ {
							if strings.Contains(got, body[k:k+6]) {
								t.Fatalf("value %d: %s(%q) = %q keeps %q", i, name, in, got, body[k:k+6])
							}
						}
					}
				}
			}
		})
	}
}

// The files deploy/certs writes (make certs) and a NATS credentials file,
// printed whole by a job: no password, private key or seed survives.
func TestFiles_holding_jetway_credentials_are_redacted_whole(t *testing.T) {
	dir := t.TempDir()
	res, err := certs.Generate(certs.Config{Dir: dir, Users: []string{"jobs", "runner", "tenant-acme"}, BcryptCost: 4})
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for _, p := range res.Passwords {
		secrets = append(secrets, p)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if strings.Contains(text, "PRIVATE KEY") {
			// Every base64 line of a key's body is secret.
			for _, line := range strings.Split(text, "\n") {
				if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
					secrets = append(secrets, line)
				}
			}
		}
		got := redact.Text(text)
		for _, s := range secrets {
			if strings.Contains(got, s) {
				t.Errorf("%s printed whole keeps %q:\n%s", e.Name(), s, got)
			}
		}
	}

	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	jwt := signedJWT(t)
	got := redact.Text(redacttest.CredsFile(jwt, string(seed)))
	sig := jwt[strings.LastIndexByte(jwt, '.')+1:]
	if strings.Contains(got, string(seed[2:])) || strings.Contains(got, sig) {
		t.Errorf("a NATS credentials file keeps its seed or its JWT's signature:\n%s", got)
	}
}

// signedJWT is a user JWT as nsc makes it: header, claims and an ed25519
// signature by an account key, each base64url.
func signedJWT(t *testing.T) string {
	t.Helper()
	acct, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	user, _ := nkeys.CreateUser()
	upub, _ := user.PublicKey()
	apub, _ := acct.PublicKey()
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"jti": "X", "iat": 1, "iss": apub, "sub": upub, "name": "jobs", "nats": map[string]any{"type": "user", "version": 2}})
	head := enc([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." + enc(claims)
	sig, err := acct.Sign([]byte(head))
	if err != nil {
		t.Fatal(err)
	}
	return head + "." + enc(sig)
}

// randomSources are the files that import crypto/rand, each either one of
// the issuers above or not a maker of credentials, with why. A file that
// starts making random values fails TestEvery_file_that_makes_random_values_is_known
// until it is listed: if it makes a credential, its generator belongs in
// issuers, so the redaction of its shape is tested.
var randomSources = map[string]string{
	"pkg/auth/load.go":                                "issuer: jw_ and jwn_ tokens, jwsi_ sign-in codes",
	"services/dispatcher/signin.go":                   "not a credential: AES-GCM nonces (its codes come from auth.NewSignInCode)",
	"deploy/certs/certs.go":                           "issuer: jwp_ passwords (and TLS keys, PEM armoured, tested as files)",
	"services/jobs/events.go":                         "not a credential: job event keys (ids)",
	"services/runner/runner.go":                       "not a credential: runner incarnation ids",
	"services/runner/internal/partition/lease.go":     "not a credential: a lease's incarnation suffix",
	"services/runner/internal/approvals/approvals.go": "not a credential: approval ids",
	"internal/bench/bench.go":                         "not a credential: benchmark data",
	"pkg/tasks/files.go":                              "not a credential: output file names",
	"pkg/agent/loop.go":                               "not a credential: tool-use ids",
	"pkg/workspace/files.go":                          "not a credential: temporary file names",
	"pkg/events/codec.go":                             "not a credential: CloudEvents ids",
}

func TestEvery_file_that_makes_random_values_is_known(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from pkg/redact: %v", err)
	}
	var found []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "crypto/rand" {
				rel, _ := filepath.Rel(root, path)
				found = append(found, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if _, ok := randomSources[f]; !ok {
			t.Errorf("%s makes random values and is not in randomSources: if it makes a credential, add its generator to issuers (so its shape is tested for redaction) and list it", f)
		}
	}
	for f := range randomSources {
		if !slices.Contains(found, f) {
			t.Errorf("randomSources lists %s, which no longer imports crypto/rand: remove it", f)
		}
	}
}
