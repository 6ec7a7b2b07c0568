package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// SessionDetail reads what there is to know about a session: its state,
// the Ground Stop switches that hold it, the events waiting for it, its
// running jobs, layovers and recovery rule (GET /v1/sessions/{session}).
func (c *Client) SessionDetail(ctx context.Context, session string) (SessionDetail, error) {
	var out SessionDetail
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, ""), nil, nil, &out)
	return out, err
}

// Transcript reads one page of a session's history: up to limit entries
// (0: the server's default) recorded after the entry with id after (0:
// from the start) (GET /v1/sessions/{session}/transcript).
func (c *Client) Transcript(ctx context.Context, session string, after uint64, limit int) (TranscriptPage, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out TranscriptPage
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, "transcript"), q, nil, &out)
	return out, err
}

// EachTranscriptEntry pages through a session's whole history from the
// entry after after, calling fn with each entry in order, until the
// history ends or fn returns an error (which it returns).
func (c *Client) EachTranscriptEntry(ctx context.Context, session string, after uint64, fn func(TranscriptEntry) error) error {
	for {
		page, err := c.Transcript(ctx, session, after, 0)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if !page.More || page.Next <= after {
			return nil
		}
		after = page.Next
	}
}

// JobOutput reads lines of a job's output: a range, the tail or a grep
// (GET /v1/sessions/{session}/jobs/{id}/output).
func (c *Client) JobOutput(ctx context.Context, session, job string, r JobOutputRequest) (JobOutput, error) {
	q := url.Values{}
	for name, n := range map[string]int{"offset": r.Offset, "limit": r.Limit, "tail": r.Tail} {
		if n > 0 {
			q.Set(name, strconv.Itoa(n))
		}
	}
	if r.Grep != "" {
		q.Set("grep", r.Grep)
	}
	var out JobOutput
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, "jobs/"+url.PathEscape(job)+"/output"), q, nil, &out)
	return out, err
}

// KillJob ends a job and its whole process tree, and returns it ended
// (POST /v1/sessions/{session}/jobs/{id}/kill).
func (c *Client) KillJob(ctx context.Context, session, job string) (JobSummary, error) {
	var out JobSummary
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "jobs/"+url.PathEscape(job)+"/kill"), nil, nil, &out)
	return out, err
}
