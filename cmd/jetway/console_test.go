package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"jetway/internal/testutil"
	"jetway/pkg/auth"
	"jetway/pkg/bus"
)

// These tests drive the web console in a real headless Chromium against a
// real `jetway dev` (the built binary, its embedded NATS, runner, jobs
// worker and notifier), with the script provider standing in for the model.
// Each writes a screenshot of every page it visits to a directory it logs.

// browserWait bounds one step in the browser; devWait a condition on the
// dev stack itself.
const (
	browserWait = 60 * time.Second
	devWait     = 60 * time.Second
)

// chromium finds the browser, or skips the test saying how to get one;
// with JETWAY_BROWSER_TESTS=1 (CI, once it installed chromium) a missing
// browser is a failure instead.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("JETWAY_BROWSER_TESTS") == "1" {
		t.Fatal("JETWAY_BROWSER_TESTS=1 but no chromium is installed: apt-get install chromium")
	}
	t.Skip("no chromium found, so the console's browser tests cannot run here (apt-get install chromium); JETWAY_BROWSER_TESTS=1 makes this a failure")
	return ""
}

// consoleTokens are the tokens of a console test's dev: three of tenant
// "default", a user of tenant "other" and an operator of no tenant.
type consoleTokens struct{ user, admin, operator, other, operatorNoTenant string }

// startConsoleDev starts `jetway dev` with the script as its model and a
// tokens file written beforehand, so a second tenant exists.
func startConsoleDev(t *testing.T, script string) (*devStack, consoleTokens) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	var tk consoleTokens
	for _, p := range []*string{&tk.user, &tk.admin, &tk.operator, &tk.other, &tk.operatorNoTenant} {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		*p = tok
	}
	f := auth.File{
		Tokens: []auth.Grant{
			{Token: tk.user, Tenant: "default"},
			{Token: tk.admin, Tenant: "default", Admin: true},
			{Token: tk.other, Tenant: "other"},
		},
		Operators: []auth.Grant{{Token: tk.operator, Tenant: "default"}, {Token: tk.operatorNoTenant}},
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, auth.DevTokensFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETWAY_SCRIPT", path)
	p := start(t, "dev", "--data", data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0", "--partitions", "2", "--log-format", "json")
	url, _, _ := strings.Cut(p.waitLine(t, "http: ", devWait), " ")
	p.waitLine(t, "ready;", devWait)
	return &devStack{p: p, data: data, url: url, tokens: filepath.Join(data, auth.DevTokensFile)}, tk
}

// apiCall calls the dev's API directly (not through the browser) and
// decodes the JSON answer into out, when out is not nil.
func apiCall(t *testing.T, d *devStack, method, path, token, body string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// browser is one headless Chromium tab on the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
	n     int
	mu    sync.Mutex
	urls  []string
}

// newBrowser starts Chromium for one test, closed at its end, and records
// the URL of every request the page makes.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	ctx := startChromium(t)
	shots, err := os.MkdirTemp("", "jetway-console-"+regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s", shots)
	b := &browser{t: t, ctx: ctx, base: base, shots: shots}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			b.mu.Lock()
			b.urls = append(b.urls, e.Request.URL)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	return b
}

// chromiumStarts is how many times a test tries to start Chromium: on a
// loaded machine it has exited at start now and then ("chrome failed to
// start", nothing printed but the usual warnings), which says nothing
// about the console.
const chromiumStarts = 3

// startChromium starts a headless Chromium with one tab, closed when the
// test ends, and returns the tab's context.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	var err error
	for try := 1; try <= chromiumStarts; try++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelTab := chromedp.NewContext(actx)
		// The first action starts the browser; it must run on the tab's
		// own context, not on a step's, or the step's deadline would end it.
		if err = chromedp.Do(ctx); err == nil {
			t.Cleanup(func() { cancelTab(); cancelAlloc() })
			return ctx
		}
		cancelTab()
		cancelAlloc()
		t.Logf("start chromium, try %d of %d: %v", try, chromiumStarts, err)
	}
	t.Fatalf("start chromium: %v", err)
	return nil
}

// do runs steps under the step deadline; a failure shows the page.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

// fail stops the test with what the page showed.
func (b *browser) fail(what string, err error) {
	b.t.Helper()
	b.shot("failed")
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	b.t.Fatalf("%s: %v\npage:\n%s", what, err, text)
}

// until waits for a JavaScript condition on the page.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingTimeout(browserWait), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.fail("waiting for "+what, err)
	}
}

// eval evaluates a JavaScript expression and returns its value.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

// shot saves a screenshot of the viewport as NN-name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	b.capture(name, chromedp.CaptureScreenshot())
}

// capture saves what take captures as NN-name.png.
func (b *browser) capture(name string, take chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, take)
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.n++
	if err := os.WriteFile(filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.n, name)), png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
	}
}

// shotNarrow saves a screenshot of the whole page as a 390 px wide
// phone shows it.
func (b *browser) shotNarrow(name string) {
	b.t.Helper()
	b.do("narrow viewport", chromedp.EmulateViewport(390, 844))
	b.capture(name+"-390px", chromedp.FullScreenshot(100))
	b.do("wide viewport", chromedp.EmulateViewport(1280, 900))
}

// signIn opens the console and signs in with token.
func (b *browser) signIn(token string) {
	b.t.Helper()
	b.do("open the console", chromedp.Navigate(b.base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("form button[type=submit]")))
	b.until("the sessions page", `document.querySelector('table[aria-label=Sessions] tbody tr') !== null`)
}

// goTo shows a console route, as following a link does.
func (b *browser) goTo(hash string) {
	b.t.Helper()
	b.do("go to "+hash, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, hash)))
}

// openSession shows a session's page and waits for its live stream.
func (b *browser) openSession(name string) {
	b.t.Helper()
	b.goTo("#/session/" + name)
	b.until("the session's stream to be live", `document.querySelector('.conn.live') !== null`)
}

// unlabelled lists the page's form controls that have no label, so a
// screen reader would announce them by nothing but their kind.
func (b *browser) unlabelled() []string {
	b.t.Helper()
	return eval[[]string](b, `[...document.querySelectorAll('input, select, textarea')]
		.filter(c => c.labels.length === 0 && !c.getAttribute('aria-label'))
		.map(c => c.id || c.outerHTML)`)
}

// clear empties an input, as selecting its text and deleting it does.
func (b *browser) clear(sel string) {
	b.t.Helper()
	b.do("clear "+sel, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ''`, sel)))
}

// transcript is the session page's transcript as text.
func (b *browser) transcript() string {
	b.t.Helper()
	return eval[string](b, `document.getElementById('transcript').innerText`)
}

func TestConsole_signs_in_streams_an_input_and_never_puts_the_token_in_a_URL(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "Hello from the console test.\nA second line, streamed word by word."}]}`)
	b := newBrowser(t, d.url)

	b.do("open the console", chromedp.Navigate(b.base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.shot("sign-in")
	b.do("sign in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "jw_not-a-token"),
		chromedp.Click(chromedp.CSS("form button[type=submit]")))
	b.until("the refusal at the token field", `document.getElementById('token-error').textContent.includes('not valid')`)
	b.shot("sign-in-refused")
	b.clear("#token")
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), tk.user),
		chromedp.Click(chromedp.CSS("form button[type=submit]")))
	b.until("the sessions page", `document.querySelector('table[aria-label=Sessions] tbody tr') !== null`)
	b.shot("sessions-empty")

	b.do("open a session from the form", chromedp.SendKeys(chromedp.CSS("#open-session"), "s1"),
		chromedp.Click(chromedp.CSS(`form[aria-label="Open a session"] button`)))
	b.until("the session's stream to be live", `document.querySelector('.conn.live') !== null`)
	b.do("type an input", chromedp.SendKeys(chromedp.CSS("#message"), "say hello"), chromedp.Click(chromedp.CSS("#send")))
	b.until("the streamed answer", `document.getElementById('live').innerText.includes('A second line, streamed word by word.')`)
	b.until("the run's end with its reason", `document.getElementById('live').innerText.includes('completed after')`)
	if got := b.transcript(); !strings.Contains(got, "you:") || !strings.Contains(got, "say hello") ||
		strings.Count(got, "Hello from the console test.") != 1 {
		t.Errorf("the transcript shows:\n%s\nwant the input once and the answer once", got)
	}
	b.shot("session-streamed")
	b.shotNarrow("session-streamed")
	if u := b.unlabelled(); len(u) != 0 {
		t.Errorf("the session page has controls without a label: %v", u)
	}

	// Opened afresh, the session's history comes from the transcript API.
	b.goTo("#/sessions")
	b.until("the session listed", `document.querySelector('table[aria-label=Sessions] a[href="#/session/s1"]') !== null`)
	b.shot("sessions")
	b.shotNarrow("sessions")
	if u := b.unlabelled(); len(u) != 0 {
		t.Errorf("the sessions page has controls without a label: %v", u)
	}
	b.openSession("s1")
	b.until("the history", `document.getElementById('history').innerText.includes('A second line, streamed word by word.')`)
	b.shot("session-history")

	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.until("the sign-in form", `document.getElementById('token') !== null`)
	if left := eval[string](b, `sessionStorage.getItem('jetway.token') || ''`); left != "" {
		t.Errorf("the token is still in session storage after sign-out")
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.urls) < 5 {
		t.Fatalf("only %d requests recorded: the check below would prove nothing", len(b.urls))
	}
	for _, u := range b.urls {
		if strings.Contains(u, tk.user) || strings.Contains(u, "jw_not-a-token") {
			t.Errorf("a request URL carries the token: %s", u)
		}
	}
}

func TestConsole_shows_a_jobs_output_tail_growing_and_kills_it(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [
	  {"text": "Starting the ticker.", "tool_calls": [{"name": "shell", "input": {"command": "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done", "background": true}}]},
	  {"text": "It ticks in the background."}
	]}`)
	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("jobs")
	b.do("start the job", chromedp.SendKeys(chromedp.CSS("#message"), "start the ticker"), chromedp.Click(chromedp.CSS("#send")))
	b.until("job 1's tail", `document.getElementById('tail-1')?.textContent.includes('tick 3')`)
	lines := func() int {
		return eval[int](b, `(document.getElementById('tail-1').textContent.match(/lines so far/) ? parseInt(document.getElementById('tail-1').textContent.split('— ')[1]) : 0)`)
	}
	first := lines()
	b.until("the tail to grow", fmt.Sprintf(`parseInt((document.getElementById('tail-1').textContent.split('— ')[1]) || '0') > %d`, first+3))
	b.shot("job-running")
	b.shotNarrow("job-running")

	b.do("kill the job", chromedp.Click(chromedp.CSS("#kill-1")))
	b.until("the job shown killed", `document.getElementById('job-status-1')?.textContent === 'killed'`)
	b.until("the kill reported", `document.getElementById('flash').textContent.includes('job 1 killed')`)
	var jobs struct {
		Jobs []struct {
			Job    string          `json:"job"`
			Record json.RawMessage `json:"record"`
		} `json:"jobs"`
	}
	apiCall(t, d, "GET", "/v1/sessions/jobs/jobs", tk.user, "", &jobs)
	if len(jobs.Jobs) != 1 || !strings.Contains(string(jobs.Jobs[0].Record), `"killed"`) {
		t.Errorf("the job table says %+v, want job 1 killed", jobs.Jobs)
	}
	b.shot("job-killed")
}

func TestConsole_flips_Ground_Stop_and_shows_it(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "Ready when you are."}]}`)
	b := newBrowser(t, d.url)
	b.signIn(tk.admin)
	b.openSession("gs")
	b.do("send a line", chromedp.SendKeys(chromedp.CSS("#message"), "hello"), chromedp.Click(chromedp.CSS("#send")))
	b.until("the answer", `document.getElementById('live').innerText.includes('Ready when you are.')`)

	b.do("turn Ground Stop on", chromedp.SendKeys(chromedp.CSS("#gs-reason"), "console drill"), chromedp.Click(chromedp.CSS("#gs-toggle")))
	b.until("the Ground Stop banner", `document.getElementById('gs-banner')?.textContent.includes('console drill')`)
	var st struct {
		GroundStop bool   `json:"ground_stop"`
		Reason     string `json:"reason"`
	}
	apiCall(t, d, "GET", "/v1/stop?session=gs", tk.user, "", &st)
	if !st.GroundStop || st.Reason != "console drill" {
		t.Errorf("the API says %+v after the console turned Ground Stop on", st)
	}
	b.shot("ground-stop-on")
	b.shotNarrow("ground-stop-on")

	b.goTo("#/sessions")
	b.until("the sessions page showing it", `[...document.querySelectorAll('table[aria-label=Sessions] tbody tr')].some(r => r.innerText.includes('gs') && r.querySelector('.badge.stop'))`)
	b.shot("sessions-ground-stop")

	b.openSession("gs")
	b.until("the lift button", `document.getElementById('gs-toggle')?.textContent === 'Lift Ground Stop'`)
	b.do("lift Ground Stop", chromedp.Click(chromedp.CSS("#gs-toggle")))
	b.until("the banner gone", `document.getElementById('gs-banner') === null && document.getElementById('gs-state').textContent.startsWith('Off')`)
	apiCall(t, d, "GET", "/v1/stop?session=gs", tk.user, "", &st)
	if st.GroundStop {
		t.Errorf("the API says Ground Stop is still on after the console lifted it")
	}

	// The tenant's and the global switch have no control here: the page
	// says who lifts them and with what, and the command it names does.
	for _, sw := range []struct {
		token, query, hint string
		lift               []string
	}{
		{tk.admin, "", "jetway stop --off --tenant default", []string{"--tenant", "default"}},
		{tk.operator, "?scope=global", "jetway stop --off --global", []string{"--global"}},
	} {
		if code := apiCall(t, d, "POST", "/v1/stop"+sw.query, sw.token, `{"reason": "drill"}`, nil); code != http.StatusOK {
			t.Fatalf("POST /v1/stop%s: %d", sw.query, code)
		}
		b.until("the hint naming "+sw.hint, `document.getElementById('gs-lift-hint')?.textContent.includes(`+strconv.Quote(sw.hint)+`)`)
		b.shot("ground-stop-lift-hint")
		if out, err := runCLI(t, append([]string{"stop", "--off", "--url", d.url, "--token", sw.token}, sw.lift...)...); err != nil {
			t.Fatalf("jetway stop --off %s: %v\n%s", sw.lift, err, out)
		}
		b.until("the hint gone once lifted", `document.getElementById('gs-lift-hint') === null && document.getElementById('gs-state').textContent.startsWith('Off')`)
	}

	// A user token may not flip it: the refusal is said in words.
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.signIn(tk.user)
	b.openSession("gs")
	// The toggle acts on the state it shows: press it once the page has
	// read it, through the element itself (a click at coordinates misses
	// when the timeline above is drawn between aiming and clicking).
	b.until("the switch shown off", `document.getElementById('gs-state')?.textContent.startsWith('Off')`)
	b.do("try Ground Stop as a user", chromedp.Evaluate[chromedp.Void](`document.getElementById('gs-toggle').click()`))
	b.until("the refusal in words", `document.getElementById('flash').textContent.startsWith('Turning Ground Stop on failed:')`)
	b.shot("ground-stop-refused")
}

func TestConsole_shows_an_agents_validation_error_at_the_field_and_binds_a_session_to_it(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "ok"}]}`)
	if code := apiCall(t, d, "PUT", "/v1/agents/reviewer", tk.admin, `{"instructions": "Review the diff.", "description": "reads diffs",
		"limits": {"max_subagents": 3}, "mcp": [{"name": "gh", "transport": "stdio", "command": "gh-mcp"}]}`, nil); code != http.StatusOK {
		t.Fatalf("PUT agent: %d", code)
	}
	b := newBrowser(t, d.url)
	b.signIn(tk.admin)
	b.goTo("#/agents")
	b.until("the agents list", `document.querySelector('table[aria-label="Agent profiles"] a[href="#/agents/reviewer"]') !== null`)
	b.shot("agents")
	b.shotNarrow("agents")
	b.do("open the agent", chromedp.Click(chromedp.CSS(`a[href="#/agents/reviewer"]`)))
	b.until("the form filled", `document.getElementById('f-instructions')?.value === 'Review the diff.'`)
	if u := b.unlabelled(); len(u) != 0 {
		t.Errorf("the agent form has controls without a label: %v", u)
	}

	b.do("enter a bad duration", chromedp.SendKeys(chromedp.CSS("#f-limits-max_duration"), "soon"), chromedp.Click(chromedp.CSS("#save-agent")))
	b.until("the error at the field", `document.getElementById('err-f-limits-max_duration')?.textContent.includes('soon')`)
	if inv := eval[string](b, `document.getElementById('f-limits-max_duration').getAttribute('aria-invalid') + ' ' + document.activeElement.id`); inv != "true f-limits-max_duration" {
		t.Errorf("the field is not marked and focused: %q", inv)
	}
	b.shot("agent-field-error")
	b.shotNarrow("agent-field-error")

	b.clear("#f-limits-max_duration")
	b.do("fix it", chromedp.SendKeys(chromedp.CSS("#f-limits-max_duration"), "30m"), chromedp.Click(chromedp.CSS("#save-agent")))
	b.until("the save reported", `document.getElementById('flash').textContent.startsWith('Saved reviewer')`)
	if got := eval[string](b, `document.getElementById('err-f-limits-max_duration').textContent`); got != "" {
		t.Errorf("the old error is still shown: %q", got)
	}
	var a struct {
		Limits struct {
			MaxDuration  string `json:"max_duration"`
			MaxSubagents int    `json:"max_subagents"`
		} `json:"limits"`
		Description string `json:"description"`
		MCP         []struct {
			Name    string `json:"name"`
			Command string `json:"command"`
		} `json:"mcp"`
	}
	apiCall(t, d, "GET", "/v1/agents/reviewer", tk.admin, "", &a)
	if a.Limits.MaxDuration != "30m" || a.Description != "reads diffs" || a.Limits.MaxSubagents != 3 ||
		len(a.MCP) != 1 || a.MCP[0].Name != "gh" || a.MCP[0].Command != "gh-mcp" {
		t.Errorf("the stored profile is %+v, want max_duration 30m and the description, sub-agent limit and MCP server kept", a)
	}
	b.shot("agent-saved")

	// A refusal naming a field inside the MCP list is shown at that list.
	b.do("enter an MCP server without a URL", chromedp.SetValue(chromedp.CSS("#f-mcp"), `[{"name": "web", "transport": "http"}]`),
		chromedp.Click(chromedp.CSS("#save-agent")))
	b.until("the error at the MCP field", `document.getElementById('err-f-mcp')?.textContent.includes('mcp[0]')`)
	b.shot("agent-mcp-error")

	// The saved profile can be chosen for a session from the composer.
	b.openSession("bound")
	b.until("the agent offered", `[...document.querySelectorAll('#agent option')].some(o => o.value === 'reviewer')`)
	b.do("send as reviewer", chromedp.SetValue(chromedp.CSS("#agent"), "reviewer"),
		chromedp.SendKeys(chromedp.CSS("#message"), "review this"), chromedp.Click(chromedp.CSS("#send")))
	b.until("the session bound to reviewer", `document.querySelector('a[href="#/agents/reviewer"]') !== null`)
	b.shot("session-bound-to-agent")
}

// dropProxy forwards TCP to a target until told to drop every connection
// and refuse new ones, and to take them again: a network that goes away
// and comes back, between the browser and the dispatcher.
type dropProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; p.drop() })
	return p
}

func (p *dropProxy) serve(c net.Conn) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

// drop closes every connection and refuses new ones until restore.
func (p *dropProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *dropProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func TestConsole_a_dropped_connection_resumes_without_duplicate_lines(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [
	  {"text": "Before the drop: line one.", "tool_calls": [{"name": "shell", "input": {"command": "sleep 5"}}]},
	  {"text": "After the drop: line two."}
	]}`)
	proxy := startDropProxy(t, strings.TrimPrefix(d.url, "http://"))
	b := newBrowser(t, "http://"+proxy.ln.Addr().String())
	b.signIn(tk.user)
	b.openSession("net")
	b.do("send a line", chromedp.SendKeys(chromedp.CSS("#message"), "go"), chromedp.Click(chromedp.CSS("#send")))
	b.until("line one", `document.getElementById('live').innerText.includes('line one.')`)

	proxy.drop()
	b.until("the console to say it lost the stream", `document.querySelector('.conn.down') !== null`)
	// Line two is streamed while the browser cannot hear it.
	testutil.Eventually(t, devWait, "line two in the transcript", func() bool {
		var pg struct {
			Entries []json.RawMessage `json:"entries"`
		}
		apiCall(t, d, "GET", "/v1/sessions/net/transcript", tk.user, "", &pg)
		for _, e := range pg.Entries {
			if strings.Contains(string(e), "line two") {
				return true
			}
		}
		return false
	})
	b.shot("disconnected")
	if strings.Contains(b.transcript(), "line two") {
		t.Fatal("line two reached the page while the connection was down: the drop did not drop")
	}

	proxy.restore()
	b.until("line two after the reconnect", `document.getElementById('live').innerText.includes('line two.')`)
	b.until("the stream live again", `document.querySelector('.conn.live') !== null`)
	b.until("the run's end", `document.getElementById('live').innerText.includes('completed after')`)
	got := b.transcript()
	for _, line := range []string{"Before the drop: line one.", "After the drop: line two.", "run r-"} {
		want := 1
		if line == "run r-" {
			want = 2 // its start and its end
		}
		if n := strings.Count(got, line); n != want {
			t.Errorf("%q is shown %d times, want %d:\n%s", line, n, want, got)
		}
	}
	b.shot("reconnected")
}

func TestConsole_a_token_of_another_tenant_sees_none_of_it(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "The secret plan of tenant default."}]}`)
	if code := apiCall(t, d, "POST", "/v1/sessions/secret/input", tk.user, `{"text": "tell me the plan"}`, nil); code != http.StatusAccepted {
		t.Fatalf("input: %d", code)
	}
	if code := apiCall(t, d, "PUT", "/v1/agents/private-agent", tk.admin, `{"instructions": "only for default"}`, nil); code != http.StatusOK {
		t.Fatalf("PUT agent: %d", code)
	}
	testutil.Eventually(t, devWait, "the session of tenant default to answer", func() bool {
		var pg struct {
			Entries []json.RawMessage `json:"entries"`
		}
		apiCall(t, d, "GET", "/v1/sessions/secret/transcript", tk.user, "", &pg)
		for _, e := range pg.Entries {
			if strings.Contains(string(e), "secret plan") {
				return true
			}
		}
		return false
	})

	b := newBrowser(t, d.url)
	// The owner sees it: the check below is not blind.
	b.signIn(tk.user)
	b.until("the owner's session listed", `document.querySelector('a[href="#/session/secret"]') !== null`)
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))

	b.signIn(tk.other)
	b.until("an empty list", `document.querySelector('table[aria-label=Sessions] tbody').innerText.includes('No sessions yet')`)
	b.shot("other-tenant-sessions")
	b.openSession("secret")
	b.until("the session unknown to this tenant", `document.body.innerText.includes('No such session yet')`)
	if got := b.transcript(); strings.Contains(got, "secret plan") || strings.Contains(got, "tell me the plan") {
		t.Errorf("another tenant's token shows the session's transcript:\n%s", got)
	}
	b.shot("other-tenant-session")
	b.goTo("#/agents")
	b.until("the agents list", `document.querySelector('table[aria-label="Agent profiles"] tbody tr') !== null`)
	if got := eval[string](b, `document.querySelector('table[aria-label="Agent profiles"]').innerText`); strings.Contains(got, "private-agent") {
		t.Errorf("another tenant's token lists the agent private-agent:\n%s", got)
	}
	b.goTo("#/cluster")
	b.until("the cluster refused", `document.body.innerText.includes('needs an operator token')`)
	if hidden := eval[bool](b, `document.getElementById('nav-cluster').hidden`); !hidden {
		t.Error("a tenant's user is offered the cluster page")
	}
	b.shot("other-tenant-cluster")
}

func TestConsole_shows_operators_the_runners_partitions_and_jobs_workers(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "ok"}]}`)
	// A runner takes a partition with its first event: send one.
	if code := apiCall(t, d, "POST", "/v1/sessions/c1/input", tk.user, `{"text": "hello"}`, nil); code != http.StatusAccepted {
		t.Fatalf("input: %d", code)
	}
	held := bus.PartitionFor("default", "c1", 2)
	b := newBrowser(t, d.url)
	b.signIn(tk.operator)
	b.until("the cluster link", `!document.getElementById('nav-cluster').hidden`)
	b.do("open the cluster page", chromedp.Click(chromedp.CSS("#nav-cluster")))
	b.until("the runner holding the session's partition", fmt.Sprintf(
		`[...document.querySelectorAll('table[aria-label=Partitions] tbody tr')].some(r => r.cells[0].innerText === '%d' && r.cells[1].innerText === 'dev')`, held))
	b.until("the jobs worker", `document.querySelector('table[aria-label="Jobs workers"]')?.innerText.includes('dev')`)
	b.until("the work consumers", `document.querySelector('table[aria-label=Consumers]')?.innerText.includes('work-1')`)
	b.shot("cluster")
	b.shotNarrow("cluster")

	// An operator token of no tenant has no sessions: it signs in to the
	// cluster.
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.do("sign in as an operator of no tenant", chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), tk.operatorNoTenant), chromedp.Click(chromedp.CSS("form button[type=submit]")))
	b.until("the cluster page", `document.querySelector('table[aria-label=Runners]')?.innerText.includes('dev')`)
}

func TestConsole_pages_a_long_transcript_in_from_the_history_API(t *testing.T) {
	// Three runs of 45 tool turns each: some 280 entries, more than one
	// page of the history API (200 entries a page).
	var turns []string
	for i := 1; i <= 45; i++ {
		turns = append(turns, fmt.Sprintf(`{"text": "step %d", "tool_calls": [{"name": "glob", "input": {"pattern": "*%d*"}}]}`, i, i))
	}
	turns = append(turns, `{"text": "All steps done."}`)
	d, tk := startConsoleDev(t, `{"turns": [`+strings.Join(turns, ",")+`]}`)
	for run := 1; run <= 3; run++ {
		if code := apiCall(t, d, "POST", "/v1/sessions/long/input", tk.user, fmt.Sprintf(`{"text": "go %d"}`, run), nil); code != http.StatusAccepted {
			t.Fatalf("input %d: %d", run, code)
		}
		testutil.Eventually(t, devWait, fmt.Sprintf("run %d to end", run), func() bool {
			var s struct {
				State string `json:"state"`
				Runs  int    `json:"runs"`
			}
			apiCall(t, d, "GET", "/v1/sessions/long", tk.user, "", &s)
			return s.Runs == run && s.State == "idle"
		})
	}

	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("long")
	b.until("the third run's end in the history", `(document.getElementById('history')?.innerText.match(/All steps done\./g) || []).length === 3`)
	if n := eval[int](b, `document.querySelectorAll('#history details.tool').length`); n != 135 {
		t.Errorf("the history shows %d tool calls, want 135", n)
	}
	if n := eval[int](b, `document.querySelectorAll('#history details.tool.error').length`); n != 0 {
		t.Errorf("%d tool calls shown failed", n)
	}
	b.shot("long-history")
	b.mu.Lock()
	defer b.mu.Unlock()
	pages := 0
	for _, u := range b.urls {
		if strings.Contains(u, "/v1/sessions/long/transcript?after=") {
			pages++
		}
	}
	if pages < 2 {
		t.Errorf("the history came in %d request(s), want it paged in", pages)
	}
}

func TestConsole_cancels_a_layover_sets_the_recovery_policy_and_resumes(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [
	  {"text": "Waiting for CI.", "tool_calls": [{"name": "layover", "input": {"waiting_for": "CI to finish", "check_after": "2h"}}]},
	  {"text": "Back at it."}
	]}`)
	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("lay")
	b.do("send a line", chromedp.SendKeys(chromedp.CSS("#message"), "wait for CI"), chromedp.Click(chromedp.CSS("#send")))
	b.until("the layover", `document.getElementById('layovers')?.innerText.includes('Waiting for CI to finish')`)
	b.shot("layover")
	b.do("cancel it", chromedp.Click(chromedp.CSS("#cancel-layover")))
	b.until("the cancel reported", `document.getElementById('flash').textContent === 'Layover cancelled.'`)
	b.until("no layover shown", `document.getElementById('layovers').innerText.includes('None')`)
	var ls struct {
		Layovers []json.RawMessage `json:"layovers"`
	}
	apiCall(t, d, "GET", "/v1/sessions/lay/layovers", tk.user, "", &ls)
	if len(ls.Layovers) != 0 {
		t.Errorf("the API still lists %d layovers", len(ls.Layovers))
	}

	b.do("set manual, one attempt", chromedp.SetValue(chromedp.CSS("#rec-policy"), "manual"),
		chromedp.SendKeys(chromedp.CSS("#rec-max"), "1"), chromedp.Click(chromedp.CSS(`#recovery button[type=submit]`)))
	b.until("the policy in effect", `document.getElementById('recovery').innerText.includes('In effect: manual, at most 1 restart (set for this session)')`)
	var rec struct {
		Effective struct {
			Policy      string `json:"policy"`
			MaxAttempts int    `json:"max_attempts"`
		} `json:"effective"`
	}
	apiCall(t, d, "GET", "/v1/sessions/lay/recovery", tk.user, "", &rec)
	if rec.Effective.Policy != "manual" || rec.Effective.MaxAttempts != 1 {
		t.Errorf("the API says %+v after the console set manual, 1", rec.Effective)
	}
	b.shot("recovery-set")

	b.do("steer with nothing typed", chromedp.Click(chromedp.CSS("#steer")))
	b.until("the refusal in words", `document.getElementById('flash').textContent === 'Type something first.'`)
	b.do("resume", chromedp.SendKeys(chromedp.CSS("#resume-note"), "CI is green"), chromedp.Click(chromedp.CSS("#resume")))
	b.until("the resumed run's answer", `document.getElementById('live').innerText.includes('Back at it.')`)
	// A resume is the person's steer: the run it starts says so.
	b.until("the run's cause", `document.getElementById('live').innerText.includes('started (steered)')`)
	b.shot("resumed")
}

func TestConsole_a_page_opened_during_a_tool_call_draws_the_call_once_inside_its_run_and_done(t *testing.T) {
	// The shell call waits for a file the test creates once the page is
	// open: the call is under way while the page loads its history.
	d, tk := startConsoleDev(t, `{"turns": [
	  {"text": "Waiting for the signal.", "tool_calls": [{"name": "shell", "input": {"command": "while [ ! -e go ]; do sleep 0.05; done; echo got the signal"}}]},
	  {"text": "All done after the call."}
	]}`)
	if code := apiCall(t, d, "POST", "/v1/sessions/mid/input", tk.user, `{"text": "wait for it"}`, nil); code != http.StatusAccepted {
		t.Fatalf("input: %d", code)
	}
	testutil.Eventually(t, devWait, "the shell call to be under way", func() bool {
		var page struct {
			Entries []struct {
				Content []struct {
					Type string `json:"type"`
				} `json:"content"`
			} `json:"entries"`
		}
		apiCall(t, d, "GET", "/v1/sessions/mid/transcript", tk.user, "", &page)
		for _, e := range page.Entries {
			for _, c := range e.Content {
				if c.Type == "tool_use" {
					return true
				}
			}
		}
		return false
	})

	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("mid")
	b.until("the pending call in the run's frame", `document.querySelectorAll('section.run details.tool').length === 1`)
	// The call is recorded before the jobs worker makes the session's
	// workspace: the signal waits for the directory.
	workspace := filepath.Join(d.data, "jobs", "default", "mid")
	testutil.Eventually(t, devWait, "the session's workspace", func() bool {
		_, err := os.Stat(workspace)
		return err == nil
	})
	if err := os.WriteFile(filepath.Join(workspace, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.until("the run's end", `document.getElementById('transcript').innerText.includes('All done after the call.')`)
	b.until("the run's end line", `document.querySelector('section.run .run-end') !== null`)
	b.shot("tool-call-mid-run")
	if n := eval[int](b, `document.querySelectorAll('#transcript details.tool').length`); n != 1 {
		t.Errorf("the page shows %d tool rows, want 1:\n%s", n, b.transcript())
	}
	if n := eval[int](b, `document.querySelectorAll('section.run details.tool').length`); n != 1 {
		t.Errorf("%d tool rows inside the run's frame, want 1:\n%s", n, b.transcript())
	}
	if s := eval[string](b, `document.querySelector('#transcript details.tool summary')?.textContent || ''`); s != "tool shell — done" {
		t.Errorf("the tool row reads %q, want %q", s, "tool shell — done")
	}
	if n := eval[int](b, `[...document.querySelectorAll('#transcript .entry.text')].filter(e => e.textContent.includes('All done after the call.') && !e.closest('section.run')).length`); n != 0 {
		t.Errorf("the rest of the run is drawn outside its frame:\n%s", b.transcript())
	}
}

func TestConsole_signs_in_from_the_link_jetway_console_prints_once_and_shows_tenant_and_role(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "hello"}]}`)
	// jetway dev printed a link as it started, for its tenant token.
	// (startConsoleDev waited past it for the ready line, so it is read
	// from what the dev printed so far.)
	var devLink string
	d.p.mu.Lock()
	for _, l := range d.p.stdout {
		if rest, ok := strings.CutPrefix(l, "console: "); ok && devLink == "" {
			devLink = strings.TrimSpace(rest)
		}
	}
	d.p.mu.Unlock()
	if !strings.HasPrefix(devLink, d.url+"/#code=jwsi_") || strings.Contains(devLink, tk.user) {
		t.Fatalf("jetway dev printed console link %q, want %s/#code=jwsi_… without the token", devLink, d.url)
	}

	out, err := runCLI(t, "console", "--url", d.url, "--tokens-file", d.tokens, "--admin")
	if err != nil {
		t.Fatalf("jetway console: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	link := lines[0]
	code := strings.TrimPrefix(link, d.url+"/#code=")
	if code == link || !strings.HasPrefix(code, "jwsi_") || len(lines) < 2 ||
		!strings.Contains(lines[1], "tenant default, role admin") || strings.Contains(out, tk.admin) {
		t.Fatalf("jetway console printed:\n%s\nwant the link with a jwsi_ code, then whom it signs in as, and never the token", out)
	}

	b := newBrowser(t, d.url)
	b.do("open the printed link", chromedp.Navigate(link))
	b.until("the sessions page", `document.querySelector('table[aria-label=Sessions] tbody tr') !== null`)
	b.until("the header naming tenant and role", `document.getElementById('who').textContent === 'tenant default · admin'`)
	b.shot("signed-in-from-link")
	if href := eval[string](b, `location.href`); strings.Contains(href, "code=") || strings.Contains(href, code) {
		t.Errorf("the address bar still holds the code: %s", href)
	}
	if got := eval[string](b, `sessionStorage.getItem('jetway.token')`); got != tk.admin {
		t.Errorf("the tab keeps token %q, want the admin token the code was made with", got)
	}
	b.mu.Lock()
	urls := append([]string(nil), b.urls...)
	b.mu.Unlock()
	if len(urls) == 0 {
		t.Fatal("no request URLs recorded: the check below would be blind")
	}
	for _, u := range urls {
		if strings.Contains(u, tk.admin) || strings.Contains(u, code) {
			t.Errorf("a request went to %s, which holds the token or the code", u)
		}
	}

	// The same link again, after signing out: used, and said so.
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.do("open the link again", chromedp.Navigate(link))
	b.until("the refusal of a used code", `document.getElementById('token-error') !== null &&
		document.getElementById('token-error').textContent.includes('signs in once')`)
	b.shot("link-used-twice")
	if got := eval[string](b, `sessionStorage.getItem('jetway.token') || ''`); got != "" {
		t.Errorf("a refused link left token %q in the tab", got)
	}

	// jetway dev's own link signs in as its tenant token.
	b.do("open the dev's link", chromedp.Navigate(devLink))
	b.until("the header naming the user", `document.getElementById('who').textContent === 'tenant default · user'`)
	b.shot("signed-in-from-dev-link")
}
