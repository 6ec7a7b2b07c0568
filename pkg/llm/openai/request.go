package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"jetway/pkg/llm"
	"jetway/pkg/llm/internal/wirecache"
)

// request builds the API request for req: a pure view that copies what it
// needs and never writes to req.
//
// The params hold no messages: they go into the body already encoded (see
// body), made from the conversation returned beside them.
func (p *Provider) request(req llm.CompletionRequest) (sdk.ChatCompletionNewParams, conversation, error) {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	if model == "" {
		return sdk.ChatCompletionNewParams{}, conversation{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: errors.New("no model: set it in the request or the provider config")}
	}
	// What the history settled before was checked, shaped and encoded
	// then (see wirecache.Prefix). The prefix goes back to the cache when
	// the body is made, or now, on an error.
	settled := min(max(req.Settled, 0), len(req.Messages))
	pre := p.enc.TakePrefix('t', req.Messages, settled)
	sh, ok := wirecache.ShapeAfter(req.Messages, pre, settled, wire)
	if !ok {
		pre.Reset() // a turn would merge across its end
		sh, _ = wirecache.ShapeAfter(req.Messages, pre, settled, wire)
	}
	fail := func(err error) (sdk.ChatCompletionNewParams, conversation, error) {
		pre.Keep()
		return sdk.ChatCompletionNewParams{}, conversation{}, err
	}
	// An image the server would refuse fails here, with the same class as
	// the server's refusal, and costs no round trip.
	if err := llm.CheckImagesFrom("openai", p.imagePolicy(), req.Messages, pre.Messages()); err != nil {
		return fail(err)
	}
	conv := conversation{system: systemText(req.System), turns: sh.Turns, settling: sh.Settling, settled: sh.Settled, pre: pre, history: req.Messages}
	if conv.system == "" && len(pre.Bytes) == 0 && !slices.ContainsFunc(conv.turns, func(t llm.Turn) bool { return len(messages(t)) > 0 }) {
		return fail(&llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: errors.New("request has no message with content")})
	}
	params := sdk.ChatCompletionNewParams{Model: shared.ChatModel(model)}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = p.cfg.MaxTokens
	}
	if maxTokens > 0 {
		if p.cfg.LegacyMaxTokens {
			params.MaxTokens = sdk.Int(int64(maxTokens))
		} else {
			params.MaxCompletionTokens = sdk.Int(int64(maxTokens))
		}
	}
	if req.Temperature != nil {
		params.Temperature = sdk.Float(*req.Temperature)
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		if len(t.InputSchema) > 0 {
			if err := json.Unmarshal(t.InputSchema, &fn.Parameters); err != nil {
				return fail(&llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: fmt.Errorf("tool %s: input schema: %w", t.Name, err)})
			}
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	return params, conv, nil
}

// wire is what Chat Completions takes: it has no place for thinking (see
// llm.Wire).
var wire = llm.Wire{}

// Texts that carry a tool's images across: Chat Completions takes images
// only in user messages, so a tool message whose result has images says so
// (ToolImagesNote) and the images follow in the next user message, each
// result's under a header naming its call (ToolImagesHeader), before the
// turn's own text and images.
const (
	ToolImagesNote   = "[%d image(s) from this result follow in the next user message]"
	ToolImagesHeader = "[images from tool call %s]"
)

// conversation is what a request's messages are made from: the system
// blocks as one system message (several confuse the chat templates of
// local servers), and the history's turns (see llm.Wire.AppendTurns), each
// user turn encoded as its tool results, tool-role messages right after
// the assistant message that made the calls, then its text (and images,
// the tools' first) as a user message. A user message without images
// stays a plain string, which every compatible server's chat template
// takes.
//
// A conversation holds the prefix of its history (see wirecache.Prefix),
// whose turns are encoded already, and the turns past it: the first
// settling of them are of the messages up to settled, and join the prefix.
type conversation struct {
	system   string
	turns    []llm.Turn
	settling int
	settled  int
	pre      *wirecache.Prefix
	history  []llm.Message
}

// systemText joins the non-empty system blocks.
func systemText(system []string) string {
	var sys []string
	for _, s := range system {
		if s != "" {
			sys = append(sys, s)
		}
	}
	return strings.Join(sys, "\n\n")
}

// messages are the Chat Completions messages of one turn: an assistant
// message, or a user turn's tool messages and then its user message.
func messages(t llm.Turn) []sdk.ChatCompletionMessageParamUnion {
	if t.Role == llm.RoleAssistant {
		return []sdk.ChatCompletionMessageParamUnion{assistant(t.Content)}
	}
	var out []sdk.ChatCompletionMessageParamUnion
	var texts []string
	var toolParts, parts []sdk.ChatCompletionContentPartUnionParam
	for _, b := range t.Content {
		switch b.Type {
		case llm.BlockToolResult:
			content := b.Content
			if b.IsError {
				content = "error: " + content
			}
			if n := len(b.Images); n > 0 {
				if content != "" {
					content += "\n\n"
				}
				content += fmt.Sprintf(ToolImagesNote, n)
				toolParts = append(toolParts, sdk.TextContentPart(fmt.Sprintf(ToolImagesHeader, b.ToolUseID)))
				for _, img := range b.Images {
					toolParts = append(toolParts, imagePart(img))
				}
			}
			out = append(out, sdk.ToolMessage(content, b.ToolUseID))
		case llm.BlockText:
			texts = append(texts, b.Text)
			parts = append(parts, sdk.TextContentPart(b.Text))
		case llm.BlockImage:
			parts = append(parts, imagePart(*b.Image))
		}
	}
	switch {
	case len(toolParts) > 0 || len(parts) > len(texts):
		out = append(out, sdk.UserMessage(append(toolParts, parts...)))
	case len(texts) > 0:
		out = append(out, sdk.UserMessage(strings.Join(texts, "\n\n")))
	}
	return out
}

func assistant(blocks []llm.ContentBlock) sdk.ChatCompletionMessageParamUnion {
	var a sdk.ChatCompletionAssistantMessageParam
	var texts []string
	for _, b := range blocks {
		switch b.Type {
		case llm.BlockText:
			texts = append(texts, b.Text)
		case llm.BlockToolUse:
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID:       b.ID,
				Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: args},
			}})
		}
	}
	if len(texts) > 0 {
		a.Content.OfString = sdk.String(strings.Join(texts, ""))
	}
	return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// imagePart is an image_url content part: the image's URL, or a data: URL
// carrying its bytes.
func imagePart(img llm.Image) sdk.ChatCompletionContentPartUnionParam {
	return sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: img.DataURL()})
}

// ImagePolicy is what OpenAI's Chat Completions accepts as images: PNG,
// JPEG, GIF and WebP up to 20 MB (about 26.7 MB of base64). Compatible
// servers differ; Config.Images replaces it.
func ImagePolicy() llm.ImagePolicy {
	return llm.ImagePolicy{
		MediaTypes:     []string{"image/png", "image/jpeg", "image/gif", "image/webp"},
		MaxBase64Bytes: (20 << 20) / 3 * 4,
	}
}

func (p *Provider) imagePolicy() llm.ImagePolicy {
	if p.cfg.Images != nil {
		return *p.cfg.Images
	}
	return ImagePolicy()
}
