// Package llm is the model boundary: the provider-neutral message types the
// agent loop records and replays, and one Provider interface that the
// Anthropic, OpenAI-compatible and script providers implement.
//
// The types are the transcript's types too: what a runner records is exactly
// what a provider is later sent (through a pure per-request view), so they are
// plain JSON-friendly structs with no provider-specific fields.
//
// Images (Image) travel in user turns as image blocks and inside tool results.
// Each provider checks them against what its API accepts (ImagePolicy) before
// sending; a refusal, local or the API's, is an Error of kind ErrKindImage.
//
// # Caches
//
// Every request sends the whole visible history, so what is made of a
// history is kept: its view (ViewCache, one per session) and a provider's
// encodings of its turns and of its settled prefix (one cache per
// provider). Both find what they made by the identity of the messages it
// was made from, their Head, and one rule makes that safe: a recorded
// history is only ever appended to, so a message with the same Head is the
// same message. Whatever does not match (a history read back from its
// transcript, one a compaction or an image refusal changed the view of,
// another session's) misses and is made again; what nobody asks for again
// ages out with its cache's older half. A provider checks a turn found
// this way field by field before it sends it, and finds what has no such
// identity (tools, system blocks, a turn merged from several messages) by
// its whole content.
package llm

import (
	"context"
	"encoding/json"
	"iter"
)

// Role is who wrote a message. Tool results travel in user messages, as in
// the Anthropic API; the OpenAI provider reshapes them into tool-role
// messages in its request view.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// BlockType names the kind of a content block.
type BlockType string

const (
	BlockText       BlockType = "text"
	BlockThinking   BlockType = "thinking"
	BlockToolUse    BlockType = "tool_use"
	BlockToolResult BlockType = "tool_result"
	// BlockImage shows the model a picture (user turns only).
	BlockImage BlockType = "image"
)

// ContentBlock is one part of a message. Only the fields of its Type are set.
type ContentBlock struct {
	Type BlockType `json:"type"`
	// Text is the text of a text or thinking block.
	Text string `json:"text,omitempty"`
	// Signature is the provider's opaque signature of a thinking block; it
	// must be sent back unchanged.
	Signature string `json:"signature,omitempty"`
	// ID, Name and Input describe a tool_use block. Input is the complete
	// JSON object of arguments.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content, Images and IsError describe a tool_result block.
	// Images are pictures the tool returned, shown after its text.
	ToolUseID string  `json:"tool_use_id,omitempty"`
	Content   string  `json:"content,omitempty"`
	Images    []Image `json:"images,omitempty"`
	IsError   bool    `json:"is_error,omitempty"`
	// Image is the picture of an image block.
	Image *Image `json:"image,omitempty"`
}

// MessageKind marks messages the host or the loop made, so views and
// compaction can treat them specially. The zero value is an ordinary message.
type MessageKind string

const (
	KindOrdinary MessageKind = ""
	// KindNotice is a user turn appended by the notice guide before a model
	// call: background job notices, events that arrived while busy.
	KindNotice MessageKind = "notice"
	// KindCompactBoundary marks where a compaction folded the history; the
	// request view starts at the last one.
	KindCompactBoundary MessageKind = "compact_boundary"
	// KindCompactSummary carries the summary that replaces what came before
	// its boundary in the request view.
	KindCompactSummary MessageKind = "compact_summary"
	// KindReminder is a system reminder (todos, settlement, continuation)
	// injected by the loop as a user turn.
	KindReminder MessageKind = "reminder"
	// KindImageRefused records that a provider refused an image (see
	// ImageRefusal): the request view shows the images recorded before it
	// as notes, so the session can go on.
	KindImageRefused MessageKind = "image_refused"
)

// Message is one turn of the conversation, as recorded and replayed.
type Message struct {
	// ID is a stable identity for the message, assigned at birth.
	ID      string         `json:"id,omitempty"`
	Role    Role           `json:"role"`
	Content []ContentBlock `json:"content"`
	Kind    MessageKind    `json:"kind,omitempty"`
	// Delivers lists the host-side ids (CloudEvent ids) of the events this
	// turn handed to the model. It is never sent to a provider; a host uses it
	// to ack exactly the events whose turn is recorded.
	Delivers []string `json:"delivers,omitempty"`
}

// Text returns the concatenated text blocks of the message.
func (m Message) Text() string {
	var s string
	for _, b := range m.Content {
		if b.Type == BlockText {
			s += b.Text
		}
	}
	return s
}

// ToolUses returns the tool_use blocks of the message in order.
func (m Message) ToolUses() []ContentBlock {
	var out []ContentBlock
	for _, b := range m.Content {
		if b.Type == BlockToolUse {
			out = append(out, b)
		}
	}
	return out
}

// Head identifies a recorded message to a cache (see "Caches" above):
// where its blocks are, how many, and its role. It is the same for as long
// as the message is, and another message never has it.
type Head struct {
	block *ContentBlock
	n     int
	role  Role
}

// HeadOf is m's Head.
func HeadOf(m *Message) Head {
	h := Head{n: len(m.Content), role: m.Role}
	if len(m.Content) > 0 {
		h.block = &m.Content[0]
	}
	return h
}

// UserText is a user message holding one text block.
func UserText(text string) Message {
	return Message{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: text}}}
}

// Usage is token accounting as the providers report it.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:              u.InputTokens + o.InputTokens,
		OutputTokens:             u.OutputTokens + o.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens + o.CacheCreationInputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens + o.CacheReadInputTokens,
	}
}

// ContextTokens is the size of the prompt the provider saw: input plus cache.
func (u Usage) ContextTokens() int {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// ToolSpec is a tool offered to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// CompletionRequest is one model call.
type CompletionRequest struct {
	Model string
	// System is the system prompt in blocks. Blocks before DynamicBoundary are
	// stable across calls and are where a provider puts its cache breakpoint;
	// blocks from DynamicBoundary on change per call.
	System          []string
	DynamicBoundary int
	Messages        []Message
	Tools           []ToolSpec
	MaxTokens       int
	Temperature     *float64
	// ThinkingBudget enables extended thinking where the provider has it
	// (0 = off).
	ThinkingBudget int
	// Settled is the caller's promise that the first Settled messages will
	// never change: their blocks are not written to again, and every later
	// request of this history begins with them. A provider may then keep
	// what it made of them and take it back by their identity (their
	// blocks' address and count) instead of reading them again. 0 promises
	// nothing. A ViewCache knows how many of its view's messages are
	// settled; a caller that builds views another way leaves it 0.
	Settled int
}

// StopReason is why the model ended its message.
type StopReason string

const (
	StopEndTurn   StopReason = "end_turn"
	StopToolUse   StopReason = "tool_use"
	StopMaxTokens StopReason = "max_tokens"
	StopSequence  StopReason = "stop_sequence"
)

// StreamEventType names what a StreamEvent carries.
type StreamEventType string

const (
	// EventTextDelta and EventThinkingDelta carry Text.
	EventTextDelta     StreamEventType = "text_delta"
	EventThinkingDelta StreamEventType = "thinking_delta"
	// EventToolUse carries a complete tool_use Block as soon as its input
	// has fully arrived, so an executor can start it while the stream goes on.
	EventToolUse StreamEventType = "tool_use"
	// EventMessageEnd is the last event of a successful stream: the assembled
	// Message, its StopReason and the call's Usage.
	EventMessageEnd StreamEventType = "message_end"
)

// StreamEvent is one item of a streamed completion.
type StreamEvent struct {
	Type       StreamEventType
	Text       string
	Block      *ContentBlock
	Message    *Message
	StopReason StopReason
	Usage      *Usage
}

// Provider is a model behind one interface.
type Provider interface {
	// Name says which model answers, as shown wherever a run shows its model
	// (e.g. "anthropic claude-sonnet-4-5", "script demo.json (deterministic,
	// no model)").
	Name() string
	// Stream performs one streaming call. The sequence ends with an
	// EventMessageEnd or an error.
	Stream(ctx context.Context, req CompletionRequest) iter.Seq2[StreamEvent, error]
	// Complete performs one non-streaming call.
	Complete(ctx context.Context, req CompletionRequest) (Message, StopReason, Usage, error)
}

// BoundaryMeta describes a compaction boundary for a Recorder.
type BoundaryMeta struct {
	// Trigger is "proactive" or "reactive".
	Trigger string `json:"trigger"`
	// Strategy is what folded the history: "clear_tool_results", "fold",
	// "summarise" or "drop_oldest".
	Strategy string `json:"strategy"`
	// PreTokens is the estimated context size before compaction.
	PreTokens int `json:"pre_tokens"`
	// PostTokens is the estimated context size after compaction.
	PostTokens int `json:"post_tokens"`
	// MessagesFolded counts the messages the boundary hides from the view.
	MessagesFolded int `json:"messages_folded"`
	// LastFoldedID is the ID of the last message the boundary hides.
	LastFoldedID string `json:"last_folded_id,omitempty"`
}
