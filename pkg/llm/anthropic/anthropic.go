// Package anthropic is the llm.Provider for Anthropic's Messages API, over
// the official SDK (github.com/anthropics/anthropic-sdk-go/v2).
//
// It streams with the SDK's decoder and accumulator, emitting each tool call
// the moment its block stops so an executor can start it while the stream
// goes on; it places prompt-cache breakpoints; it encodes the turns llm
// shapes for every provider (llm.Wire), never touching the caller's
// messages; and it retries through package retry, the only retry policy
// (the SDK's own retries are off).
//
// A max_tokens stop is not an error: the assembled message is returned with
// llm.StopMaxTokens and the loop decides whether to escalate or continue.
//
// Images go as `image` blocks (a base64 or url source) in user turns and
// inside `tool_result` content after the result's text. Each is checked
// against ImagePolicy before the request is sent, and the API's own 400s
// about an image are classified llm.ErrKindImage, like the local refusal.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"jetway/pkg/llm"
	"jetway/pkg/llm/internal/wirecache"
	"jetway/pkg/llm/retry"
)

// DefaultMaxTokens is the output cap of a request that sets none.
const DefaultMaxTokens = 8192

// Config configures a Provider.
type Config struct {
	// APIKey is sent as x-api-key. Required.
	APIKey string
	// BaseURL is the API's base URL without /v1; empty means Anthropic's.
	BaseURL string
	// Model answers requests that name none. Required unless every request
	// names its model.
	Model string
	// MaxTokens is the output cap of requests that set none
	// (DefaultMaxTokens if 0).
	MaxTokens int
	// Retry is the retry policy; its MaxRetries is the provider's "max
	// retries" (0 = retry.DefaultMaxRetries, negative = none).
	Retry retry.Policy
	// AdaptiveThinking asks for adaptive thinking (the model decides how
	// much) instead of a token budget when a request enables thinking, as
	// the newest models prefer.
	AdaptiveThinking bool
	// DisableCache leaves out the prompt-cache breakpoints.
	DisableCache bool
	// HTTPClient, if set, carries the requests (proxies, tracing).
	HTTPClient *http.Client
}

// Provider is an llm.Provider for the Anthropic Messages API.
type Provider struct {
	cfg    Config
	client sdk.Client
	enc    *encodings
}

var _ llm.Provider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("anthropic: config: API key is required")
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	opts := []option.RequestOption{
		// The environment is read once, by whoever builds the Config.
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(cfg.APIKey),
		// One retry policy: ours.
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Provider{cfg: cfg, client: sdk.NewClient(opts...), enc: newEncodings(wirecache.Limit)}, nil
}

// Name is "anthropic <model>".
func (p *Provider) Name() string { return "anthropic " + p.cfg.Model }

// Stream performs one streaming call. Text and thinking arrive as deltas,
// each tool call as one EventToolUse when its block is complete, and the
// stream ends with EventMessageEnd or an error. A failure before anything
// was yielded is retried; after that it is returned, since a retry would
// repeat what the caller has already seen.
func (p *Provider) Stream(ctx context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		_, opts, err := p.params(req, true)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		send := func(ev llm.StreamEvent) bool { return yield(ev, nil) }
		err = retry.Stream(ctx, p.cfg.Retry, verdict, send, func(ctx context.Context, emit func(llm.StreamEvent), stopped func() bool) error {
			return p.streamOnce(ctx, opts, emit, stopped)
		})
		if err != nil {
			yield(llm.StreamEvent{}, classifyErr(ctx, err))
		}
	}
}

var errIncomplete = errors.New("stream ended before message_stop")

// newStreaming opens a stream as Messages.NewStreaming does, through the
// same client (its auth, headers, retries and decoder), without setting
// "stream": true on the finished body: sjson makes that edit on a copy of
// the whole body, a whole history every call, and the body made here
// already opens with the field (see body). The body is the one opts carry
// (option.WithRequestBody); the client is given no params to encode, as it
// would encode them only for that option to replace them.
func (p *Provider) newStreaming(ctx context.Context, opts []option.RequestOption) *ssestream.Stream[sdk.MessageStreamEventUnion] {
	var raw *http.Response
	err := p.client.Post(ctx, "v1/messages", nil, &raw, opts...)
	return ssestream.NewStream[sdk.MessageStreamEventUnion](ssestream.NewDecoder(raw), err)
}

func (p *Provider) streamOnce(ctx context.Context, opts []option.RequestOption, emit func(llm.StreamEvent), stopped func() bool) error {
	stream := p.newStreaming(ctx, opts)
	// Closing only ends the response: what was read is the answer, and a
	// stream stopped early is one nobody reads any more.
	defer func() { _ = stream.Close() }()
	var acc sdk.Message
	done := false
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			return fmt.Errorf("accumulate stream event %s: %w", ev.Type, err)
		}
		switch ev.Type {
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				if ev.Delta.Text != "" {
					emit(llm.StreamEvent{Type: llm.EventTextDelta, Text: ev.Delta.Text})
				}
			case "thinking_delta":
				if ev.Delta.Thinking != "" {
					emit(llm.StreamEvent{Type: llm.EventThinkingDelta, Text: ev.Delta.Thinking})
				}
			}
		case "content_block_stop":
			if b := acc.Content[ev.Index]; b.Type == "tool_use" {
				blk := toolUse(b)
				emit(llm.StreamEvent{Type: llm.EventToolUse, Block: &blk})
			}
		case "message_stop":
			done = true
		}
		if stopped() {
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if !done {
		return errIncomplete
	}
	msg, stop, usage := fromSDK(&acc)
	emit(llm.StreamEvent{Type: llm.EventMessageEnd, Message: &msg, StopReason: stop, Usage: &usage})
	return nil
}

// Complete performs one non-streaming call. A request the SDK deems too
// long for one HTTP response (a large max_tokens: it refuses those, as
// networks drop idle connections) is streamed and collected instead, so
// the loop can escalate the output cap in non-streaming mode too.
func (p *Provider) Complete(ctx context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	params, opts, err := p.params(req, false)
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, err
	}
	if _, err := sdk.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, nil); err != nil {
		return collect(p.Stream(ctx, req))
	}
	var res *sdk.Message
	err = p.cfg.Retry.Do(ctx, verdict, func(ctx context.Context) error {
		var err error
		res, err = p.client.Messages.New(ctx, params, opts...)
		return err
	})
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, classifyErr(ctx, err)
	}
	msg, stop, usage := fromSDK(res)
	return msg, stop, usage, nil
}

// collect drains a stream into its final message.
func collect(seq iter.Seq2[llm.StreamEvent, error]) (llm.Message, llm.StopReason, llm.Usage, error) {
	for ev, err := range seq {
		if err != nil {
			return llm.Message{}, "", llm.Usage{}, err
		}
		if ev.Type == llm.EventMessageEnd {
			return *ev.Message, ev.StopReason, *ev.Usage, nil
		}
	}
	return llm.Message{}, "", llm.Usage{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "anthropic", Err: errIncomplete}
}

func toolUse(b sdk.ContentBlockUnion) llm.ContentBlock {
	input := json.RawMessage(b.Input)
	if len(input) == 0 || !json.Valid(input) {
		input = json.RawMessage("{}")
	}
	return llm.ContentBlock{Type: llm.BlockToolUse, ID: b.ID, Name: b.Name, Input: append(json.RawMessage(nil), input...)}
}

// RedactedPrefix marks a redacted thinking block: llm has one thinking
// block type, so a redacted one travels as a thinking block with no text
// whose opaque signature is this prefix and the encrypted data. It must go
// back to the API unchanged, or a thinking tool-use turn is refused.
const RedactedPrefix = "redacted_thinking:"

// fromSDK converts an API message. Block types the loop has no use for
// (server tools) are left out.
func fromSDK(m *sdk.Message) (llm.Message, llm.StopReason, llm.Usage) {
	msg := llm.Message{Role: llm.RoleAssistant}
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockText, Text: b.Text})
		case "thinking":
			msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockThinking, Text: b.Thinking, Signature: b.Signature})
		case "redacted_thinking":
			msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockThinking, Signature: RedactedPrefix + b.Data})
		case "tool_use":
			msg.Content = append(msg.Content, toolUse(b))
		}
	}
	usage := llm.Usage{
		InputTokens:              int(m.Usage.InputTokens),
		OutputTokens:             int(m.Usage.OutputTokens),
		CacheCreationInputTokens: int(m.Usage.CacheCreationInputTokens),
		CacheReadInputTokens:     int(m.Usage.CacheReadInputTokens),
	}
	return msg, llm.StopReason(m.StopReason), usage
}

// verdict says whether a failed attempt is worth another: rate limits,
// overload (also when it arrives as an in-stream error event), server
// errors and broken connections are.
func verdict(err error) retry.Verdict {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		h := retry.Header(apiErr.Response)
		switch apiErr.Type() {
		case "overloaded_error", "rate_limit_error", "api_error":
			after, _ := retry.RetryAfter(h, time.Now())
			return retry.Verdict{Retry: true, After: after}
		}
		return retry.HTTP(apiErr.StatusCode, h)
	}
	return retry.Network(err)
}

// classifyErr turns a final failure into what the loop acts on: the
// context's own error when the call was cancelled, an overflow when the
// prompt did not fit, an image error when an image was refused, a model
// error otherwise.
func classifyErr(ctx context.Context, err error) error {
	if cerr, ok := llm.Cancelled(ctx, "anthropic", err); ok {
		return cerr
	}
	e := &llm.Error{Kind: llm.ErrKindModel, Provider: "anthropic", Err: err}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		if apiErr.StatusCode >= 400 {
			e.StatusCode = apiErr.StatusCode
		}
		switch {
		case isOverflow(apiErr):
			e.Kind = llm.ErrKindOverflow
		case isImageRefusal(apiErr):
			e.Kind = llm.ErrKindImage
		}
	}
	return e
}

// isOverflow recognises the API's "prompt is too long" refusal, and a 413
// (the request body itself too large), which compaction also cures.
func isOverflow(e *sdk.Error) bool {
	if e.StatusCode == http.StatusRequestEntityTooLarge {
		return true
	}
	if e.StatusCode != http.StatusBadRequest {
		return false
	}
	text := strings.ToLower(e.Message + " " + e.RawJSON())
	return strings.Contains(text, "prompt is too long")
}

// isImageRefusal recognises the API's 400s about an image: "Could not
// process image", "…image.source.base64: image exceeds 5 MB maximum",
// "…image.source.base64.media_type: Input should be 'image/jpeg', …", "At
// least one of the image dimensions exceed max allowed size", "Image does
// not match the provided media type". Every one names the image, and
// retrying the same request cannot cure any.
func isImageRefusal(e *sdk.Error) bool {
	if e.StatusCode != http.StatusBadRequest {
		return false
	}
	if strings.HasPrefix(string(e.ErrorCode()), "image_") { // image_dimensions_too_large
		return true
	}
	return strings.Contains(strings.ToLower(e.RawJSON()+" "+e.Message), "image")
}
