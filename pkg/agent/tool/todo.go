package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// TodoWriteName is the name of the todo list tool; the loop's todo reminders
// look for calls to it in the history.
const TodoWriteName = "todo_write"

// Todo is one item of the agent's todo list.
type Todo struct {
	Content string `json:"content"`
	// Status is pending, in_progress or completed.
	Status string `json:"status"`
}

// TodoStore is the agent's todo list for a run, kept by the todo_write tool
// and re-surfaced by the loop's reminders. It is safe for concurrent use.
type TodoStore struct {
	mu    sync.Mutex
	items []Todo
}

// Set replaces the list.
func (s *TodoStore) Set(items []Todo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = append([]Todo(nil), items...)
}

// List returns a copy of the list.
func (s *TodoStore) List() []Todo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Todo(nil), s.items...)
}

// Render is the list as the model reads it, one item a line.
func Render(items []Todo) string {
	var b strings.Builder
	for i, t := range items {
		fmt.Fprintf(&b, "%d. [%s] %s\n", i+1, t.Status, t.Content)
	}
	return b.String()
}

// TodoWrite returns the todo_write tool over s. It counts as read-only: it
// touches no file or process, only the agent's own notes, so it may run in
// plan mode and alongside other read-only calls (the last write wins).
func TodoWrite(s *TodoStore) Tool {
	return Func{
		Name:        TodoWriteName,
		Description: "Replace your todo list for this task. Keep it current: mark an item in_progress when you start it and completed when it is done.",
		Schema: json.RawMessage(`{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object",` +
			`"properties":{"content":{"type":"string"},"status":{"type":"string","enum":["pending","in_progress","completed"]}},` +
			`"required":["content","status"]}}},"required":["todos"]}`),
		IsReadOnly: true,
		Fn: func(_ context.Context, c Call) (Result, error) {
			var in struct {
				Todos []Todo `json:"todos"`
			}
			if err := json.Unmarshal(c.Input, &in); err != nil {
				return Result{}, fmt.Errorf("todo_write input: %w", err)
			}
			for _, t := range in.Todos {
				switch t.Status {
				case "pending", "in_progress", "completed":
				default:
					return Result{}, fmt.Errorf("todo_write: status %q is not pending, in_progress or completed", t.Status)
				}
			}
			s.Set(in.Todos)
			return Result{Content: "Todo list updated:\n" + Render(in.Todos)}, nil
		},
	}
}
