package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/transcriptrec"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/pkg/redact"
)

// TranscriptPage answers GET /v1/sessions/{session}/transcript.
type TranscriptPage = api.TranscriptPage

// Transcript reads a page of one of the caller's sessions' transcript: up
// to limit entries recorded after the entry with id after (0: from the
// start). An entry's id is its sequence in JETWAY_TRANSCRIPTS, so it is
// stable and pages never overlap or skip. Each entry is fetched with a
// direct message get by subject (the next one at or after a sequence):
// no consumer is made for a read, and a page costs one round trip per
// entry and one to learn whether more follow.
//
// Everything a person reads is redacted with pkg/redact, the rules the
// runner applies to what the model sees: a secret that reached the
// transcript some other way is still not served.
func (d *sessionsCore) Transcript(ctx context.Context, p auth.Principal, session string, after uint64, limit int) (TranscriptPage, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return TranscriptPage{}, err
	}
	if limit == 0 {
		limit = api.DefaultTranscriptLimit
	}
	if limit < 1 || limit > api.MaxTranscriptLimit {
		return TranscriptPage{}, problemf(http.StatusBadRequest, "bad-request", "Invalid limit",
			"limit is %d; it must be 1 to %d", limit, api.MaxTranscriptLimit)
	}
	subj, err := events.TranscriptSubject(p.Tenant, session)
	if err != nil {
		return TranscriptPage{}, err
	}
	st, err := d.stream(ctx, bus.StreamTranscripts)
	if err != nil {
		return TranscriptPage{}, err
	}
	page := TranscriptPage{Session: session, Entries: []api.TranscriptEntry{}, Next: after}
	if st == nil {
		return page, noSession(p.Tenant, session)
	}
	seq := after + 1
	for len(page.Entries) < limit {
		m, ok, err := nextRecord(ctx, st, subj, seq)
		if err != nil {
			return TranscriptPage{}, err
		}
		if !ok {
			break
		}
		page.Entries = append(page.Entries, entryOf(m))
		page.Next, seq = m.Sequence, m.Sequence+1
	}
	if len(page.Entries) == limit {
		_, page.More, err = nextRecord(ctx, st, subj, seq)
		if err != nil {
			return TranscriptPage{}, err
		}
	}
	if after == 0 && len(page.Entries) == 0 {
		return TranscriptPage{}, noSession(p.Tenant, session)
	}
	return page, nil
}

// nextRecord reads the first message on subj at or after seq.
func nextRecord(ctx context.Context, st jetstream.Stream, subj string, seq uint64) (*jetstream.RawStreamMsg, bool, error) {
	m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, unavailable("read transcript", err)
	}
	return m, true, nil
}

// entryOf turns a stored record into its redacted entry. A record that
// does not decode is shown as what it is, not dropped: a gap in a history
// would read as nothing having happened.
func entryOf(m *jetstream.RawStreamMsg) api.TranscriptEntry {
	var r transcriptrec.Record
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return api.TranscriptEntry{ID: m.Sequence, Kind: "unreadable", Time: m.Time,
			Reason: "the stored record does not decode: " + err.Error()}
	}
	e := api.TranscriptEntry{ID: m.Sequence, Kind: r.Kind, Time: r.Time, Run: r.Run,
		Cause: redact.Text(r.Cause), Reason: redact.Text(r.Reason), Error: redact.Text(r.Error), Event: r.Event, Type: r.Type,
		From: r.From, Agent: r.Agent, AgentVersion: r.AgentVersion}
	for _, s := range r.MCP {
		s.Error = redact.Text(s.Error)
		e.MCP = append(e.MCP, s)
	}
	if r.Usage != nil {
		e.Usage = &api.TranscriptUsage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens}
	}
	if msg := r.Message; msg != nil {
		e.Role, e.MessageKind, e.Delivers = string(msg.Role), string(msg.Kind), msg.Delivers
		for _, b := range msg.Content {
			e.Content = append(e.Content, blockOf(b))
		}
	}
	return e
}

func blockOf(b llm.ContentBlock) api.TranscriptBlock {
	out := api.TranscriptBlock{Type: string(b.Type), Text: redact.Text(b.Text), ID: b.ID, Name: b.Name,
		ToolUseID: b.ToolUseID, Content: redact.Text(b.Content), IsError: b.IsError, Images: len(b.Images)}
	if len(b.Input) > 0 {
		out.Input = redact.JSON(b.Input)
	}
	if b.Image != nil {
		out.Images = 1
	}
	return out
}

// pageParams reads ?after= and ?limit=, refusing what is not a number.
func pageParams(r *http.Request) (after uint64, limit int, err error) {
	q := r.URL.Query()
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, problemf(http.StatusBadRequest, "bad-request", "Invalid after",
				"after=%q: want the id of an entry (a whole number, 0 for the start)", shortenQ(s))
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			return 0, 0, problemf(http.StatusBadRequest, "bad-request", "Invalid limit",
				"limit=%q: want a number from 1 to %d", shortenQ(s), api.MaxTranscriptLimit)
		}
	}
	return after, limit, nil
}
