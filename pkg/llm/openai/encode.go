package openai

import (
	"encoding/json"
	"fmt"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"jetway/pkg/llm"
	"jetway/pkg/llm/internal/wirecache"
)

// body is the request body: the SDK's encoding of params, which holds no
// messages, with the conversation's messages spliced in. Each turn's
// messages come from the provider's cache (see wirecache) when the turn
// was sent before, as all but the newest were: a turn maps to its messages
// by itself alone.
//
// A history's settled turns (see wirecache.Prefix) are copied in as one
// block, and only the turns past them are looked up; those of them that
// are settled now join the prefix.
func (p *Provider) body(params sdk.ChatCompletionNewParams, conv conversation, stream bool) ([]byte, error) {
	pre := conv.pre
	if pre != nil {
		defer pre.Keep()
	} else {
		pre = &wirecache.Prefix{} // a conversation made without one: nothing is kept
	}
	body, err := wirecache.OpenBody(params, stream, len(pre.Bytes)+len(conv.turns)*96)
	if err != nil {
		return nil, err
	}
	body = append(wirecache.AppendField(body, "messages"), '[')
	first := true
	add := func(enc []byte) {
		if len(enc) == 0 {
			return
		}
		if !first {
			body = append(body, ',')
		}
		body = append(body, enc...)
		first = false
	}
	var key []byte
	if conv.system != "" {
		key = wirecache.AppendString(append(key[:0], 's'), conv.system)
		enc, err := p.enc.Get(key, func() (json.RawMessage, error) { return json.Marshal(sdk.SystemMessage(conv.system)) })
		if err != nil {
			return nil, fmt.Errorf("encode the system message: %w", err)
		}
		add(enc)
	}
	add(pre.Bytes)
	// A history with no prefix yet is encoded along its chain (see
	// wirecache.Sequence); after a prefix only a few turns are left, each
	// found on its own.
	var seq *wirecache.Sequence
	if pre.Messages() == 0 {
		var opening []llm.ContentBlock
		if len(conv.turns) > 0 {
			opening = conv.turns[0].Content
		}
		seq = p.enc.Sequence('t', opening)
		defer seq.Done()
	}
	settling := make([]json.RawMessage, 0, conv.settling)
	for i, t := range conv.turns {
		encode := func() (json.RawMessage, error) { return encodeAll(messages(t)) }
		var enc json.RawMessage
		if seq != nil {
			enc, err = seq.Turn(t.Role, t.Content, encode)
		} else {
			enc, err = p.enc.Turn('t', t.Role, t.Content, encode)
		}
		if err != nil {
			return nil, fmt.Errorf("encode turn %d (%s): %w", i, t.Role, err)
		}
		add(enc)
		if i < conv.settling {
			settling = append(settling, enc)
		}
	}
	body = append(body, "]}"...)
	if n := conv.settling; n > 0 {
		pre.Extend(conv.history[pre.Messages():conv.settled], conv.turns[n-1].Role, settling)
	}
	return body, nil
}

// encodeAll is msgs encoded one by one and joined by commas: a piece of a
// JSON array ("" for none).
func encodeAll(msgs []sdk.ChatCompletionMessageParamUnion) (json.RawMessage, error) {
	var out []byte
	for i, m := range msgs {
		enc, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, enc...)
	}
	return out, nil
}

// requestBody is the request option that sends body.
func requestBody(body []byte) option.RequestOption {
	return option.WithRequestBody("application/json", body)
}
