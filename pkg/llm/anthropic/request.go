package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"jetway/pkg/llm"
	"jetway/pkg/llm/internal/wirecache"
)

// params builds the API request for req: a pure view that copies what it
// needs and never writes to req.
//
// This SDK version has no temperature field (newer models fix it), so a
// request's Temperature travels as a raw JSON field of the body; models
// that refuse it answer with a 400. stream is whether the call streams.
func (p *Provider) params(req llm.CompletionRequest, stream bool) (sdk.MessageNewParams, []option.RequestOption, error) {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	if model == "" {
		return sdk.MessageNewParams{}, nil, &llm.Error{Kind: llm.ErrKindModel, Provider: "anthropic", Err: errors.New("no model: set it in the request or the provider config")}
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = p.cfg.MaxTokens
	}
	// Every field set here is in headKey, by which the body's head is
	// cached.
	params := sdk.MessageNewParams{
		Model:     sdk.Model(model),
		MaxTokens: int64(maxTokens),
	}
	switch {
	case req.ThinkingBudget > 0 && p.cfg.AdaptiveThinking:
		params.Thinking = sdk.ThinkingConfigParamUnion{OfAdaptive: &sdk.ThinkingConfigAdaptiveParam{}}
	case req.ThinkingBudget > 0:
		// 1024 is the API's floor for a thinking budget.
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(max(req.ThinkingBudget, 1024)))
	}
	body, err := p.requestBody(params, req, stream)
	if err != nil {
		return sdk.MessageNewParams{}, nil, err
	}
	opts := []option.RequestOption{option.WithRequestBody("application/json", body)}
	if req.Temperature != nil {
		opts = append(opts, option.WithJSONSet("temperature", *req.Temperature))
	}
	return params, opts, nil
}

// requestBody is the body of req, with params' fields.
func (p *Provider) requestBody(params sdk.MessageNewParams, req llm.CompletionRequest, stream bool) ([]byte, error) {
	pre, sh, err := p.history(req)
	defer pre.Keep()
	if err != nil {
		return nil, err
	}
	body, err := p.body(params, req, pre, sh, stream)
	if err != nil {
		return nil, &llm.Error{Kind: llm.ErrKindModel, Provider: "anthropic", Err: err}
	}
	return body, nil
}

// history returns the prefix of req's history (see wirecache.Prefix) and
// the rest of it, shaped, once its images pass. What the history settled
// before was checked, shaped and encoded then. The caller Keeps the
// prefix, whatever the error.
func (p *Provider) history(req llm.CompletionRequest) (*wirecache.Prefix, wirecache.Shaped, error) {
	settled := min(max(req.Settled, 0), len(req.Messages))
	pre := p.enc.TakePrefix('m', req.Messages, settled)
	sh, ok := wirecache.ShapeAfter(req.Messages, pre, settled, wire)
	if !ok {
		// The prefix's last turn would take in the next message: the
		// history is shaped and checked in full.
		pre.Reset()
		sh, _ = wirecache.ShapeAfter(req.Messages, pre, settled, wire)
	}
	// An image the API would refuse fails here, with the same class as
	// the API's refusal, and costs no round trip.
	if err := llm.CheckImagesFrom("anthropic", ImagePolicy(), req.Messages, pre.Messages()); err != nil {
		return pre, wirecache.Shaped{}, err
	}
	if len(pre.Bytes) == 0 && len(sh.Turns) == 0 {
		return pre, wirecache.Shaped{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "anthropic", Err: errors.New("request has no message with content")}
	}
	return pre, sh, nil
}

// body is the request body: the SDK's encoding of params, which holds
// neither system prompt, tools nor messages, with those three spliced in
// from the provider's encodings (see encodings and wirecache.OpenBody).
func (p *Provider) body(params sdk.MessageNewParams, req llm.CompletionRequest, pre *wirecache.Prefix, sh wirecache.Shaped, stream bool) ([]byte, error) {
	sys, err := p.enc.system(system(req.System, req.DynamicBoundary, !p.cfg.DisableCache))
	if err != nil {
		return nil, err
	}
	tools, err := p.enc.tools(req.Tools)
	if err != nil {
		return nil, err
	}
	// A history with no prefix yet is encoded turn by turn along its
	// chain; after a prefix only the few turns since are left.
	msgs, err := p.enc.turns(sh.Turns, !p.cfg.DisableCache, pre.Messages() == 0)
	if err != nil {
		return nil, fmt.Errorf("encode messages: %w", err)
	}
	head, err := p.enc.head(params)
	if err != nil {
		return nil, err
	}
	// One buffer, sized up front: the history is copied once, into it.
	body, err := wirecache.OpenBodyFrom(head, stream, len(sys)+len(tools)+len(pre.Bytes)+arrayLen(msgs)+40)
	if err != nil {
		return nil, err
	}
	if sys != nil {
		body = append(wirecache.AppendField(body, "system"), sys...)
	}
	if tools != nil {
		body = append(wirecache.AppendField(body, "tools"), tools...)
	}
	body = appendArray(wirecache.AppendField(body, "messages"), pre.Bytes, msgs)
	// What this request settled joins the prefix, after the body has
	// copied it.
	if n := sh.Settling; n > 0 {
		pre.Extend(req.Messages[pre.Messages():sh.Settled], sh.Turns[n-1].Role, msgs[:n])
	}
	return append(body, '}'), nil
}

// system builds the system blocks, with a cache breakpoint on the last
// stable block (the one before dynamic): everything up to it — tools and
// the stable system prompt — is then read from the cache on every call
// while the dynamic blocks after it change freely. Empty blocks are left
// out, as the API refuses them.
func system(blocks []string, dynamic int, cache bool) []sdk.TextBlockParam {
	var out []sdk.TextBlockParam
	breakpoint := -1
	for i, s := range blocks {
		if s == "" {
			continue
		}
		out = append(out, sdk.TextBlockParam{Text: s})
		if i < dynamic {
			breakpoint = len(out) - 1
		}
	}
	if cache && breakpoint >= 0 {
		out[breakpoint].CacheControl = sdk.NewCacheControlEphemeralParam()
	}
	return out
}

// wire is what the Messages API takes: signed thinking goes back as it
// came (see llm.Wire).
var wire = llm.Wire{Thinking: true}

// turnParam is the SDK's message for the turn t (see llm.Wire.AppendTurns).
func turnParam(t llm.Turn) sdk.MessageParam {
	if t.Role == llm.RoleUser {
		return sdk.MessageParam{OfUser: &sdk.UserMessageParam{Content: blockParams(t.Content)}}
	}
	return sdk.MessageParam{OfAssistant: &sdk.AssistantMessageParam{Content: blockParams(t.Content)}}
}

func blockParams(blocks []llm.ContentBlock) []sdk.ContentBlockParamUnion {
	out := make([]sdk.ContentBlockParamUnion, 0, len(blocks))
	for _, b := range blocks {
		switch b.Type {
		case llm.BlockText:
			out = append(out, sdk.ContentBlockParamUnion{OfText: &sdk.TextBlockParam{Text: b.Text}})
		case llm.BlockThinking:
			if data, ok := strings.CutPrefix(b.Signature, RedactedPrefix); ok {
				out = append(out, sdk.ContentBlockParamUnion{OfRedactedThinking: &sdk.RedactedThinkingBlockParam{Data: data}})
				continue
			}
			out = append(out, sdk.ContentBlockParamUnion{OfThinking: &sdk.ThinkingBlockParam{Thinking: b.Text, Signature: b.Signature}})
		case llm.BlockToolUse:
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			out = append(out, sdk.ContentBlockParamUnion{OfToolUse: &sdk.ToolUseBlockParam{ID: b.ID, Name: b.Name, Input: input}})
		case llm.BlockImage:
			out = append(out, sdk.ContentBlockParamUnion{OfImage: imageParam(*b.Image)})
		case llm.BlockToolResult:
			r := sdk.ToolResultBlockParam{ToolUseID: b.ToolUseID}
			if b.Content != "" {
				r.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: b.Content}}}
			}
			for _, img := range b.Images {
				r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfImage: imageParam(img)})
			}
			if b.IsError {
				r.IsError = sdk.Bool(true)
			}
			out = append(out, sdk.ContentBlockParamUnion{OfToolResult: &r})
		}
	}
	return out
}

// imageParam is the API's image block: a base64 source, or a URL source
// the API fetches itself.
func imageParam(img llm.Image) *sdk.ImageBlockParam {
	if img.URL != "" {
		return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfURL: &sdk.URLImageSourceParam{URL: img.URL}}}
	}
	return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfBase64: &sdk.Base64ImageSourceParam{
		Data: img.Data, MediaType: sdk.Base64ImageSourceMediaType(img.MediaType),
	}}}
}

// ImagePolicy is what the Messages API accepts as images: JPEG, PNG, GIF
// and WebP, at most 5 MB of base64 and 8000 pixels a side each. The
// provider checks every image against it before sending.
func ImagePolicy() llm.ImagePolicy {
	return llm.ImagePolicy{
		MediaTypes:     []string{"image/jpeg", "image/png", "image/gif", "image/webp"},
		MaxBase64Bytes: 5 << 20,
		MaxDimension:   8000,
	}
}

// cacheLastBlock puts a cache breakpoint on the last block of m that can
// carry one, so the next call — the same history plus a little — reads the
// whole conversation so far from the cache (incremental caching).
func cacheLastBlock(m sdk.MessageParam) {
	var content []sdk.ContentBlockParamUnion
	switch {
	case m.OfUser != nil:
		content = m.OfUser.Content
	case m.OfAssistant != nil:
		content = m.OfAssistant.Content
	}
	for i := len(content) - 1; i >= 0; i-- {
		c := &content[i]
		switch {
		case c.OfText != nil:
			c.OfText.CacheControl = sdk.NewCacheControlEphemeralParam()
			return
		case c.OfToolResult != nil:
			c.OfToolResult.CacheControl = sdk.NewCacheControlEphemeralParam()
			return
		case c.OfToolUse != nil:
			c.OfToolUse.CacheControl = sdk.NewCacheControlEphemeralParam()
			return
		case c.OfImage != nil:
			c.OfImage.CacheControl = sdk.NewCacheControlEphemeralParam()
			return
		}
	}
}

// inputSchema turns a tool's JSON schema into the SDK's parameter, keeping
// every keyword it does not model as an extra field.
func inputSchema(raw json.RawMessage) (sdk.ToolInputSchemaParam, error) {
	var schema sdk.ToolInputSchemaParam
	if len(raw) == 0 {
		return schema, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return schema, fmt.Errorf("input schema: %w", err)
	}
	for k, v := range m {
		switch k {
		case "type":
		case "properties":
			schema.Properties = v
		case "required":
			list, _ := v.([]any)
			for _, r := range list {
				if s, ok := r.(string); ok {
					schema.Required = append(schema.Required, s)
				}
			}
		default:
			if schema.ExtraFields == nil {
				schema.ExtraFields = map[string]any{}
			}
			schema.ExtraFields[k] = v
		}
	}
	return schema, nil
}
