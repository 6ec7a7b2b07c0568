package e2e

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/client"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/redact"
	"jetway/pkg/redact/redacttest"
)

// TestRedaction_no_secret_reaches_a_reader_on_any_surface drives one run of
// a whole `jetway dev` with a fake Anthropic server as the model: a shell
// command that holds every credential of the redaction corpus in its
// arguments writes them to a file and prints them, then read_file reads
// the file and grep matches it; a second run ends on a provider error that
// echoes a key. None of the credentials may then be found
// raw in what a person or the model reads: the model's next requests, the
// SSE stream (tool_use and tool_result events, job events, headlines), the
// job list (summary and line), everything JetStream stores (transcripts,
// run output, job records) and the services' log. The file the command
// wrote must hold them raw: the command ran as the model wrote it.
func TestRedaction_no_secret_reaches_a_reader_on_any_surface(t *testing.T) {
	t.Parallel()
	cases := redacttest.Corpus()
	pem, _ := redacttest.PEMKey()
	var file []string
	for _, c := range cases {
		file = append(file, c.Text)
	}
	file = append(file, pem)
	command := "cat > creds.env <<'EOF'\n" + strings.Join(file, "\n") + "\nEOF\ncat creds.env"
	input := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	model := llmtest.NewAnthropic(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "toolu_shell", Name: "shell", Input: input(map[string]any{"command": command})}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{ID: "toolu_read", Name: "read_file", Input: input(map[string]any{"path": "creds.env"})},
			{ID: "toolu_grep", Name: "grep", Input: input(map[string]any{"pattern": "[A-Za-z0-9]", "path": "creds.env"})},
		}},
		llmtest.Reply{Text: "all read"},
		// A provider error that echoes a key, as some do: the run's end,
		// its headline and the log line that reports it carry the text.
		llmtest.Reply{Error: &llmtest.APIError{Status: 401, Type: "authentication_error", Message: "invalid x-api-key " + leakedKey}},
	)
	d := startDev(t, devOptions{Env: []string{"ANTHROPIC_API_KEY=sk-test", "ANTHROPIC_BASE_URL=" + model.URL()}})
	if tools := d.line(t, "tools: "); strings.HasPrefix(tools, "none") {
		t.Skipf("the runner has no jobs tools: %q", tools)
	}
	const session = "redact"
	c := d.client(t)
	s := follow(t, c, session, client.StreamOptions{})
	_, end, said := s.runFor(t, d.input(t, session, "read my credentials"))
	if end.Reason != "completed" || said != "all read" {
		t.Fatalf("the run ended %+v saying %q", end, said)
	}
	if _, end, _ := s.runFor(t, d.input(t, session, "once more")); end.Reason != "model_error" {
		t.Fatalf("the second run ended %+v, want a model error", end)
	}

	// The secrets: each case's, and the private key's body lines.
	secrets := map[string]string{}
	for _, c := range cases {
		secrets[c.Secret] = c.Name
	}
	_, body := redacttest.PEMKey()
	for i, line := range strings.Split(body, "\n") {
		secrets[line] = "private key line " + string(rune('a'+i))
	}
	secrets[leakedKey[len("sk-ant-"):]] = "key in the provider's error"
	check := func(surface, text string) {
		t.Helper()
		for secret, name := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds the %s raw (%q)", surface, name, secret)
			}
		}
	}

	// The command ran as the model wrote it.
	var wrote []byte
	_ = filepath.WalkDir(d.Data, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == "creds.env" {
			wrote, _ = os.ReadFile(path)
		}
		return nil
	})
	if !strings.Contains(string(wrote), cases[0].Secret) || !strings.Contains(string(wrote), "-----END RSA PRIVATE KEY-----") {
		t.Fatalf("the workspace's creds.env does not hold what the command wrote:\n%s", wrote)
	}

	// The model: every request after the first holds the calls and results.
	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the model got %d requests, want 4", len(reqs))
	}
	for i, r := range reqs[1:] {
		check("model request "+string(rune('2'+i)), string(r.Body))
	}
	if !strings.Contains(string(reqs[2].Body), redact.Marker) {
		t.Errorf("the model's third request shows no redaction at all:\n%s", reqs[2].Body)
	}

	// SSE: tool calls, tool results, job events, headlines.
	evs := s.feed.snapshot()
	var stream strings.Builder
	var sawCall, sawResult bool
	for _, e := range evs {
		stream.Write(e.Data)
		stream.WriteByte('\n')
		switch e.Type {
		case events.TypeToolUse:
			sawCall = sawCall || strings.Contains(string(e.Data), redact.Marker)
		case events.TypeToolResult:
			sawResult = true
		}
	}
	if !sawCall || !sawResult {
		t.Errorf("the stream lacks a redacted tool call (%t) or a tool result (%t):\n%s", sawCall, sawResult, showEvents(evs))
	}
	check("the SSE stream", stream.String())

	// The job list: the shell command's record, summary and line.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs, err := c.Jobs(ctx, session)
	if err != nil || len(jobs) == 0 {
		t.Fatalf("jobs of %s: %v %v", session, jobs, err)
	}
	for _, j := range jobs {
		check("job "+j.Job, string(j.Record))
	}

	// Everything JetStream stores: transcripts, run output, job records.
	js := d.jetStream(t)
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted
			}
			check("stream "+name+" message "+m.Subject, string(m.Data))
		}
	}
	if err := names.Err(); err != nil && err != jetstream.ErrEndOfData {
		t.Fatal(err)
	}

	// The services' log.
	log, err := os.ReadFile(d.log)
	if err != nil {
		t.Fatal(err)
	}
	check("the service log", string(log))
	if !strings.Contains(string(log), "invalid x-api-key sk-ant-"+redact.Marker) {
		t.Errorf("the service log does not report the provider's error, redacted:\n%s", d.logTail(20))
	}
}

// leakedKey is the key the fake provider's error echoes.
var leakedKey = "sk-ant-api03-" + strings.Repeat("Xk9mQ2vL7pR4", 8) + "AA"
