package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"jetway/pkg/auth"
	"jetway/pkg/devlock"
)

// Defaults and environment variables read by Resolve.
const (
	// DefaultURL is where `jetway dev` serves the HTTP API.
	DefaultURL = "http://127.0.0.1:8080"
	// EnvURL overrides the dispatcher URL.
	EnvURL = "JETWAY_URL"
	// EnvToken is the bearer token to use.
	EnvToken = "JETWAY_TOKEN"
	// DefaultTokensFile is where `jetway dev` keeps its dev tokens, relative
	// to the directory it was started in.
	DefaultTokensFile = ".jetway/" + auth.DevTokensFile
)

// Options are what a command line says about the dispatcher; empty fields
// fall back to the environment and then to the dev tokens file.
type Options struct {
	URL   string // --url
	Token string // --token
	// TokensFile is the tokens file to read a token from when neither
	// Token nor $JETWAY_TOKEN is set (DefaultTokensFile when empty).
	TokensFile string
	// Admin picks the file's tenant admin token instead of its tenant
	// token, for commands that change a tenant's switches.
	Admin bool
	// Operator picks the file's operator token (falling back to its admin
	// token), for Ground Stop, whose global switch only an operator flips.
	Operator bool
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// Resolve picks the URL and token: flag, then environment ($JETWAY_URL,
// $JETWAY_TOKEN), then the `jetway dev` running on the tokens file's data
// directory — the URL it serves (whatever port it was given) and a token
// from the tokens file it writes (format owned by pkg/auth) — and last
// DefaultURL.
func Resolve(o Options) (Config, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	path := o.TokensFile
	if path == "" {
		path = DefaultTokensFile
	}
	cfg := Config{BaseURL: o.URL, Token: o.Token}
	if cfg.BaseURL == "" {
		cfg.BaseURL = getenv(EnvURL)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = runningDevURL(filepath.Dir(path))
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultURL
	}
	if cfg.Token == "" {
		cfg.Token = getenv(EnvToken)
	}
	if cfg.Token != "" {
		return cfg, nil
	}
	want := wantUser
	switch {
	case o.Operator:
		want = wantOperator
	case o.Admin:
		want = wantAdmin
	}
	tok, err := tokenFromFile(path, want)
	if err != nil {
		return Config{}, err
	}
	cfg.Token = tok
	return cfg, nil
}

// runningDevURL is the URL of the dev holding dataDir, or "".
func runningDevURL(dataDir string) string {
	info, ok := devlock.Running(dataDir)
	if !ok {
		return ""
	}
	return info.URL
}

// The kind of token tokenFromFile picks.
const (
	wantUser = iota
	wantAdmin
	wantOperator
)

func tokenFromFile(path string, want int) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no token: set %s or pass --token, or start `jetway dev` in this directory (it writes %s)", EnvToken, path)
	}
	f, err := auth.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	pick := func(ok func(auth.Grant) bool) string {
		for _, g := range f.Grants() {
			if g.Token != "" && ok(g) {
				return g.Token
			}
		}
		return ""
	}
	isAdmin := func(g auth.Grant) bool { return g.IsAdmin() && !g.IsOperator() }
	var tok string
	switch want {
	case wantOperator:
		if tok = pick(auth.Grant.IsOperator); tok == "" {
			tok = pick(isAdmin)
		}
	case wantAdmin:
		tok = pick(isAdmin)
	default:
		tok = pick(func(g auth.Grant) bool { return !g.IsAdmin() })
	}
	if tok != "" {
		return tok, nil
	}
	kind := [...]string{"tenant", "admin", "operator or admin"}[want]
	return "", fmt.Errorf("no %s token in %s: set %s or pass --token", kind, path, EnvToken)
}
