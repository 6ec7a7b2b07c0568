// Package openai is the llm.Provider for the OpenAI Chat Completions API and
// the servers that speak it (vLLM, Ollama, llama.cpp server), over the
// official SDK (github.com/openai/openai-go/v3).
//
// It encodes the turns llm shapes for every provider (llm.Wire): tool
// results as tool-role messages, the system prompt as one system message,
// never touching the caller's history. Thinking blocks are not sent (Chat Completions has no
// place for them). Streamed tool calls are accumulated by index; each is
// emitted as one EventToolUse once a later call starts or the choice
// finishes. A finish_reason of "length" is llm.StopMaxTokens with the
// assembled message, not an error: the loop decides what to do.
//
// Images go as `image_url` content parts (a data: URL, or the image's own
// URL) in user messages. Tool messages cannot carry images, so a tool
// result's images follow in the user message after the tool messages, the
// tool message saying so (ToolImagesNote, ToolImagesHeader). Images are
// checked against ImagePolicy (or Config.Images) before sending, and a 400
// about an image is llm.ErrKindImage, like the local refusal.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"jetway/pkg/llm"
	"jetway/pkg/llm/internal/wirecache"
	"jetway/pkg/llm/retry"
)

// Config configures a Provider.
type Config struct {
	// APIKey is sent as a bearer token. Local servers that need none take
	// any placeholder.
	APIKey string
	// BaseURL is the API's base URL including /v1 (e.g.
	// http://localhost:8000/v1 for vLLM, http://localhost:11434/v1 for
	// Ollama); empty means OpenAI's.
	BaseURL string
	// Model answers requests that name none.
	Model string
	// MaxTokens is the output cap of requests that set none; 0 sends none
	// and lets the server decide.
	MaxTokens int
	// LegacyMaxTokens sends the cap as max_tokens instead of
	// max_completion_tokens, for servers that only know the old field.
	LegacyMaxTokens bool
	// Retry is the retry policy; its MaxRetries is the provider's "max
	// retries" (0 = retry.DefaultMaxRetries, negative = none).
	Retry retry.Policy
	// HTTPClient, if set, carries the requests.
	HTTPClient *http.Client
	// Images, if set, replaces ImagePolicy() as what images are checked
	// against before a request is sent, for compatible servers that take
	// other types or sizes.
	Images *llm.ImagePolicy
}

// Provider is an llm.Provider for Chat Completions.
type Provider struct {
	cfg    Config
	client sdk.Client
	enc    *wirecache.Cache // the messages it has encoded (see body)
}

var _ llm.Provider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("openai: config: API key is required (any placeholder for a local server)")
	}
	opts := []option.RequestOption{
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
	return &Provider{cfg: cfg, client: sdk.NewClient(opts...), enc: wirecache.New(wirecache.Limit)}, nil
}

// Name is "openai <model>", with the server's host when it is not OpenAI.
func (p *Provider) Name() string {
	if p.cfg.BaseURL != "" {
		if u, err := url.Parse(p.cfg.BaseURL); err == nil && u.Host != "" && u.Host != "api.openai.com" {
			return "openai-compatible " + p.cfg.Model + " at " + u.Host
		}
	}
	return "openai " + p.cfg.Model
}

// Stream performs one streaming call. A failure before anything was
// yielded is retried; after that it is returned, since a retry would
// repeat what the caller has already seen.
func (p *Provider) Stream(ctx context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		params, conv, err := p.request(req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		params.StreamOptions.IncludeUsage = sdk.Bool(true)
		body, err := p.body(params, conv, true)
		if err != nil {
			yield(llm.StreamEvent{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: err})
			return
		}
		send := func(ev llm.StreamEvent) bool { return yield(ev, nil) }
		err = retry.Stream(ctx, p.cfg.Retry, verdict, send, func(ctx context.Context, emit func(llm.StreamEvent), stopped func() bool) error {
			return p.streamOnce(ctx, params, body, emit, stopped)
		})
		if err != nil {
			yield(llm.StreamEvent{}, classifyErr(ctx, err))
		}
	}
}

var errIncomplete = errors.New("stream ended before a finish_reason")

// call is a tool call being assembled from stream fragments.
type call struct {
	id, name string
	args     strings.Builder
	emitted  bool
}

func (c *call) block() llm.ContentBlock {
	return llm.ContentBlock{Type: llm.BlockToolUse, ID: c.id, Name: c.name, Input: arguments(c.args.String())}
}

func (p *Provider) streamOnce(ctx context.Context, params sdk.ChatCompletionNewParams, body []byte, emit func(llm.StreamEvent), stopped func() bool) error {
	stream := p.client.Chat.Completions.NewStreaming(ctx, params, requestBody(body))
	// Closing only ends the response: what was read is the answer, and a
	// stream stopped early is one nobody reads any more.
	defer func() { _ = stream.Close() }()
	var (
		text   strings.Builder
		calls  []*call
		finish string
		usage  llm.Usage
	)
	// flush emits the calls before index upto that are not emitted yet.
	flush := func(upto int) {
		for i := 0; i < upto && i < len(calls); i++ {
			if c := calls[i]; c != nil && !c.emitted {
				c.emitted = true
				b := c.block()
				emit(llm.StreamEvent{Type: llm.EventToolUse, Block: &b})
			}
		}
	}
	for stream.Next() {
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			usage = fromUsage(chunk.Usage)
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // one choice is asked for
			}
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				emit(llm.StreamEvent{Type: llm.EventTextDelta, Text: ch.Delta.Content})
			}
			for _, tc := range ch.Delta.ToolCalls {
				i := int(tc.Index)
				if i < 0 || i > 1024 {
					return fmt.Errorf("tool call index %d out of range", i)
				}
				for len(calls) <= i {
					calls = append(calls, nil)
				}
				if calls[i] == nil {
					calls[i] = &call{}
					flush(i) // a later call started: the earlier ones are complete
				}
				c := calls[i]
				if tc.ID != "" {
					c.id = tc.ID
				}
				if tc.Function.Name != "" {
					c.name += tc.Function.Name
				}
				c.args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
				flush(len(calls))
			}
		}
		if stopped() {
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if finish == "" {
		return errIncomplete
	}
	msg := llm.Message{Role: llm.RoleAssistant}
	if text.Len() > 0 {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockText, Text: text.String()})
	}
	for _, c := range calls {
		if c != nil {
			msg.Content = append(msg.Content, c.block())
		}
	}
	stop := stopReason(finish, len(msg.ToolUses()) > 0)
	emit(llm.StreamEvent{Type: llm.EventMessageEnd, Message: &msg, StopReason: stop, Usage: &usage})
	return nil
}

// Complete performs one non-streaming call.
func (p *Provider) Complete(ctx context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	params, conv, err := p.request(req)
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, err
	}
	body, err := p.body(params, conv, false)
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: err}
	}
	var res *sdk.ChatCompletion
	err = p.cfg.Retry.Do(ctx, verdict, func(ctx context.Context) error {
		var err error
		res, err = p.client.Chat.Completions.New(ctx, params, requestBody(body))
		return err
	})
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, classifyErr(ctx, err)
	}
	if len(res.Choices) == 0 {
		return llm.Message{}, "", llm.Usage{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: errors.New("response has no choices")}
	}
	ch := res.Choices[0]
	msg := llm.Message{Role: llm.RoleAssistant}
	if ch.Message.Content != "" {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockText, Text: ch.Message.Content})
	}
	for _, tc := range ch.Message.ToolCalls {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockToolUse, ID: tc.ID, Name: tc.Function.Name, Input: arguments(tc.Function.Arguments)})
	}
	return msg, stopReason(ch.FinishReason, len(msg.ToolUses()) > 0), fromUsage(res.Usage), nil
}

// arguments makes a tool call's argument string a JSON object. Arguments
// that are not valid JSON (a model's slip) are kept, quoted, under
// "_invalid_arguments", so the tool refuses them visibly and the history
// stays valid JSON.
func arguments(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(map[string]string{"_invalid_arguments": s})
	return b
}

// stopReason maps a finish_reason. Some compatible servers say "stop" for
// a message with tool calls; a message with calls is a tool_use stop
// unless it was cut by the length cap.
func stopReason(finish string, hasCalls bool) llm.StopReason {
	switch {
	case finish == "length":
		return llm.StopMaxTokens
	case hasCalls || finish == "tool_calls" || finish == "function_call":
		return llm.StopToolUse
	case finish == "stop" || finish == "":
		return llm.StopEndTurn
	}
	return llm.StopReason(finish)
}

// fromUsage splits OpenAI's prompt count (which includes cached tokens)
// into fresh input and cache reads.
func fromUsage(u sdk.CompletionUsage) llm.Usage {
	cached := int(u.PromptTokensDetails.CachedTokens)
	return llm.Usage{
		InputTokens:          int(u.PromptTokens) - cached,
		OutputTokens:         int(u.CompletionTokens),
		CacheReadInputTokens: cached,
	}
}

func verdict(err error) retry.Verdict {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		h := retry.Header(apiErr.Response)
		return retry.HTTP(apiErr.StatusCode, h)
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return retry.Verdict{Retry: !overflowText(streamErr.Message)}
	}
	return retry.Network(err)
}

// classifyErr turns a final failure into what the loop acts on: the
// context's own error when the call was cancelled, an overflow when the
// prompt did not fit, an image error when an image was refused, a model
// error otherwise. The SDK's error text leaves
// out the server's message, so it is added.
func classifyErr(ctx context.Context, err error) error {
	if cerr, ok := llm.Cancelled(ctx, "openai", err); ok {
		return cerr
	}
	e := &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: err}
	var apiErr *sdk.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &apiErr):
		e.StatusCode = apiErr.StatusCode
		if apiErr.Message != "" {
			e.Err = fmt.Errorf("%w: %s", err, apiErr.Message)
		}
		switch {
		case apiErr.Code == "context_length_exceeded" || apiErr.Type == "exceed_context_size_error" ||
			((apiErr.StatusCode == 400 || apiErr.StatusCode == 413) && overflowText(apiErr.Message+" "+apiErr.RawJSON())):
			e.Kind = llm.ErrKindOverflow
		case isImageRefusal(apiErr):
			e.Kind = llm.ErrKindImage
		}
	case errors.As(err, &streamErr):
		if overflowText(streamErr.Message) {
			e.Kind = llm.ErrKindOverflow
		}
	}
	return e
}

// isImageRefusal recognises a 400 about an image: OpenAI's "Invalid
// image." (code invalid_image), invalid_image_format, image_parse_error,
// invalid_image_url, and a compatible server's refusal of images it cannot
// take ("image input is not supported", "At most 0 image(s) may be
// provided"). Every one names the image; retrying cannot cure any.
func isImageRefusal(e *sdk.Error) bool {
	if e.StatusCode != http.StatusBadRequest {
		return false
	}
	return strings.Contains(strings.ToLower(e.Code+" "+e.Message+" "+e.RawJSON()), "image")
}

// overflowText recognises the ways OpenAI and the compatible servers say
// the prompt does not fit the context.
func overflowText(s string) bool {
	s = strings.ToLower(s)
	for _, marker := range []string{"context_length_exceeded", "maximum context length", "exceeds the available context size", "exceed_context_size", "context window"} {
		if strings.Contains(s, marker) {
			return true
		}
	}
	return false
}
