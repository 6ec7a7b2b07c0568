package agents

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"jetway/pkg/redact"
)

// MCP transports a profile's server may use.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
)

// Bounds of a profile's MCP servers: a profile names a few servers, it
// does not carry their configuration files.
const (
	MaxMCPServers     = 16
	MaxMCPArgs        = 64
	MaxMCPEnv         = 64
	DefaultMCPTimeout = 60 * time.Second
	maxMCPTimeout     = 30 * time.Minute
)

// MCPToolPrefix starts the name of every tool an MCP server offers:
// mcp__<server>__<tool>.
const MCPToolPrefix = "mcp__"

var (
	mcpNamePattern    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	envNamePattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	headerNamePattern = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
)

// MCPToolName is the name a server's tool is offered to the model under.
func MCPToolName(server, tool string) string { return MCPToolPrefix + server + "__" + tool }

// MCPTransport is s's transport: its own, or the one its fields imply.
func MCPTransport(s MCPServer) string {
	switch {
	case s.Transport != "":
		return s.Transport
	case s.URL != "":
		return MCPHTTP
	}
	return MCPStdio
}

// MCPTimeout is how long one tool call of s may take. Validate has
// checked its timeout parses.
func MCPTimeout(s MCPServer) time.Duration {
	if d, err := time.ParseDuration(s.Timeout); err == nil && d > 0 {
		return d
	}
	return DefaultMCPTimeout
}

// ForbiddenMCPEnv reports why a stdio server's environment may not set
// name: the worker's own settings and credentials, and the variables the
// worker sets itself. Loader variables (LD_PRELOAD, LD_AUDIT, GCONV_PATH…)
// are not refused: the confinement helper is static and reads none of
// them, so they reach only the server, which runs confined.
func ForbiddenMCPEnv(name string) string {
	up := strings.ToUpper(name)
	switch {
	case !envNamePattern.MatchString(name):
		return "not a variable name (A-Z a-z 0-9 _, not starting with a digit)"
	case strings.HasPrefix(up, "NATS_") || strings.HasPrefix(up, "JETWAY_"):
		return "the worker's own settings are never passed to a server"
	case slices.Contains([]string{"PATH", "HOME", "TMPDIR"}, up):
		return "set by the worker"
	}
	return ""
}

// validateMCP checks a profile's MCP servers: unique names, a command or
// a URL as the transport needs, and secrets named, never given.
func validateMCP(p Profile) error {
	if len(p.MCP) > MaxMCPServers {
		return &FieldError{Field: "mcp", Reason: fmt.Sprintf("%d servers, at most %d", len(p.MCP), MaxMCPServers)}
	}
	seen := map[string]bool{}
	for i, s := range p.MCP {
		field := fmt.Sprintf("mcp[%d]", i)
		bad := func(sub, format string, args ...any) error {
			return &FieldError{Field: field + sub, Reason: fmt.Sprintf(format, args...)}
		}
		switch {
		case !mcpNamePattern.MatchString(s.Name) || strings.Contains(s.Name, "__"):
			return bad(".name", "%q is not 1–32 of A-Z a-z 0-9 _ - without \"__\" (it is the <server> of mcp__<server>__<tool>)", s.Name)
		case seen[s.Name]:
			return bad(".name", "%q names two servers", s.Name)
		}
		seen[s.Name] = true
		if s.Timeout != "" {
			if d, err := time.ParseDuration(s.Timeout); err != nil || d <= 0 || d > maxMCPTimeout {
				return bad(".timeout", "%q is not a positive duration up to 30m, such as 30s", s.Timeout)
			}
		}
		var err error
		switch MCPTransport(s) {
		case MCPStdio:
			err = validateStdio(s, bad)
		case MCPHTTP:
			err = validateHTTP(s, bad)
		default:
			err = bad(".transport", "%q: stdio or http", s.Transport)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type badField func(sub, format string, args ...any) error

func validateStdio(s MCPServer, bad badField) error {
	switch {
	case strings.TrimSpace(s.Command) == "":
		return bad(".command", "required for a stdio server: the program that serves MCP on its stdin and stdout")
	case s.URL != "" || len(s.Headers) > 0:
		return bad(".url", "a stdio server has no url or headers (those are an http server's)")
	case len(s.Args) > MaxMCPArgs:
		return bad(".args", "at most %d arguments", MaxMCPArgs)
	case len(s.Env)+len(s.Secrets) > MaxMCPEnv:
		return bad(".env", "at most %d variables in env and secrets together", MaxMCPEnv)
	}
	for i, a := range append([]string{s.Command}, s.Args...) {
		field := fmt.Sprintf(".args[%d]", i-1)
		if i == 0 {
			field = ".command"
		}
		if strings.ContainsRune(a, 0) || len(a) > 4096 {
			return bad(field, "holds a NUL byte or is longer than 4096 bytes")
		}
		if holdsSecret(a) {
			return bad(field, "looks like it holds a secret; a profile never does: name it in secrets and read it from the environment")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Env)) {
		if why := ForbiddenMCPEnv(name); why != "" {
			return bad(".env."+name, "%s", why)
		}
		if strings.ContainsRune(s.Env[name], 0) {
			return bad(".env."+name, "the value holds a NUL byte")
		}
		if holdsSecret(name + "=" + s.Env[name]) {
			return bad(".env."+name, "looks like a secret; a profile never holds one: move it to secrets, which names a secret the jobs worker holds")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Secrets)) {
		if why := ForbiddenMCPEnv(name); why != "" {
			return bad(".secrets."+name, "%s", why)
		}
		if _, dup := s.Env[name]; dup {
			return bad(".secrets."+name, "also set in env")
		}
		if why := MCPSecretRefProblem(s.Secrets[name]); why != "" {
			return bad(".secrets."+name, "%s", why)
		}
	}
	return nil
}

func validateHTTP(s MCPServer, bad badField) error {
	if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 || len(s.Secrets) > 0 {
		return bad(".command", "an http server has no command, args, env or secrets (those are a stdio server's)")
	}
	u, err := url.Parse(s.URL)
	switch {
	case s.URL == "":
		return bad(".url", "required for an http server: its streamable HTTP endpoint")
	case err != nil:
		return bad(".url", "%q: %v", s.URL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bad(".url", "%q: the scheme must be http or https", s.URL)
	case u.Host == "":
		return bad(".url", "%q has no host", s.URL)
	case u.User != nil:
		return bad(".url", "a URL may not carry credentials; name a secret in headers")
	case len(s.URL) > 2048:
		return bad(".url", "longer than 2048 bytes")
	case holdsSecret(s.URL):
		return bad(".url", "looks like it holds a secret; a profile never does: name it in headers")
	case len(s.Headers) > MaxMCPEnv:
		return bad(".headers", "at most %d headers", MaxMCPEnv)
	}
	for _, h := range slices.Sorted(maps.Keys(s.Headers)) {
		if !headerNamePattern.MatchString(h) {
			return bad(".headers."+h, "not a header name")
		}
		if why := MCPSecretRefProblem(s.Headers[h]); why != "" {
			return bad(".headers."+h, "%s", why)
		}
	}
	return nil
}

// holdsSecret reports whether s holds something the redaction rules take
// for a credential (a GitHub token, an API key, NAME=value of a secret's
// name): those go in secrets and headers, by name.
func holdsSecret(s string) bool { return redact.Text(s) != s }
