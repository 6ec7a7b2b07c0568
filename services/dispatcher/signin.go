package dispatcher

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
)

// One-time sign-in codes (POST /v1/signin/codes, POST /v1/signin): a person
// opens the console from a link `jetway console` prints instead of digging a
// token out of a tokens file, and the token never appears in a URL.
//
// Where codes live: in the control bucket, not in the dispatcher's memory.
// A deployment runs several dispatchers behind one address (deploy/k8s runs
// two), and the request that makes a code and the one that spends it may
// reach different ones; in memory, half the links would fail. The bucket
// also makes "once" hold across dispatchers: the code is spent with a write
// that expects the record's revision, so of two exchanges racing on two
// dispatchers exactly one wins.
//
// What the bucket holds: under signin.<SHA-256 of the code>, the tenant, the
// role, the expiry and the token sealed with AES-GCM under a key derived
// from the code. The code itself is stored nowhere (only its hash), so
// someone who can read the bucket learns neither the code nor the token.
// Spending or refusing an expired code replaces the record with one without
// the sealed token (a roll-up, so no older revision keeps it), which is
// also what lets a second use be told "already used" rather than "unknown".
// Records expired a while ago are purged whenever a new code is made.

// signInCodePrefix starts every code (auth.NewSignInCode makes them).
const signInCodePrefix = auth.SignInCodePrefix

// signInKeyPrefix starts every sign-in record's key in the control bucket.
const signInKeyPrefix = "signin."

// signInKeep is how long a spent or expired record stays, so that a code
// tried again soon after is told what became of it.
const signInKeep = 10 * time.Minute

// signInRateKey is the rate bucket the unauthenticated exchange draws from:
// it has no tenant until the code is spent, and one shared bucket bounds
// how fast anyone can guess (not that 160 bits can be guessed).
const signInRateKey = "(sign-in)"

// signInRecord is a code's record in the control bucket.
type signInRecord struct {
	Tenant    string    `json:"tenant,omitempty"`
	Role      string    `json:"role"`
	ExpiresAt time.Time `json:"expires_at"`
	// Sealed is the token, sealed under the code's key (nonce first); gone
	// once the code is spent or refused as expired.
	Sealed []byte `json:"sealed,omitempty"`
	// UsedAt is when the code was spent; zero while it can be.
	UsedAt time.Time `json:"used_at,omitzero"`
}

// signInCore makes and spends sign-in codes.
type signInCore struct {
	store *store
	gate  *gate
	log   zerolog.Logger
	// ttl is how long a code lasts (api.SignInCodeTTL; tests shorten it).
	ttl time.Duration
	now func() time.Time
}

// signInKey is the control-bucket key of code's record: a hash, so the
// bucket never holds the code.
func signInKey(code string) string {
	h := sha256.Sum256([]byte("jetway sign-in id\x00" + code))
	return signInKeyPrefix + hex.EncodeToString(h[:])
}

// signInAEAD is the cipher that seals the token of code's record.
func signInAEAD(code string) cipher.AEAD {
	key := sha256.Sum256([]byte("jetway sign-in key\x00" + code))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // AES has the block size GCM needs
	}
	return aead
}

// CreateCode makes a one-time code that signs in as token, whose principal
// p is. The code is bound to that token: it gives back nothing else.
func (d *signInCore) CreateCode(ctx context.Context, p auth.Principal, token string) (api.SignInCode, error) {
	kv, err := d.store.controlBucket(ctx)
	if err != nil {
		return api.SignInCode{}, err
	}
	d.sweep(ctx, kv)
	code, err := auth.NewSignInCode()
	if err != nil {
		return api.SignInCode{}, err
	}
	key := signInKey(code)
	aead := signInAEAD(code)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	rec := signInRecord{Tenant: p.Tenant, Role: p.Role(), ExpiresAt: d.now().Add(d.ttl).UTC(),
		Sealed: aead.Seal(nonce, nonce, []byte(token), []byte(key))}
	b, err := json.Marshal(rec)
	if err != nil {
		return api.SignInCode{}, err
	}
	if _, err := kv.Create(ctx, key, b); err != nil {
		return api.SignInCode{}, unavailable("store the sign-in code", err)
	}
	return api.SignInCode{Code: code, Path: "/#code=" + code, ExpiresAt: rec.ExpiresAt, Tenant: p.Tenant, Role: rec.Role}, nil
}

// Exchange spends code: the token it was made with, once, before it
// expires. Every refusal says which of those it was and what to do.
func (d *signInCore) Exchange(ctx context.Context, code string) (api.SignIn, error) {
	if err := d.gate.allow(signInRateKey); err != nil {
		return api.SignIn{}, err
	}
	code = strings.TrimSpace(code)
	if code == "" {
		return api.SignIn{}, problem(http.StatusBadRequest, "bad-request", "Missing sign-in code",
			`the body needs "code": the sign-in code jetway console printed`)
	}
	if !strings.HasPrefix(code, signInCodePrefix) {
		return api.SignIn{}, problemf(http.StatusBadRequest, "bad-request", "Not a sign-in code",
			"a sign-in code starts with %q (an API token goes in the Authorization header, not here)", signInCodePrefix)
	}
	kv, err := d.store.controlBucket(ctx)
	if err != nil {
		return api.SignIn{}, err
	}
	key := signInKey(code)
	// The control bucket is read from its leader (bus.LeaderReadBuckets),
	// so a code spent the moment it was made is found on a cluster too.
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return api.SignIn{}, signInRefused(http.StatusUnauthorized, "signin-code-unknown", "Unknown sign-in code",
			"this sign-in code was never issued, or was used or expired long ago")
	case err != nil:
		return api.SignIn{}, unavailable("read the sign-in code", err)
	}
	rev := e.Revision()
	var rec signInRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return api.SignIn{}, fmt.Errorf("sign-in code record %s: %w", key, err)
	}
	now := d.now()
	switch {
	case !rec.UsedAt.IsZero():
		return api.SignIn{}, signInRefused(http.StatusGone, "signin-code-used", "Sign-in code already used",
			fmt.Sprintf("this sign-in code was used at %s, and a code signs in once", rec.UsedAt.Format(time.TimeOnly+" MST")))
	case len(rec.Sealed) == 0 || !now.Before(rec.ExpiresAt):
		d.spend(ctx, key, rev, signInRecord{Tenant: rec.Tenant, Role: rec.Role, ExpiresAt: rec.ExpiresAt})
		return api.SignIn{}, signInRefused(http.StatusGone, "signin-code-expired", "Sign-in code expired",
			fmt.Sprintf("this sign-in code expired at %s (a code lasts %s)", rec.ExpiresAt.Format(time.TimeOnly+" MST"), d.ttl))
	}
	aead := signInAEAD(code)
	if len(rec.Sealed) < aead.NonceSize() {
		return api.SignIn{}, fmt.Errorf("sign-in code record %s: sealed token too short", key)
	}
	token, err := aead.Open(nil, rec.Sealed[:aead.NonceSize()], rec.Sealed[aead.NonceSize():], []byte(key))
	if err != nil {
		return api.SignIn{}, fmt.Errorf("sign-in code record %s does not open with its code: %w", key, err)
	}
	if !d.spend(ctx, key, rev, signInRecord{Tenant: rec.Tenant, Role: rec.Role, ExpiresAt: rec.ExpiresAt, UsedAt: now.UTC()}) {
		return api.SignIn{}, signInRefused(http.StatusGone, "signin-code-used", "Sign-in code already used",
			"this sign-in code was used just now by another request, and a code signs in once")
	}
	// The token is checked again: one removed from the tokens file since
	// the code was made must not come back through it.
	p, err := d.gate.auth.Authenticate(string(token))
	if err != nil {
		return api.SignIn{}, signInRefused(http.StatusUnauthorized, "unauthorized", "Token no longer valid",
			"the token this sign-in code was made with is no longer valid")
	}
	return api.SignIn{Token: string(token), Tenant: p.Tenant, Role: p.Role()}, nil
}

// spend replaces the record at revision rev with rec (which holds no
// token) and drops every older revision, in one write that fails if the
// record changed since it was read. It reports whether this call did it.
func (d *signInCore) spend(ctx context.Context, key string, rev uint64, rec signInRecord) bool {
	b, err := json.Marshal(rec)
	if err != nil {
		return false
	}
	msg := nats.NewMsg("$KV." + bus.BucketControl + "." + key)
	msg.Data = b
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := d.store.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev)); err != nil {
		d.log.Debug().Err(err).Str("key", key).Msg("sign-in code: spent elsewhere first, or the write failed")
		return false
	}
	return true
}

// signInRefused is a refused exchange, with what to do next.
func signInRefused(status int, slug, title, detail string) *Problem {
	return problem(status, slug, title, detail+": run `jetway console` for a new one")
}

// sweep purges records that expired more than signInKeep ago. It is
// best-effort: a record left behind holds no token anyone can open.
func (d *signInCore) sweep(ctx context.Context, kv jetstream.KeyValue) {
	lister, err := kv.ListKeysFiltered(ctx, signInKeyPrefix+"*")
	if err != nil {
		return
	}
	var old []string
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var rec signInRecord
		if json.Unmarshal(e.Value(), &rec) == nil && d.now().Sub(rec.ExpiresAt) > signInKeep {
			old = append(old, key)
		}
	}
	for _, key := range old {
		if err := kv.Purge(ctx, key); err != nil {
			d.log.Debug().Err(err).Str("key", key).Msg("sign-in code: purge an old record")
		}
	}
}
