package client

import (
	"context"
	"net/http"

	"jetway/pkg/dispatcherapi"
)

// SignInCode is a one-time code that signs the web console in as the
// client's token (dispatcherapi.SignInCode).
type SignInCode = dispatcherapi.SignInCode

// SignInCode asks the dispatcher for a one-time code that signs the web
// console in as this client's token, and returns it with the link a
// person opens: the code travels in the link's fragment, the token never
// in a URL.
func (c *Client) SignInCode(ctx context.Context) (SignInCode, string, error) {
	var code SignInCode
	if err := c.doJSON(ctx, http.MethodPost, "/v1/signin/codes", nil, nil, &code); err != nil {
		return SignInCode{}, "", err
	}
	return code, c.base.String() + code.Path, nil
}
