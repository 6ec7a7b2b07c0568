package agent_test

import (
	"context"
	"fmt"

	"jetway/pkg/agent"
	"jetway/pkg/agent/guide"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
)

// A run with one tool turn and a notice that arrives while the model is busy:
// the notice is handed to the model before its next call, and the turn that
// carried it names the event id a host acks once it is recorded.
func ExampleQuery() {
	notices := guide.NewNoticeGuide()
	model := newModel(
		reply{text: "Looking.", tools: []llm.ContentBlock{call("toolu_1", "echo", `{"q":"status"}`)},
			before: func(llm.CompletionRequest) {
				notices.Push("ce-42", "[background job notice] job 3 (gh) exited 0 after 21m.")
			}},
		reply{text: "CI passed."},
	)
	reg, _ := tool.NewRegistry(echo())
	in := agent.QueryInput{Provider: model, Messages: []llm.Message{llm.UserText("is CI done?")}, Tools: reg, Notices: notices}
	for ev := range agent.Query(context.Background(), in, agent.QueryDeps{}) {
		switch ev.Kind {
		case agent.KindToolResult:
			fmt.Println("tool result:", ev.ToolResult.Content)
		case agent.KindResult:
			for _, m := range ev.Terminal.Messages {
				if m.Kind == llm.KindNotice {
					fmt.Println("notice turn delivers:", m.Delivers)
				}
			}
			fmt.Println("ended:", ev.Terminal.Reason, "-", ev.Terminal.Text)
		}
	}
	// Output:
	// tool result: echo {"q":"status"}
	// notice turn delivers: [ce-42]
	// ended: completed - CI passed.
}
