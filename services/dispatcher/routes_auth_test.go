package dispatcher

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// publicRoutes are the routes that answer without a token, each with why.
// Every other route the OpenAPI document lists must refuse a request
// without a token and one with a token nobody issued.
var publicRoutes = map[string]string{
	"GET /":                "the console's page; it holds no data, the API it calls needs a token",
	"GET /v1/openapi.yaml": "the contract itself",
	"GET /healthz":         "liveness for an orchestrator",
	"GET /readyz":          "readiness for an orchestrator",
	"GET /metrics":         "Prometheus scrapes; counters only, no tenant data",
	"POST /v1/signin":      "the one-time code in its body is the credential",
}

// documentedRoutes reads "METHOD /path" of every operation in the OpenAPI
// document the dispatcher serves, so a route added there is tried here
// without anyone listing it.
func documentedRoutes(t *testing.T) []string {
	t.Helper()
	var out []string
	path := ""
	sc := bufio.NewScanner(bytes.NewReader(OpenAPI))
	inPaths := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			inPaths = true
		case inPaths && line != "" && !strings.HasPrefix(line, " "):
			inPaths = false
		case inPaths && strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":"):
			path = strings.TrimSuffix(strings.TrimSpace(line), ":")
		case inPaths && path != "" && len(line) > 4 && line[:4] == "    " && line[4] != ' ':
			m := strings.TrimSuffix(strings.TrimSpace(line), ":")
			switch m {
			case "get", "post", "put", "delete", "patch":
				out = append(out, strings.ToUpper(m)+" "+path)
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found %d operations in the OpenAPI document; the parser lost its way", len(out))
	}
	return out
}

func TestEvery_documented_route_but_the_public_ones_refuses_a_missing_or_unknown_token(t *testing.T) {
	f := newFixture(t)
	fill := strings.NewReplacer("{session}", "s1", "{id}", "1", "{name}", "reviewer")
	for _, route := range documentedRoutes(t) {
		if _, ok := publicRoutes[route]; ok {
			continue
		}
		method, path, _ := strings.Cut(route, " ")
		for _, token := range []string{"", "jw_" + strings.Repeat("A", 43)} {
			resp := f.do(method, fill.Replace(path), token, "{}")
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d, want 401", route, token, resp.StatusCode)
			}
		}
	}
	for route := range publicRoutes {
		found := false
		for _, r := range documentedRoutes(t) {
			found = found || r == route
		}
		if !found {
			t.Errorf("public route %s is not in the OpenAPI document", route)
		}
	}
}
