package jobtools

import (
	"context"
	"errors"
	"strings"

	"jetway/pkg/workspace"
	"jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// Instructions is a workspace instruction file (AGENTS.md) as a run
// start reads it.
type Instructions struct {
	Text  string
	Found bool
	// Cut says the file is longer than the cap (or than the worker reads
	// at once): Text is its beginning.
	Cut bool
}

// instructionLines bounds the lines one read asks for; the worker's own
// byte limit applies as well.
const instructionLines = 100000

// ReadInstructions reads path from the session's workspace through its
// jobs worker, at most max bytes of it. A missing file is Found false, not
// an error: most workspaces have no AGENTS.md.
func ReadInstructions(ctx context.Context, c *client.Client, tenant, session, path string, max int) (Instructions, error) {
	res, err := c.Read(ctx, tenant, session, workspace.ReadRequest{Path: path, Limit: instructionLines})
	if errors.Is(err, jobsapi.ErrNotFound) {
		return Instructions{}, nil
	}
	if err != nil {
		return Instructions{}, err
	}
	text := unnumber(res.Content)
	cut := res.Truncated || res.EndLine < res.TotalLines
	if len(text) > max {
		text, cut = strings.ToValidUTF8(text[:max], ""), true
	}
	return Instructions{Text: text, Found: true, Cut: cut}, nil
}

// unnumber takes the cat -n numbers off a read's lines.
func unnumber(content string) string {
	var b strings.Builder
	for line := range strings.Lines(content) {
		if _, rest, ok := strings.Cut(line, "\t"); ok {
			line = rest
		}
		b.WriteString(line)
	}
	return b.String()
}
