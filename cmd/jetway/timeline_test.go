package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"jetway/internal/testutil"
)

// The session page's timeline (docs/CONSOLE.md#timeline): a run's model
// calls, tool calls, jobs and sub-agents as bars on a time axis, drawn in
// one SVG from the transcript, the jobs and the detail the page reads.

// timelineScript makes one run that calls a shell command, starts a
// background job and a sub-agent, and a second run for the job's end. The
// delays give the model calls a width a person can see.
const timelineScript = `{"turns": [
  {"when": {"user_contains": "sub-task for the timeline"}, "delay": "400ms", "text": "Sub-task done."},
  {"delay": "250ms", "text": "Looking around.", "tool_calls": [{"name": "shell", "input": {"command": "sleep 0.4; echo looked"}}]},
  {"delay": "150ms", "text": "Starting a job.", "tool_calls": [{"name": "shell", "input": {"command": "sleep 1.5; echo job done", "background": true}}]},
  {"delay": "200ms", "text": "Delegating.", "tool_calls": [{"name": "agent_start", "input": {"prompt": "sub-task for the timeline", "wait": 30}}]},
  {"delay": "200ms", "text": "All done; the job goes on."},
  {"when": {"notice_contains": "[background job notice]"}, "delay": "150ms", "text": "Job report: {{notice}}"}
]}`

// durationRE is a duration as the timeline writes one: 340 ms, 2.4s, 1m05s.
var durationRE = regexp.MustCompile(`\d+( ms|\.\ds|s|m\d\ds)`)

func TestConsole_draws_a_runs_timeline_of_its_model_calls_tool_call_job_and_sub_agent(t *testing.T) {
	d, tk := startConsoleDev(t, timelineScript)
	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("tl")
	b.until("the empty timeline", `document.getElementById('tl-pic')?.innerText.includes('No runs yet.')`)
	b.do("send a line", chromedp.SendKeys(chromedp.CSS("#message"), "go"), chromedp.Click(chromedp.CSS("#send")))

	// Drawn live: the stream says what happened, the transcript when. The
	// first shell call is job 1 of the jobs worker, but a foreground one:
	// its bar is the tool call's, and only job 2 has a row.
	bars := `#timeline rect.tl-bar`
	b.until("the run, its tool calls, the job and the sub-agent on the timeline", fmt.Sprintf(`(() => {
		const q = (s) => document.querySelectorAll(%q + s);
		return q('[data-kind=run]').length === 2 && q('[data-kind=tool][data-name~=shell]').length > 0 &&
			q('[data-kind=tool][data-name~=agent_start]').length > 0 && q('[data-kind=job][data-job="2"]').length === 1 && q('[data-kind=job]').length === 1 &&
			q('[data-kind=agent]').length === 1 && !document.querySelector('#timeline .tl-open');
	})()`, bars))
	b.until("the job report's run to end", `document.getElementById('transcript').innerText.includes('Job report:')`)
	check := func(when string) {
		t.Helper()
		models := eval[int](b, fmt.Sprintf(`[...document.querySelectorAll(%q)].reduce((n, r) => n + Number(r.dataset.count), 0)`, bars+"[data-kind=model]"))
		if models != 5 {
			t.Errorf("%s: the timeline counts %d model calls, want 5 (four in the first run, one in the second)", when, models)
		}
		tips := eval[map[string]string](b, fmt.Sprintf(`Object.fromEntries(['run', 'model', 'tool', 'job', 'agent'].map((k) =>
			[k, document.querySelector(%q + '[data-kind=' + k + '] title')?.textContent || '']))`, bars))
		for kind, want := range map[string]string{"run": "completed after ", "model": "model call", "tool": "tool shell · ", "job": "job 2 · sleep 1.5; echo job done · exited (exit 0) · ", "agent": "sub-agent 1 (default) · session tl-a1 · idle"} {
			if tip := tips[kind]; !strings.Contains(tip, want) || !durationRE.MatchString(tip) {
				t.Errorf("%s: the first %s bar's title is %q, want it to hold %q and a duration", when, kind, tip, want)
			}
		}
		// The sub-agent's bar lasts as long as it worked: at least its
		// scripted 400 ms, not the instant of its start.
		if ms := tipMS(tips["agent"]); ms < 400 {
			t.Errorf("%s: the sub-agent's bar says %q, want at least the 400 ms it worked", when, tips["agent"])
		}
		if !strings.Contains(tips["run"], "tokens in") || !strings.Contains(tips["model"], "tokens in") {
			t.Errorf("%s: the run's and model call's titles do not count tokens: %q, %q", when, tips["run"], tips["model"])
		}
		// Each bar lies on the axis in time order: the sub-agent starts after
		// the job, which starts after the first shell call.
		xs := eval[map[string]float64](b, fmt.Sprintf(`Object.fromEntries(['tool', 'job', 'agent'].map((k) =>
			[k, Number(document.querySelector(%q + '[data-kind=' + k + ']').getAttribute('x'))]))`, bars))
		if !(xs["tool"] < xs["job"] && xs["job"] < xs["agent"]) {
			t.Errorf("%s: bars out of time order: first tool call at x=%v, job at %v, sub-agent at %v", when, xs["tool"], xs["job"], xs["agent"])
		}
	}
	check("drawn live")

	// Pointing at a bar says the same beside the picture (a phone has no
	// hover: a tap does it too).
	b.do("point at the job", chromedp.Click(chromedp.CSS(bars+`[data-kind=job]`)))
	if s := eval[string](b, `document.getElementById('tl-detail').textContent`); !strings.HasPrefix(s, "job 2 · ") || !durationRE.MatchString(s) {
		t.Errorf("pointing at the job shows %q, want its line with a duration", s)
	}
	b.shot("timeline")
	b.docShots("console-timeline")

	// Opened afresh, the same picture comes from the history.
	b.goTo("#/sessions")
	b.openSession("tl")
	b.until("the timeline from the history", fmt.Sprintf(`document.querySelectorAll(%q).length === 2 && document.querySelectorAll(%q).length === 1`,
		bars+"[data-kind=run]", bars+"[data-kind=agent]"))
	check("from the history")
	if u := b.unlabelled(); len(u) != 0 {
		t.Errorf("the session page has controls without a label: %v", u)
	}
}

// tipMS reads the duration that ends a bar's title, in milliseconds; -1
// when it ends in none.
func tipMS(tip string) float64 {
	m := regexp.MustCompile(`· (\d+) ms$|· (\d+\.\d)s$`).FindStringSubmatch(tip)
	switch {
	case m == nil:
		return -1
	case m[1] != "":
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	default:
		v, _ := strconv.ParseFloat(m[2], 64)
		return v * 1000
	}
}

// docShots saves full-page screenshots at 1280 and 390 px; with
// JETWAY_DOC_IMAGES=1 also as docs/images/<name>-1280.png and -390.png,
// the pictures docs/CONSOLE.md shows.
func (b *browser) docShots(name string) {
	b.t.Helper()
	for _, w := range []int64{1280, 390} {
		b.do("viewport", chromedp.EmulateViewport(w, 900))
		b.until("the timeline drawn at the width", `Math.abs(document.querySelector('#timeline svg')?.getAttribute('width') - Math.max(document.getElementById('tl-pic').clientWidth, 300)) < 1`)
		ctx, cancel := context.WithTimeout(b.ctx, browserWait)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			b.t.Fatalf("screenshot at %d px: %v", w, err)
		}
		file := fmt.Sprintf("%s-%d.png", name, w)
		dirs := []string{b.shots}
		if os.Getenv("JETWAY_DOC_IMAGES") == "1" {
			dirs = append(dirs, filepath.Join("..", "..", "docs", "images"))
		}
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, file), png, 0o644); err != nil {
				b.t.Fatal(err)
			}
		}
	}
	b.do("wide viewport", chromedp.EmulateViewport(1280, 900))
}

func TestConsole_draws_a_2000_turn_sessions_timeline_with_a_bounded_number_of_nodes(t *testing.T) {
	// 40 runs of 50 model calls each (49 of them call a tool): 2000 turns,
	// some 4000 transcript entries, more than the history's first load.
	const runs, turns = 40, 50
	var ts []string
	for i := 1; i < turns; i++ {
		ts = append(ts, fmt.Sprintf(`{"text": "step %d", "tool_calls": [{"name": "glob", "input": {"pattern": "*%d*"}}]}`, i, i))
	}
	ts = append(ts, `{"text": "All steps done."}`)
	d, tk := startConsoleDev(t, `{"turns": [`+strings.Join(ts, ",")+`]}`)
	// Each input is sent once the run before it has ended, as its
	// run.ended on the session's stream says: one connection, no polling.
	ctx, cancel := context.WithTimeout(context.Background(), 4*devWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/sessions/long/stream?from=new", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tk.user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for run := 1; run <= runs; run++ {
		if code := apiCall(t, d, "POST", "/v1/sessions/long/input", tk.user, fmt.Sprintf(`{"text": "go %d"}`, run), nil); code != http.StatusAccepted {
			t.Fatalf("input %d: %d", run, code)
		}
		for lines.Scan() && lines.Text() != "event: io.jetway.run.ended" {
		}
		if err := lines.Err(); err != nil || ctx.Err() != nil {
			t.Fatalf("waiting for run %d to end: %v %v", run, err, ctx.Err())
		}
	}
	var s struct {
		State string `json:"state"`
		Runs  int    `json:"runs"`
	}
	testutil.Eventually(t, devWait, "the session idle after its runs", func() bool {
		apiCall(t, d, "GET", "/v1/sessions/long", tk.user, "", &s)
		return s.State == "idle"
	})
	if s.Runs != runs {
		t.Fatalf("the session had %d runs, want %d", s.Runs, runs)
	}

	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("long")
	// A generous deadline (browserWait), and no time asserted: the page
	// must get there, with the last five runs' 250 model calls counted.
	model := `[...document.querySelectorAll('#timeline rect[data-kind=model]')].reduce((n, r) => n + Number(r.dataset.count), 0)`
	b.until("the last runs' timeline", fmt.Sprintf(`document.getElementById('tl-range')?.textContent.startsWith('runs 36–40 of 40') && %s === %d`, model, 5*turns))
	b.shot("timeline-2000-turns")
	nodes := eval[int](b, `document.querySelectorAll('#timeline *').length`)
	t.Logf("the timeline of the last 5 runs (%d model calls) has %d nodes", 5*turns, nodes)
	if nodes > 1000 {
		t.Errorf("the timeline of %d model calls has %d nodes, want at most 1000", 5*turns, nodes)
	}
	if bars := eval[int](b, `document.querySelectorAll('#timeline rect[data-kind=model]').length`); bars >= 5*turns {
		t.Errorf("%d model call bars for %d calls: close ones were not merged", bars, 5*turns)
	}
	tip := eval[string](b, `[...document.querySelectorAll('#timeline rect[data-kind=model]')].find((r) => r.dataset.count > 1)?.querySelector('title').textContent || ''`)
	if !regexp.MustCompile(`^\d+ model calls · `).MatchString(tip) || !durationRE.MatchString(tip) {
		t.Errorf("a merged bar's title is %q, want the calls it counts and their duration", tip)
	}

	b.do("go back a window", chromedp.Click(chromedp.CSS("#tl-earlier")))
	b.until("the runs before", fmt.Sprintf(`document.getElementById('tl-range').textContent.startsWith('runs 31–35 of 40') && %s === %d`, model, 5*turns))
	if n := eval[int](b, `document.querySelectorAll('#timeline *').length`); n > 1000 {
		t.Errorf("an earlier window has %d nodes, want at most 1000", n)
	}
}

// A run of a few milliseconds still gets an axis a person can read: its
// ticks are a fraction of a millisecond apart, and each says which.
func TestConsole_timeline_of_a_run_of_milliseconds_labels_each_tick_apart(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [{"text": "quick"}]}`)
	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("ms")
	b.do("send a line", chromedp.SendKeys(chromedp.CSS("#message"), "hi"), chromedp.Click(chromedp.CSS("#send")))
	b.until("the run on the timeline", `document.querySelectorAll('#timeline rect.tl-bar[data-kind=run]').length === 1 && !document.querySelector('#timeline .tl-open')`)
	labels := eval[[]string](b, `[...document.querySelectorAll('#timeline .tl-tick')].map((e) => e.textContent)`)
	seen := map[string]bool{}
	for _, l := range labels {
		if seen[l] {
			t.Fatalf("the axis labels %q twice: %q", l, labels)
		}
		seen[l] = true
	}
	if len(labels) < 2 {
		t.Fatalf("the axis has %d labels, want its start and end at least: %q", len(labels), labels)
	}
}
