package client

import (
	"context"
	"net/http"
	"net/url"

	"jetway/pkg/dispatcherapi"
)

type (
	// Approval is a tool call or question waiting for (or decided by) a
	// person.
	Approval = dispatcherapi.Approval
	// DecisionRequest is a person's decision on an approval.
	DecisionRequest = dispatcherapi.DecisionRequest
)

// Approvals lists the approvals waiting in session, or in every session of
// the tenant when session is "".
func (c *Client) Approvals(ctx context.Context, session string) ([]Approval, error) {
	path := "/v1/approvals"
	if session != "" {
		path = sessionPath(session, "approvals")
	}
	var out dispatcherapi.ApprovalList
	err := c.doJSON(ctx, http.MethodGet, path, nil, nil, &out)
	return out.Approvals, err
}

// Decide takes a decision on approval id of session. A decision someone
// took first is an *APIError with status 409 whose Problem.Approval is it.
func (c *Client) Decide(ctx context.Context, session, id string, req DecisionRequest) (Approval, error) {
	var out Approval
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "approvals/"+url.PathEscape(id)), nil, req, &out)
	return out, err
}
