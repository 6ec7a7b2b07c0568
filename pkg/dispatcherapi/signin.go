package dispatcherapi

import "time"

// Sign-in codes let a person open the web console without copying a token:
// a client that holds a token asks for a one-time code (POST
// /v1/signin/codes), prints a link with the code in its fragment, and the
// console trades the code for the token (POST /v1/signin). The token never
// travels in a URL, only in a request's Authorization header and in the
// exchange's answer body. These routes are HTTP only: the exchange is for a
// browser, which has no NATS connection, and a NATS client has its token
// already.

// SignInCodeTTL is how long a sign-in code can be exchanged: long enough to
// copy a link from a terminal into a browser, short enough that one left in
// a scrollback is worth nothing soon after.
const SignInCodeTTL = 2 * time.Minute

// SignInCode answers POST /v1/signin/codes: a code that can be exchanged
// once, before ExpiresAt, for the token that asked for it. Path is where
// the console takes it ("/#code=<code>"); a client puts its base URL in
// front.
type SignInCode struct {
	Code      string    `json:"code"`
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expires_at"`
	Tenant    string    `json:"tenant,omitempty"`
	Role      string    `json:"role"`
}

// SignInRequest is POST /v1/signin: the code to exchange.
type SignInRequest struct {
	Code string `json:"code"`
}

// SignIn answers POST /v1/signin: the token the code was made with, and
// whose it is. The console keeps Token as it keeps a pasted one.
type SignIn struct {
	Token  string `json:"token"`
	Tenant string `json:"tenant,omitempty"`
	Role   string `json:"role"`
}

// WhoAmI answers GET /v1/whoami: the tenant and role of the caller's token,
// what the console's header shows.
type WhoAmI struct {
	Tenant string `json:"tenant,omitempty"`
	Role   string `json:"role"`
}
