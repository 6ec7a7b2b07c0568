package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"jetway/pkg/llm"
)

// params builds the API request for req: a pure view that copies what it
// needs and never writes to req.
func (p *Provider) params(req llm.CompletionRequest) (sdk.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	if model == "" {
		return sdk.ChatCompletionNewParams{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: errors.New("no model: set it in the request or the provider config")}
	}
	params := sdk.ChatCompletionNewParams{Model: shared.ChatModel(model), Messages: messages(req.System, req.Messages)}
	if len(params.Messages) == 0 {
		return sdk.ChatCompletionNewParams{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: errors.New("request has no message with content")}
	}
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
				return sdk.ChatCompletionNewParams{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "openai", Err: fmt.Errorf("tool %s: input schema: %w", t.Name, err)}
			}
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	return params, nil
}

// turn is a message of the view being shaped.
type turn struct {
	role   llm.Role
	blocks []llm.ContentBlock
}

// messages shapes the conversation for Chat Completions: the system blocks
// as one system message (several confuse the chat templates of local
// servers), consecutive messages of one role merged, and each user turn's
// tool results first, as tool-role messages right after the assistant
// message that made the calls, then its text as a user message. Thinking
// is left out.
func messages(system []string, history []llm.Message) []sdk.ChatCompletionMessageParamUnion {
	var out []sdk.ChatCompletionMessageParamUnion
	var sys []string
	for _, s := range system {
		if s != "" {
			sys = append(sys, s)
		}
	}
	if len(sys) > 0 {
		out = append(out, sdk.SystemMessage(strings.Join(sys, "\n\n")))
	}
	var turns []turn
	for _, m := range history {
		var blocks []llm.ContentBlock
		for _, b := range m.Content {
			switch b.Type {
			case llm.BlockText:
				if b.Text != "" {
					blocks = append(blocks, b)
				}
			case llm.BlockToolUse, llm.BlockToolResult:
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(turns); n > 0 && turns[n-1].role == m.Role {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			continue
		}
		turns = append(turns, turn{role: m.Role, blocks: blocks})
	}
	for _, t := range turns {
		if t.role == llm.RoleAssistant {
			out = append(out, assistant(t.blocks))
			continue
		}
		var texts []string
		for _, b := range t.blocks {
			switch b.Type {
			case llm.BlockToolResult:
				content := b.Content
				if b.IsError {
					content = "error: " + content
				}
				out = append(out, sdk.ToolMessage(content, b.ToolUseID))
			case llm.BlockText:
				texts = append(texts, b.Text)
			}
		}
		if len(texts) > 0 {
			out = append(out, sdk.UserMessage(strings.Join(texts, "\n\n")))
		}
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
