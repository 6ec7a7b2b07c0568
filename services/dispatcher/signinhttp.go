package dispatcher

import (
	"net/http"

	"jetway/pkg/auth"
	api "jetway/pkg/dispatcherapi"
)

// The HTTP side of sign-in codes (signin.go). They have no NATS endpoint:
// the exchange is for a browser, and a NATS client holds its token already.

// handleSignInCode is POST /v1/signin/codes: a one-time code for the
// caller's own token.
func (d *httpAPI) handleSignInCode(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	return d.signIn.CreateCode(r.Context(), p, auth.BearerToken(r.Header.Get("Authorization")))
}

// handleSignIn is POST /v1/signin: a code in, its token out. It takes no
// bearer token (the code is the credential), so it does not go through
// serve's gate; Exchange applies the rate limit instead.
func (d *httpAPI) handleSignIn(w http.ResponseWriter, r *http.Request) {
	var req api.SignInRequest
	if err := d.decodeJSON(w, r, &req, false); err != nil {
		d.fail(w, r, err)
		return
	}
	res, err := d.signIn.Exchange(r.Context(), req.Code)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleWhoAmI is GET /v1/whoami: the tenant and role of the caller's
// token, which the console's header shows.
func (d *httpAPI) handleWhoAmI(_ http.ResponseWriter, _ *http.Request, p auth.Principal) (any, error) {
	return api.WhoAmI{Tenant: p.Tenant, Role: p.Role()}, nil
}
