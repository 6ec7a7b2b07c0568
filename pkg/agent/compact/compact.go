// Package compact keeps a conversation inside the model's context window
// without ever editing the recorded history. It implements agent.Compactor
// and agent.ContextView:
//
//   - View (every request): the pure llm.MessagesForAPI view, with old
//     large tool results cleared once the context is half full — nothing is
//     recorded for this, it is only how the request looks;
//   - Pre (before a request over the threshold) and Reactive (after the
//     provider refused a request as too long): fold the oldest part of the
//     history behind a boundary record and a summary, trying in turn a local
//     fold (a digest made without the model), a summary written by the model,
//     and dropping the oldest messages as the last resort.
//
// A compaction only appends: the boundary record says which earlier message
// the view starts from again, the summary stands for everything before it.
package compact

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"jetway/pkg/agent"
	"jetway/pkg/llm"
)

// Config tunes a Compactor. Fractions are of ContextWindow.
type Config struct {
	// ContextWindow is the model's context size in tokens (0 = 200000).
	ContextWindow int
	// Threshold is when Pre compacts (0 = 0.8).
	Threshold float64
	// Target is what a compaction aims the view under (0 = 0.5).
	Target float64
	// HardLimit is past which no request is sent: ReasonBlockingLimit
	// (0 = 0.95).
	HardLimit float64
	// Keep is how much of the newest history a compaction leaves as it is
	// (0 = 0.25); reactive attempts halve it each time.
	Keep float64
	// ClearAt is when View starts clearing old large tool results (0 = 0.5).
	ClearAt float64
	// ClearOver is the size in characters above which an old tool result is
	// cleared (0 = 2000); the newest KeepToolResults (0 = 3) never are.
	ClearOver       int
	KeepToolResults int
	// Summariser, when set, writes summaries (a non-streaming call with
	// Model); without it compaction folds and drops only.
	Summariser       llm.Provider
	Model            string
	SummaryMaxTokens int // 0 = 4096
	// Estimate sizes a request view in tokens (0 = llm.EstimateTokens).
	Estimate func([]llm.Message) int
	// Views, when set, builds the views of this history from what it added
	// since the last (llm.ViewCache): a runner keeps one per session, so a
	// run start costs what the session added, not a walk over all of it,
	// and the view Pre sizes is built again for the request for what was
	// added since (nothing). Without it every view is built in full.
	Views *llm.ViewCache
}

// Compactor implements agent.Compactor and agent.ContextView. It keeps
// nothing itself: the views it sizes and serves come from Config.Views,
// the one cache of a history's views.
type Compactor struct {
	cfg           Config
	plainEstimate bool // cfg.Estimate is llm.EstimateTokens, which Views computes as it goes
}

var (
	_ agent.Compactor   = (*Compactor)(nil)
	_ agent.ContextView = (*Compactor)(nil)
	_ agent.SettledView = (*Compactor)(nil)
)

// New returns a Compactor with cfg's zero fields defaulted.
func New(cfg Config) *Compactor {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	if cfg.ContextWindow <= 0 {
		cfg.ContextWindow = 200000
	}
	def(&cfg.Threshold, 0.8)
	def(&cfg.Target, 0.5)
	def(&cfg.HardLimit, 0.95)
	def(&cfg.Keep, 0.25)
	def(&cfg.ClearAt, 0.5)
	if cfg.ClearOver <= 0 {
		cfg.ClearOver = 2000
	}
	if cfg.KeepToolResults <= 0 {
		cfg.KeepToolResults = 3
	}
	if cfg.SummaryMaxTokens <= 0 {
		cfg.SummaryMaxTokens = 4096
	}
	plain := cfg.Estimate == nil
	if plain {
		cfg.Estimate = llm.EstimateTokens
	}
	return &Compactor{cfg: cfg, plainEstimate: plain}
}

func (c *Compactor) tokens(f float64) int { return int(f * float64(c.cfg.ContextWindow)) }

// ClearedToolResult is what View puts in place of an old large tool result.
const ClearedToolResult = "[old tool result cleared to save context (%d characters); run the tool again if you need it]"

// ClearedToolImages is what View puts in place of an old tool result's
// images: each costs about llm.ImageTokens, whatever its result's text.
const ClearedToolImages = "[%d old image(s) cleared to save context; run the tool again if you need to see them]"

// View is the request view: llm.MessagesForAPI, then, once the context is
// past ClearAt, the older large tool results and the older results' images
// replaced by a short note. It is pure: msgs is never modified.
func (c *Compactor) View(ctx context.Context, msgs []llm.Message) []llm.Message {
	view, _ := c.ViewSettled(ctx, msgs)
	return view
}

// ViewSettled implements agent.SettledView: View, and how many of its
// first messages are settled (llm.CompletionRequest.Settled), which only
// a view built through Views knows, and only while no old tool result is
// cleared (clearing changes older messages as the history grows).
func (c *Compactor) ViewSettled(_ context.Context, msgs []llm.Message) ([]llm.Message, int) {
	view, _, settled := c.build(msgs)
	return view, settled
}

// build is ViewSettled with the view's estimated size in tokens.
func (c *Compactor) build(msgs []llm.Message) (view []llm.Message, tokens, settled int) {
	view, tokens, settled = c.view(msgs)
	if tokens < c.tokens(c.cfg.ClearAt) {
		return view, tokens, settled
	}
	if c.cfg.Views != nil {
		view = slices.Clone(view) // the cache's view is read-only, and changed below
	}
	type pos struct{ m, b int }
	var results []pos
	for i, m := range view {
		for j, b := range m.Content {
			if b.Type == llm.BlockToolResult {
				results = append(results, pos{i, j})
			}
		}
	}
	copied := map[int]bool{}
	for _, p := range results[:max(0, len(results)-c.cfg.KeepToolResults)] {
		b := view[p.m].Content[p.b]
		large := len(b.Content) > c.cfg.ClearOver
		if !large && len(b.Images) == 0 {
			continue
		}
		if !copied[p.m] {
			view[p.m].Content = append([]llm.ContentBlock(nil), view[p.m].Content...)
			copied[p.m] = true
		}
		if large {
			b.Content = fmt.Sprintf(ClearedToolResult, len(b.Content))
		}
		if n := len(b.Images); n > 0 {
			if b.Content != "" {
				b.Content += "\n"
			}
			b.Content += fmt.Sprintf(ClearedToolImages, n)
			b.Images = nil
		}
		view[p.m].Content[p.b] = b
	}
	return view, c.cfg.Estimate(view), 0
}

// view is llm.MessagesForAPI(msgs), its size, and how much of it is
// settled, through Views when set.
func (c *Compactor) view(msgs []llm.Message) (view []llm.Message, tokens, settled int) {
	if c.cfg.Views == nil {
		view := llm.MessagesForAPI(msgs)
		return view, c.cfg.Estimate(view), 0
	}
	view, tokens, settled = c.cfg.Views.View(msgs)
	if !c.plainEstimate {
		tokens = c.cfg.Estimate(view)
	}
	return view, tokens, settled
}

// IsOverflow implements agent.Compactor.
func (c *Compactor) IsOverflow(err error) bool { return llm.IsOverflow(err) }

// Pre implements agent.Compactor: nothing under Threshold; over it, a
// compaction aiming under Target; agent.ErrBlockingLimit when the view
// would still be past HardLimit.
func (c *Compactor) Pre(ctx context.Context, msgs []llm.Message, lastInputTokens int) (*agent.Compaction, error) {
	_, tokens, _ := c.build(msgs)
	gate := max(tokens, lastInputTokens)
	if gate < c.tokens(c.cfg.Threshold) {
		return nil, nil
	}
	comp := c.compact(ctx, msgs, "proactive", c.tokens(c.cfg.Keep), c.tokens(c.cfg.Target), gate)
	post := gate
	if comp != nil {
		post = comp.Boundary.PostTokens
	}
	if post >= c.tokens(c.cfg.HardLimit) {
		return nil, fmt.Errorf("compact: %d tokens after compaction, hard limit %d: %w", post, c.tokens(c.cfg.HardLimit), agent.ErrBlockingLimit)
	}
	return comp, nil
}

// Reactive implements agent.Compactor. The provider said the request was
// too long whatever the estimate says, so it folds relative to the current
// size: it keeps at most half of it (halved again on each attempt) and must
// shrink the view by a quarter. Nil when nothing is left to fold.
func (c *Compactor) Reactive(ctx context.Context, msgs []llm.Message, attempt int) (*agent.Compaction, error) {
	pre := c.cfg.Estimate(c.View(ctx, msgs))
	keep := min(c.tokens(c.cfg.Keep), pre/2) >> min(max(attempt-1, 0), 30)
	return c.compact(ctx, msgs, "reactive", keep, min(c.tokens(c.cfg.Target), pre*3/4), pre), nil
}

// compact folds the oldest visible messages, leaving the newest keepTokens
// as they are, by the cheapest strategy that brings the view under target.
func (c *Compactor) compact(ctx context.Context, msgs []llm.Message, trigger string, keepTokens, target, pre int) *agent.Compaction {
	_, summary, keep := llm.VisibleRange(msgs)
	p := c.cut(msgs, keep, keepTokens)
	if p <= 0 {
		return nil
	}
	prev := ""
	if summary >= 0 {
		prev = msgs[summary].Text()
	}
	folded := func(p int) []llm.Message {
		out := make([]llm.Message, 0, p)
		for _, i := range keep[:p] {
			out = append(out, msgs[i])
		}
		return out
	}
	try := func(strategy, text string, p int) (*agent.Compaction, bool) {
		comp := &agent.Compaction{
			Boundary: llm.Boundary{
				BoundaryMeta: llm.BoundaryMeta{
					Trigger: trigger, Strategy: strategy, PreTokens: pre,
					MessagesFolded: p, LastFoldedID: msgs[keep[p-1]].ID,
				},
				KeepFrom: keep[p],
			},
			Summary: llm.Message{Role: llm.RoleUser, Kind: llm.KindCompactSummary, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}}},
		}
		after := append(append(msgs[:len(msgs):len(msgs)], llm.BoundaryMessage(comp.Boundary)), comp.Summary)
		comp.Boundary.PostTokens = c.cfg.Estimate(c.View(ctx, after))
		return comp, comp.Boundary.PostTokens <= target
	}

	if comp, ok := try("fold", FoldHeader+fold(prev, folded(p)), p); ok {
		return comp
	}
	if c.cfg.Summariser != nil {
		if s, err := c.summarise(ctx, prev, folded(p)); err == nil {
			if comp, ok := try("summarise", SummaryHeader+s, p); ok {
				return comp
			}
		}
	}
	// Last resort: drop the oldest, further and further, keeping at least
	// the newest message.
	var comp *agent.Compaction
	for q := p; q < len(keep); q = c.advance(msgs, keep, q) {
		var ok bool
		comp, ok = try("drop_oldest", fmt.Sprintf(DroppedNote, q), q)
		if ok {
			break
		}
	}
	return comp
}

// cut returns the position in keep of the first message kept: the newest
// messages that fit in budget tokens (at least one), moved back so the kept
// part never starts with the results of a folded call.
func (c *Compactor) cut(msgs []llm.Message, keep []int, budget int) int {
	if len(keep) < 2 {
		return 0
	}
	p, acc := len(keep)-1, c.cfg.Estimate([]llm.Message{msgs[keep[len(keep)-1]]})
	for p > 0 {
		t := c.cfg.Estimate([]llm.Message{msgs[keep[p-1]]})
		if acc+t > budget {
			break
		}
		acc += t
		p--
	}
	for p > 0 && hasResults(msgs[keep[p]]) {
		p--
	}
	return p
}

// advance moves a cut one message later, skipping over result turns.
func (c *Compactor) advance(msgs []llm.Message, keep []int, q int) int {
	q++
	for q < len(keep)-1 && hasResults(msgs[keep[q]]) {
		q++
	}
	return q
}

func hasResults(m llm.Message) bool {
	for _, b := range m.Content {
		if b.Type == llm.BlockToolResult {
			return true
		}
	}
	return false
}

// Texts of the summary records.
const (
	FoldHeader    = "[Earlier conversation, folded to save context: a digest of what was said and done]\n"
	SummaryHeader = "[Earlier conversation, summarised to save context]\n"
	DroppedNote   = "[The %d oldest messages of this conversation were dropped to fit the context window; their content is lost. Re-read files or ask the user if you need what they held.]"
	// SummaryPrompt asks the summariser for the working summary.
	SummaryPrompt = "Summarise the conversation above so you can continue the task without it: the user's requests and constraints, decisions made, what was done (files, commands, results, errors), what is in progress, and what remains. Be specific and complete. No preamble."
)

// fold is a digest of msgs made without the model: the previous summary,
// then each turn's text cut short, each call with its arguments and the
// first line of its result.
func fold(prev string, msgs []llm.Message) string {
	var b strings.Builder
	if prev != "" {
		b.WriteString(clip(prev, 4000))
		b.WriteString("\n")
	}
	for _, m := range msgs {
		for _, bl := range m.Content {
			switch bl.Type {
			case llm.BlockText:
				who := string(m.Role)
				if m.Kind == llm.KindNotice {
					who = "notice"
				}
				fmt.Fprintf(&b, "%s: %s\n", who, clip(bl.Text, 300))
			case llm.BlockToolUse:
				fmt.Fprintf(&b, "called %s(%s)\n", bl.Name, clip(string(bl.Input), 120))
			case llm.BlockToolResult:
				line, _, _ := strings.Cut(bl.Content, "\n")
				mark := ""
				if bl.IsError {
					mark = " [error]"
				}
				if n := len(bl.Images); n > 0 {
					mark += fmt.Sprintf(" [+%d image(s)]", n)
				}
				fmt.Fprintf(&b, "  → %s%s\n", clip(line, 120), mark)
			}
		}
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func (c *Compactor) summarise(ctx context.Context, prev string, folded []llm.Message) (string, error) {
	var hist []llm.Message
	if prev != "" {
		hist = append(hist, llm.UserText(prev))
	}
	hist = append(append(hist, folded...), llm.UserText(SummaryPrompt))
	view := llm.MessagesForAPI(hist)
	msg, _, _, err := c.cfg.Summariser.Complete(ctx, llm.CompletionRequest{
		Model:     c.cfg.Model,
		System:    []string{"You write the working summary of a conversation an agent is having, so it can go on without the full history."},
		Messages:  view,
		MaxTokens: c.cfg.SummaryMaxTokens,
	})
	if err != nil {
		return "", fmt.Errorf("compact: summarise: %w", err)
	}
	s := strings.TrimSpace(msg.Text())
	if s == "" {
		return "", errors.New("compact: summarise: empty summary")
	}
	return s, nil
}
