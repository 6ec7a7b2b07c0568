package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/llm"
	"jetway/services/runner"
)

// Secrets the redactor catches, planted where a runner's own redaction
// would not have been: straight into stored records.
const (
	plantedAWSKey = "AKIAZ7QW3RT5YU8P2LMN"
	plantedGitHub = "ghp_4Xb9Kq2LmN7pR3sT8vW1yZ5aC6dE0fG2hJ4k"
)

// writeTranscript appends records to tenant/session's transcript as a
// runner does (JSON runner.Record on jetway.transcript.<tenant>.<session>).
func (f *fixture) writeTranscript(tenant, session string, recs ...runner.Record) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := f.js.Publish(ctx, "jetway.transcript."+tenant+"."+session, b); err != nil {
			f.t.Fatal(err)
		}
	}
}

// turn is the i-th record of the long session: turns of every kind a
// transcript holds, numbered in their text so order can be checked.
func turn(i int) runner.Record {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	mark := fmt.Sprintf("turn-%04d", i)
	switch i % 4 {
	case 0:
		return runner.Record{Kind: runner.RecordRunStarted, Run: "r", Cause: "input", Time: at, Message: &llm.Message{
			Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: mark}}}}
	case 1:
		return runner.Record{Kind: runner.RecordMessage, Run: "r", Time: at, Message: &llm.Message{Role: llm.RoleAssistant,
			Content: []llm.ContentBlock{{Type: llm.BlockText, Text: mark}, {Type: llm.BlockToolUse, ID: "t" + mark, Name: "bash",
				Input: json.RawMessage(`{"command":"curl -H 'Authorization: token ` + plantedGitHub + `' https://api.github.com"}`)}}}}
	case 2:
		return runner.Record{Kind: runner.RecordMessage, Run: "r", Time: at, Message: &llm.Message{Role: llm.RoleUser,
			Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "t" + mark, Content: mark + "\naws_access_key_id = " + plantedAWSKey}}}}
	}
	return runner.Record{Kind: runner.RecordRunEnded, Run: "r", Reason: mark, Time: at}
}

func entryMark(e api.TranscriptEntry) string {
	if e.Kind == runner.RecordRunEnded {
		return e.Reason
	}
	for _, b := range e.Content {
		for _, s := range []string{b.Text, b.Content} {
			if strings.HasPrefix(s, "turn-") {
				return s[:len("turn-0000")]
			}
		}
	}
	return ""
}

func TestTranscript_pages_a_2000_turn_session_in_order_redacted_and_only_to_its_tenant(t *testing.T) {
	f := newFixture(t)
	const n = 2000
	for i := range n {
		f.writeTranscript("default", "long", turn(i))
		if i%3 == 0 { // another session's records between: ids are not contiguous
			f.writeTranscript("default", "other", turn(i))
		}
	}

	seen := map[uint64]bool{}
	var after uint64
	next := 0
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		resp := f.do("GET", fmt.Sprintf("/v1/sessions/long/transcript?after=%d&limit=%d", after, 150), tokUser, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("page after %d: status %d: %s", after, resp.StatusCode, body)
		}
		for _, secret := range []string{plantedAWSKey, plantedGitHub, plantedGitHub[4:], plantedAWSKey[4:]} {
			if strings.Contains(string(body), secret) {
				t.Fatalf("page after %d serves the secret %q", after, secret)
			}
		}
		var page TranscriptPage
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			if seen[e.ID] || e.ID <= after {
				t.Fatalf("entry %d served twice or out of order (after %d)", e.ID, after)
			}
			seen[e.ID] = true
			if want := fmt.Sprintf("turn-%04d", next); entryMark(e) != want {
				t.Fatalf("entry %d is %q (%+v), want %s", e.ID, entryMark(e), e, want)
			}
			next++
		}
		if len(page.Entries) > 0 && page.Next != page.Entries[len(page.Entries)-1].ID {
			t.Fatalf("next = %d, want the last entry's id", page.Next)
		}
		after = page.Next
		if !page.More {
			break
		}
	}
	if next != n {
		t.Fatalf("paged %d entries, want %d", next, n)
	}

	// The default page, and one past the end.
	first := decode[TranscriptPage](t, f.do("GET", "/v1/sessions/long/transcript", tokUser, nil), http.StatusOK)
	if len(first.Entries) != api.DefaultTranscriptLimit || !first.More {
		t.Fatalf("default page holds %d entries (more %v), want %d and more", len(first.Entries), first.More, api.DefaultTranscriptLimit)
	}
	if tu := first.Entries[1].Content[1]; tu.Type != "tool_use" || tu.Name != "bash" || !strings.Contains(string(tu.Input), "[REDACTED]") {
		t.Fatalf("tool call = %+v, want bash with its token redacted", tu)
	}
	end := decode[TranscriptPage](t, f.do("GET", fmt.Sprintf("/v1/sessions/long/transcript?after=%d", after), tokUser, nil), http.StatusOK)
	if len(end.Entries) != 0 || end.More || end.Next != after {
		t.Fatalf("past the end: %+v", end)
	}

	// The Go client pages through all of it in order.
	c := f.client(t, tokUser)
	var got []uint64
	if err := c.EachTranscriptEntry(context.Background(), "long", 0, func(e api.TranscriptEntry) error {
		got = append(got, e.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got[0] != first.Entries[0].ID || got[n-1] != after {
		t.Fatalf("the client paged %d entries, want %d from %d to %d", len(got), n, first.Entries[0].ID, after)
	}

	// The NATS API answers the same page.
	f.serveNATS(t)
	resp := natsRequest(t, f, SubjectTranscript, tokUser, `{"session":"long","limit":100}`)
	var viaNATS TranscriptPage
	if err := json.Unmarshal(resp.Data, &viaNATS); err != nil || len(viaNATS.Entries) != 100 || viaNATS.Next != first.Next {
		t.Fatalf("NATS page: %s (%v)", resp.Data, err)
	}
	if code := natsRequest(t, f, SubjectTranscript, tokAcme, `{"session":"long"}`).Header.Get("Nats-Service-Error-Code"); code != "404" {
		t.Fatalf("another tenant over NATS: code %q, want 404", code)
	}

	// Another tenant's token finds nothing, as on every session route.
	problemOf(t, f.do("GET", "/v1/sessions/long/transcript", tokAcme, nil), http.StatusNotFound)
	problemOf(t, f.do("GET", "/v1/sessions/long/transcript?limit=501", tokUser, nil), http.StatusBadRequest)
	problemOf(t, f.do("GET", "/v1/sessions/long/transcript?after=x", tokUser, nil), http.StatusBadRequest)
}

// BenchmarkTranscriptPage measures one page of the default size read by
// direct gets (one round trip an entry), the cost a history reader pays.
func BenchmarkTranscriptPage(b *testing.B) {
	f := newFixture(b)
	for i := range 1000 {
		f.writeTranscript("default", "long", turn(i))
	}
	p, err := f.d.auth.Authenticate(tokUser)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		page, err := f.d.Transcript(ctx, p, "long", 400, 0)
		if err != nil || len(page.Entries) != api.DefaultTranscriptLimit {
			b.Fatalf("page: %d entries, %v", len(page.Entries), err)
		}
	}
}
