package llmtest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"jetway/pkg/llm"
)

// RandomMessage is message i of a random session: texts, tool
// calls and their results, images, blocks the API refuses (empty text,
// thinking without a signature) and runs of one role, which shaping
// merges or drops. img is the image a message may carry.
func RandomMessage(r *rand.Rand, i int, img *llm.Image) llm.Message {
	text := fmt.Sprintf("message %d", i)
	switch r.IntN(9) {
	case 0:
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockText, Text: text},
			{Type: llm.BlockToolUse, ID: fmt.Sprintf("tu%d", i), Name: "glob", Input: json.RawMessage(`{"pattern":"*"}`)},
		}}
	case 1:
		return llm.Message{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: fmt.Sprintf("tu%d", i-1), Content: text},
		}}
	case 2:
		return llm.Message{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}, {Type: llm.BlockImage, Image: img}}}
	case 3:
		return llm.Message{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText}}} // refused: empty
	case 4:
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockThinking, Text: text}}} // refused: unsigned
	case 5, 6:
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}}}
	default:
		return llm.UserText(text)
	}
}

// SettledRequests grows that many random histories, a few RandomMessages
// at each of their steps, and hands send each step's request as a
// session's loop makes it: the view of the history through one
// llm.ViewCache per history, with Settled as the cache says. Now and then
// a history is read back (the same messages in other blocks), as from a
// transcript. h numbers the history.
func SettledRequests(r *rand.Rand, histories, steps int, send func(h int, req llm.CompletionRequest)) {
	img := llm.NewImage("image/png", PNG(3, 2))
	for h := range histories {
		var vc llm.ViewCache
		var hist []llm.Message
		for range steps {
			for range 1 + r.IntN(3) {
				hist = append(hist, RandomMessage(r, len(hist), &img))
			}
			if r.IntN(10) == 0 {
				raw, _ := json.Marshal(hist)
				var back []llm.Message
				if json.Unmarshal(raw, &back) == nil {
					hist = back
				}
			}
			view, _, settled := vc.View(hist)
			if len(view) > 0 {
				send(h, llm.CompletionRequest{Messages: view, MaxTokens: 64, Settled: settled})
			}
		}
	}
}
