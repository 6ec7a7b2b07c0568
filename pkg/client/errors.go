package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"jetway/pkg/dispatcherapi"
)

// UnreachableError says the dispatcher could not be reached at all: nothing
// listens there, the name does not resolve, the connection broke.
type UnreachableError struct {
	URL string
	Err error
}

// Error reads like: cannot reach jetway at http://127.0.0.1:8080:
// connection refused — is `jetway dev` running?
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach jetway at %s: %s — is `jetway dev` running?", e.URL, reason(e.Err))
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// reason is the short cause of a transport failure, without the
// `Post "http://…/v1/…": dial tcp 127.0.0.1:8080:` noise the URL already says.
func reason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed before an answer"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve " + dnsErr.Name
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// Problem is the RFC 9457 problem detail the dispatcher answers errors with.
type Problem = dispatcherapi.Problem

// APIError is a non-2xx answer from the dispatcher. Problem is filled in
// from the problem+json body when there is one.
type APIError struct {
	Method, Path string
	Status       int
	Problem      Problem
	// Body is the start of a body that was not problem+json.
	Body string
}

// Error reads like `the token was refused (401): the bearer token is not
// valid` for a refused token, and `<title> (<status>): <detail>` otherwise.
func (e *APIError) Error() string {
	detail := e.Problem.Detail
	if detail == "" {
		detail = e.Problem.Title
	}
	if detail == "" {
		detail = strings.TrimSpace(e.Body)
	}
	if detail == "" {
		detail = http.StatusText(e.Status)
	}
	switch e.Status {
	case http.StatusUnauthorized:
		return fmt.Sprintf("the token was refused (401): %s", detail)
	case http.StatusForbidden:
		return fmt.Sprintf("the token may not do this (403): %s", detail)
	}
	title := e.Problem.Title
	if title == "" {
		title = http.StatusText(e.Status)
	}
	if detail == title {
		return fmt.Sprintf("%s %s: %s (%d)", e.Method, e.Path, title, e.Status)
	}
	return fmt.Sprintf("%s %s: %s (%d): %s", e.Method, e.Path, title, e.Status, detail)
}

// IsUnauthorized reports whether err is the dispatcher refusing the token.
func IsUnauthorized(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusUnauthorized
}

func readAPIError(method, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
	if err := json.Unmarshal(b, &e.Problem); err != nil || (e.Problem.Title == "" && e.Problem.Detail == "") {
		e.Problem = Problem{Status: resp.StatusCode}
		e.Body = shorten(string(b), 300)
	}
	return e
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
