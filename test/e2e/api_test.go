package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"jetway/pkg/auth"
	"jetway/pkg/client"
	"jetway/pkg/events"
)

// echoScript answers each kind of event with a line that could only come
// from reading it: the external events' markers are in their data, and the
// job notice is quoted back through the script's placeholders.
const echoScript = `{
  "description": "e2e: say what arrived",
  "turns": [
    {"when": {"user_contains": "e2e-via-http"}, "text": "I read the event that came over HTTP (e2e-via-http)."},
    {"when": {"user_contains": "e2e-via-bus"}, "text": "I read the event that came over the bus (e2e-via-bus)."},
    {"when": {"notice_contains": "[background job notice]"}, "text": "Job news: {{notice}} Last line: {{notice_output}}"},
    {"when": {"user_contains": "half a thought"}, "text": "You wrote half a thought, typed around a headline."},
    {"text": "Noted your input."}
  ]
}`

// otherTenantToken belongs to tenant acme, given to dev through the
// environment next to the tokens it keeps in tokens.json.
const otherTenantToken = "jw_e2e_other_tenant_token"

// TestScripted_stack runs one `jetway dev` with a small script as the model
// and checks, each in its own session, the paths an event takes from the
// outside to the model and back to a person.
func TestScripted_stack(t *testing.T) {
	t.Parallel()
	hooks, webhooks := startFailingReceiver(t, 2)
	d := startDev(t, devOptions{
		Script: echoScript,
		Env:    []string{auth.EnvTokens + "=" + otherTenantToken + ":acme"},
		Files:  map[string]string{"webhooks.json": webhooks},
	})

	t.Run("input_starts_a_run_whose_lifecycle_and_text_stream_over_SSE", func(t *testing.T) {
		t.Parallel()
		s := follow(t, d.client(t), "e2e-input", client.StreamOptions{})
		id := d.input(t, "e2e-input", "hello from the e2e test")
		start, end, txt := s.runFor(t, id)
		if start.Cause != "dispatch" || end.Reason != "completed" || txt != "Noted your input." {
			t.Errorf("run %+v ended %+v with text %q", start, end, txt)
		}
		evs := s.snapshot()
		i := slices.IndexFunc(evs, func(e client.Event) bool { return e.Type == events.TypeRunStarted })
		j := slices.IndexFunc(evs, func(e client.Event) bool { return e.Type == events.TypeRunText })
		k := slices.IndexFunc(evs, func(e client.Event) bool { return e.Type == events.TypeRunEnded })
		if !(i < j && j < k) {
			t.Errorf("want started, text, ended in that order; got indexes %d, %d, %d:\n%s", i, j, k, showEvents(evs))
		}
		s.until(t, runTimeout, "the notifier's headlines for the run's start and end", func(evs []client.Event) bool {
			hs := headlines(evs)
			return slices.ContainsFunc(hs, func(h string) bool { return strings.HasPrefix(h, "run "+start.Run+" started") }) &&
				slices.ContainsFunc(hs, func(h string) bool { return strings.HasPrefix(h, "run "+start.Run+" completed") })
		})
	})

	// Other systems publish with any CloudEvents SDK: binary mode is the
	// SDK's default, structured is one option away.
	for _, mode := range []string{"binary", "structured"} {
		t.Run("CloudEvent_over_HTTP_in_"+mode+"_mode_reaches_the_model_and_the_person", func(t *testing.T) {
			t.Parallel()
			session := "e2e-ce-" + mode
			s := follow(t, d.client(t), session, client.StreamOptions{})
			ce := cloudevents.NewEvent()
			ce.SetID(events.NewID())
			ce.SetType("com.example.e2e.deploy")
			ce.SetSource("https://ci.example.com/e2e")
			ce.SetSubject(auth.DefaultTenant + "/" + session)
			if err := ce.SetData(cloudevents.ApplicationJSON, map[string]string{"marker": "e2e-via-http", "env": "staging"}); err != nil {
				t.Fatal(err)
			}
			if status := sendCE(t, d, d.User, ce, mode == "structured"); status != http.StatusAccepted {
				t.Fatalf("POST /v1/events answered %d, want 202", status)
			}
			_, end, txt := s.runFor(t, ce.ID())
			if txt != "I read the event that came over HTTP (e2e-via-http)." || end.Reason != "completed" {
				t.Errorf("run ended %+v with text %q", end, txt)
			}
		})
	}

	t.Run("event_published_on_the_bus_in_binary_mode_reaches_the_model_and_the_person", func(t *testing.T) {
		t.Parallel()
		const session = "e2e-bus"
		s := follow(t, d.client(t), session, client.StreamOptions{})
		e, err := events.New(auth.DefaultTenant, session, "https://ci.example.com/e2e", events.External{
			Type: "com.example.e2e.deploy", DataContentType: events.ContentTypeJSON,
			Data: []byte(`{"marker":"e2e-via-bus","env":"production"}`),
		})
		if err != nil {
			t.Fatal(err)
		}
		subject, err := events.EventsSubject(auth.DefaultTenant, session)
		if err != nil {
			t.Fatal(err)
		}
		if m := publishEvent(t, d.jetStream(t), subject, e); m.Header.Get("ce-specversion") == "" {
			t.Errorf("not binary mode: headers %v", m.Header)
		}
		_, end, txt := s.runFor(t, e.ID())
		if txt != "I read the event that came over the bus (e2e-via-bus)." || end.Reason != "completed" {
			t.Errorf("run ended %+v with text %q", end, txt)
		}
	})

	t.Run("job_exit_while_idle_wakes_the_session_and_the_person_reads_its_headline", func(t *testing.T) {
		t.Parallel()
		const session = "e2e-job-exit"
		s := follow(t, d.client(t), session, client.StreamOptions{})
		id := publishJobExited(t, d.jetStream(t), session, events.JobExited{
			ID: 7, Program: "make", ExitStatus: 0, RunningForMS: (21 * time.Minute).Milliseconds(),
			Tail: "compiling\nall 42 tests passed", Status: events.StatusExited,
		})
		_, end, txt := s.runFor(t, id)
		if want := "Job news: job 7 (make) exited 0 after 21m. Last line: all 42 tests passed"; txt != want || end.Reason != "completed" {
			t.Errorf("run ended %+v with text %q, want %q", end, txt, want)
		}
		s.until(t, runTimeout, "the job's headline", func(evs []client.Event) bool {
			return slices.Contains(headlines(evs), "job 7 (make) exited 0 after 21m")
		})
	})

	t.Run("refusals_wrong_token_other_tenant_forbidden_type_and_limits", func(t *testing.T) {
		t.Parallel()
		testRefusals(t, d)
	})

	t.Run("SSE_resumed_after_a_disconnect_loses_nothing_and_repeats_nothing", func(t *testing.T) {
		t.Parallel()
		testResume(t, d)
	})

	t.Run("webhook_that_fails_twice_gets_the_same_signed_headline_until_it_accepts", func(t *testing.T) {
		t.Parallel()
		testWebhookRetries(t, d, hooks)
	})

	t.Run("chat_in_a_terminal_shows_a_headline_while_the_prompt_waits_for_input", func(t *testing.T) {
		t.Parallel()
		testChatHeadlineWhileTyping(t, d)
	})
}

// sendCE posts e to /v1/events with the CloudEvents SDK's HTTP client, in
// binary content mode (the SDK's default) or structured, and returns the
// HTTP status it got.
func sendCE(t *testing.T, d *devStack, token string, e cloudevents.Event, structured bool) int {
	t.Helper()
	p, err := cloudevents.NewHTTP(cloudevents.WithTarget(d.URL+"/v1/events"), cloudevents.WithHeader("Authorization", "Bearer "+token))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if structured {
		ctx = cloudevents.WithEncodingStructured(ctx)
	}
	res := c.Send(ctx, e)
	var hr *cehttp.Result
	if !cloudevents.ResultAs(res, &hr) {
		t.Fatalf("send %s: no HTTP result: %v", e.Type(), res)
	}
	return hr.StatusCode
}

// problem checks that an answer is an RFC 9457 problem with status want.
func problem(t *testing.T, what string, resp *http.Response, body []byte, want int) client.Problem {
	t.Helper()
	var p client.Problem
	if resp.StatusCode != want {
		t.Errorf("%s: status %d, want %d: %s", what, resp.StatusCode, want, body)
		return p
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Status != want || p.Title == "" {
		t.Errorf("%s: problem %s (%v)", what, body, err)
	}
	return p
}

func testRefusals(t *testing.T, d *devStack) {
	const session = "e2e-auth"
	s := follow(t, d.client(t), session, client.StreamOptions{})
	s.runFor(t, d.input(t, session, "make the session exist"))
	input := []byte(`{"text":"hi"}`)

	resp, body := d.do(t, http.MethodPost, "/v1/sessions/"+session+"/input", "jw_not_a_token", input)
	problem(t, "wrong token", resp, body, http.StatusUnauthorized)
	resp, body = d.do(t, http.MethodGet, "/v1/sessions/"+session+"/stream", "", nil)
	problem(t, "no token on the stream", resp, body, http.StatusUnauthorized)

	// Another tenant neither sees the session nor publishes into it.
	if resp, body := d.do(t, http.MethodGet, "/v1/sessions/"+session, d.User, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("own session: %d %s", resp.StatusCode, body)
	}
	resp, body = d.do(t, http.MethodGet, "/v1/sessions/"+session, otherTenantToken, nil)
	problem(t, "another tenant reads the session", resp, body, http.StatusNotFound)
	ce := cloudevents.NewEvent()
	ce.SetID(events.NewID())
	ce.SetType("com.example.e2e.intrusion")
	ce.SetSource("https://acme.example.com")
	ce.SetSubject(auth.DefaultTenant + "/" + session)
	_ = ce.SetData(cloudevents.ApplicationJSON, map[string]string{"x": "y"})
	if status := sendCE(t, d, otherTenantToken, ce, false); status != http.StatusForbidden {
		t.Errorf("another tenant's CloudEvent into the session: %d, want 403", status)
	}

	// Nobody may publish a job's end over HTTP: only jobs workers, on the bus.
	forged := cloudevents.NewEvent()
	forged.SetID(events.NewID())
	forged.SetType(events.TypeJobExited)
	forged.SetSource("https://forger.example.com")
	forged.SetSubject(auth.DefaultTenant + "/" + session)
	_ = forged.SetData(cloudevents.ApplicationJSON, events.JobExited{ID: 1, Program: "rm", Status: events.StatusExited})
	if status := sendCE(t, d, d.User, forged, false); status != http.StatusForbidden {
		t.Errorf("a forged %s: %d, want 403", events.TypeJobExited, status)
	}

	big := bytes.Repeat([]byte("x"), 2<<20)
	resp, body = d.do(t, http.MethodPost, "/v1/sessions/"+session+"/input", d.User,
		append(append([]byte(`{"text":"`), big...), '"', '}'))
	problem(t, "a 2 MiB body", resp, body, http.StatusRequestEntityTooLarge)

	// Nothing refused got in: the next run delivers the next input alone.
	next := d.input(t, session, "still here")
	start, _, _ := s.runFor(t, next)
	if !slices.Equal(start.Events, []string{next}) {
		t.Errorf("the run after the refusals delivered %v, want only %s", start.Events, next)
	}

	// The rate limit, last: acme's budget is its own, and this spends it.
	for i := 0; ; i++ {
		resp, body := d.do(t, http.MethodGet, "/v1/sessions", otherTenantToken, nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			problem(t, "over the rate limit", resp, body, http.StatusTooManyRequests)
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
			}
			break
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if i == 500 {
			t.Fatal("500 requests in a row and none refused by the rate limit")
		}
	}
}
