package main

import (
	"net/http"

	"github.com/chromedp/chromedp"
	"regexp"
	"strings"
	"testing"
)

// TestThe_CLI_approves_a_held_shell_call_which_runs_once_in_the_jobs_worker
// runs `jetway dev` (real runner, dispatcher and jobs worker) with a
// scripted model whose shell call a tools.ask rule holds: `jetway
// approvals` shows it, `jetway approve` lets it run, a second approve is
// refused with the first decision, and the command's own count of its
// runs (a line appended to a workspace file) reaches the model as 1.
func TestThe_CLI_approves_a_held_shell_call_which_runs_once_in_the_jobs_worker(t *testing.T) {
	script := `{"turns": [
	  {"text": "Deploying.", "tool_calls": [{"name": "shell", "input": {"command": "echo deployed >> deploys.txt && echo runs: $(wc -l < deploys.txt)"}}]},
	  {"when": {"user_contains": "and it ran"}, "text": "Deployed, as approved."}
	]}`
	d, tk := startConsoleDev(t, script)
	if code := apiCall(t, d, "PUT", "/v1/agents/default", tk.admin, `{"tools": {"ask": ["shell(echo deployed*)"]}}`, nil); code != http.StatusOK {
		t.Fatalf("store the default profile: %d", code)
	}
	cf := []string{"--url", d.url, "--token", tk.user}
	if out, err := runCLI(t, append([]string{"send", "s", "deploy it"}, cf...)...); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	out := waitCLI(t, "the held call", func(s string) bool { return strings.Contains(s, "pending") && strings.Contains(s, "echo deployed") },
		append([]string{"approvals"}, cf...)...)
	id := regexp.MustCompile(`ap-[0-9a-f]+`).FindString(out)
	if id == "" {
		t.Fatalf("no approval id in:\n%s", out)
	}
	if out, err := runCLI(t, append([]string{"approve", "s", id}, cf...)...); err != nil || !strings.Contains(out, "approved") {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if out, err := runCLI(t, append([]string{"reject", "s", id, "too late"}, cf...)...); err == nil || !strings.Contains(err.Error(), "already decided") {
		t.Fatalf("a second decision: %v\n%s", err, out)
	}
	hist := waitCLI(t, "the approved call's result reaching the model", func(s string) bool { return strings.Contains(s, "Deployed, as approved.") },
		append([]string{"history", "s"}, cf...)...)
	if !strings.Contains(hist, "runs: 1") || strings.Contains(hist, "runs: 2") {
		t.Errorf("the command did not run exactly once:\n%s", hist)
	}
	if out, _ := runCLI(t, append([]string{"approvals"}, cf...)...); !strings.Contains(out, "nothing waits") {
		t.Errorf("approvals after the decision:\n%s", out)
	}
}

// TestThe_chat_shows_a_held_call_as_a_prompt_and_approves_it_in_place
// types into `jetway chat` on a terminal: the held call shows with the
// command that decides it, and /approve lets it run.
func TestThe_chat_shows_a_held_call_as_a_prompt_and_approves_it_in_place(t *testing.T) {
	script := `{"turns": [
	  {"text": "Deploying.", "tool_calls": [{"name": "shell", "input": {"command": "echo deployed >> deploys.txt && echo runs: $(wc -l < deploys.txt)"}}]},
	  {"when": {"user_contains": "and it ran"}, "text": "Deployed from the chat."}
	]}`
	d, tk := startConsoleDev(t, script)
	if code := apiCall(t, d, "PUT", "/v1/agents/default", tk.admin, `{"tools": {"ask": ["shell(echo deployed*)"]}}`, nil); code != http.StatusOK {
		t.Fatalf("store the default profile: %d", code)
	}
	c := startPtyChat(t, d, "c", "--token", tk.user)
	c.typeLine(t, "deploy it")
	screen := c.scr.until(t, "the prompt", func(s string) bool { return strings.Contains(s, "decide with: /approve ap-") })
	id := regexp.MustCompile(`/approve (ap-[0-9a-f]+)`).FindStringSubmatch(screen)[1]
	c.typeLine(t, "/approve "+id)
	screen = c.scr.until(t, "the approved call's result reaching the model", func(s string) bool { return strings.Contains(s, "Deployed from the chat.") })
	if !strings.Contains(screen, id+" approved") {
		t.Errorf("the chat did not say the decision was taken:\n%s", screen)
	}
	c.quit(t)
}

// TestThe_console_shows_a_held_call_on_the_session_page_and_approves_it
// drives the web console in headless Chromium: the session page shows a
// card for the held call, and its Approve button lets the call run.
func TestThe_console_shows_a_held_call_on_the_session_page_and_approves_it(t *testing.T) {
	d, tk := startConsoleDev(t, `{"turns": [
	  {"text": "Deploying.", "tool_calls": [{"name": "shell", "input": {"command": "echo deployed >> deploys.txt && echo runs: $(wc -l < deploys.txt)"}}]},
	  {"when": {"user_contains": "and it ran"}, "text": "Deployed from the console."}
	]}`)
	if code := apiCall(t, d, "PUT", "/v1/agents/default", tk.admin, `{"tools": {"ask": ["shell(echo deployed*)"]}}`, nil); code != http.StatusOK {
		t.Fatalf("store the default profile: %d", code)
	}
	b := newBrowser(t, d.url)
	b.signIn(tk.user)
	b.openSession("web")
	b.do("send a line", chromedp.SendKeys(chromedp.CSS("#message"), "deploy it"), chromedp.Click(chromedp.CSS("#send")))
	b.until("the approval card", `document.getElementById('waiting')?.innerText.includes('Waiting for your approval')`)
	b.shot("approval-card")
	b.goTo("#/")
	b.until("the sessions page's waiting list", `document.getElementById('waiting-list')?.innerText.includes('Waiting for you')`)
	b.until("the session shown waiting", `[...document.querySelectorAll('table[aria-label=Sessions] tr')].some((r) => r.innerText.includes('web') && r.innerText.includes('waiting'))`)
	b.shot("waiting-list")
	b.openSession("web")
	b.until("the approval card again", `document.getElementById('waiting')?.innerText.includes('Waiting for your approval')`)
	b.do("approve it", chromedp.Click(chromedp.CSS(`#waiting button.primary`)))
	b.until("the approved call's result reaching the model", `document.getElementById('transcript')?.innerText.includes('Deployed from the console.')`)
	b.until("no card left", `document.getElementById('waiting').innerText === ''`)
	if hist, err := runCLI(t, "history", "web", "--url", d.url, "--token", tk.user); err != nil || !strings.Contains(hist, "runs: 1") {
		t.Errorf("the command did not run once (%v):\n%s", err, hist)
	}
}
