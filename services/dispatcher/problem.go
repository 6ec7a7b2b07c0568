package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"jetway/pkg/auth"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// ContentTypeProblem is the media type of every error body (RFC 9457).
const ContentTypeProblem = api.ContentTypeProblem

// ProblemTypePrefix starts the type URI of every problem the dispatcher
// reports; the rest is the problem's slug, e.g. urn:jetway:problem:invalid-token.
const ProblemTypePrefix = api.ProblemTypePrefix

// Problem is an RFC 9457 problem detail, the wire type of
// pkg/dispatcherapi: the body of an HTTP error and the data of a NATS error
// reply are the one value a client decodes, so the type has one home and
// the dispatcher builds its errors as that type.
type Problem = api.Problem

func problem(status int, slug, title, detail string) *Problem {
	return &Problem{
		Type:   ProblemTypePrefix + slug,
		Title:  title,
		Status: status,
		Detail: detail,
	}
}

func problemf(status int, slug, title, format string, args ...any) *Problem {
	return problem(status, slug, title, fmt.Sprintf(format, args...))
}

// retryAfterSeconds is the Retry-After a problem carries for a wait of d:
// whole seconds, rounded up, at least one, so a caller that waits as told
// is not refused again for coming back a fraction early.
func retryAfterSeconds(d time.Duration) int {
	d = max(d, time.Second)
	return int((d + time.Second - 1) / time.Second)
}

// toProblem maps an error from auth, events or the bus to the problem a
// caller should see. Anything unrecognised is a 500 whose detail does not
// leak internals beyond the wrapped message.
func toProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var te *events.TokenError
	var ae *events.AttributeError
	var de *events.DataError
	var se *events.SizeError
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return problem(http.StatusUnauthorized, "unauthorized", "Missing bearer token",
			"send Authorization: Bearer <token>")
	case errors.Is(err, auth.ErrUnknownToken):
		return problem(http.StatusUnauthorized, "unauthorized", "Unknown token",
			"the bearer token is not valid")
	case errors.Is(err, auth.ErrForbidden):
		return problem(http.StatusForbidden, "forbidden", "Forbidden", trimPrefix(err))
	case errors.As(err, &mbe):
		return problemf(http.StatusRequestEntityTooLarge, "too-large", "Request body too large",
			"the body is over the %d byte limit", mbe.Limit)
	case errors.As(err, &se):
		return problem(http.StatusRequestEntityTooLarge, "too-large", "Event too large", se.Error())
	case errors.As(err, &te):
		return problem(http.StatusBadRequest, "invalid-token", "Invalid "+te.Field+" name", te.Error())
	case errors.Is(err, events.ErrForgedJobEvent), errors.Is(err, events.ErrForgedAgentEvent):
		return problem(http.StatusForbidden, "forbidden", "Forbidden", err.Error())
	case errors.As(err, &ae):
		return problem(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent", ae.Error())
	case errors.As(err, &de):
		return problem(http.StatusBadRequest, "invalid-data", "Invalid event data", de.Error())
	case errors.Is(err, events.ErrMalformed), errors.Is(err, events.ErrInvalidSubject):
		return problem(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent", err.Error())
	}
	return problem(http.StatusInternalServerError, "internal", "Internal error", err.Error())
}

// trimPrefix drops the "auth: " package prefix; the caller does not care
// which package refused.
func trimPrefix(err error) string {
	s := err.Error()
	const pre = "auth: "
	if len(s) > len(pre) && s[:len(pre)] == pre {
		return s[len(pre):]
	}
	return s
}

// writeProblem sends p as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	out := *p
	if out.Instance == "" && r != nil {
		out.Instance = r.URL.Path
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="jetway"`)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(out)
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func unavailable(what string, err error) *Problem {
	return problemf(http.StatusServiceUnavailable, "unavailable", "Service unavailable", "%s: %v", what, err)
}

// shortenQ keeps a caller's string short in a problem detail, cutting on
// a rune boundary.
func shortenQ(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
