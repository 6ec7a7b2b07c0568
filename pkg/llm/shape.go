package llm

// Request shaping lives here, once: the view (MessagesForAPI) says which
// messages a request shows and pairs every tool call with its result;
// AppendTurns makes them the turns an API takes. A provider only encodes
// those turns, and says in Wire the one thing the APIs differ on.

// Turn is one message of a request as an API takes it: a role, and blocks
// the API takes, read-only (they are often the history's own).
type Turn struct {
	Role    Role
	Content []ContentBlock
}

// Wire is what a provider's API takes beyond what every one does.
type Wire struct {
	// Thinking keeps signed thinking blocks in assistant turns, which an
	// API that has thinking needs back unchanged; without it thinking is
	// left out.
	Thinking bool
}

// sends reports whether the API takes block b in a turn of role: no empty
// text (the APIs refuse it), thinking only as w says, images only in user
// turns.
func (w Wire) sends(role Role, b *ContentBlock) bool {
	switch b.Type {
	case BlockText:
		return b.Text != ""
	case BlockThinking:
		return w.Thinking && b.Signature != "" && role == RoleAssistant
	case BlockImage:
		return b.Image != nil && role == RoleUser
	case BlockToolUse, BlockToolResult:
		return true
	}
	return false
}

// AppendTurns appends to turns the API's turns of msgs (a view): the
// blocks w sends, consecutive messages of one role merged into one turn
// (the APIs want roles to alternate), and tool results first in each user
// turn. It merges nothing into the turns already there, so a caller may
// shape a history in parts (see wirecache.ShapeAfter). A message the API
// takes whole keeps its own blocks, so a provider finds what it encoded
// before by their identity.
func (w Wire) AppendTurns(turns []Turn, msgs []Message) []Turn {
	start := len(turns)
	for i := range msgs {
		m := &msgs[i]
		blocks := KeepBlocks(m.Content, func(b *ContentBlock) bool { return w.sends(m.Role, b) })
		if len(blocks) == 0 {
			continue
		}
		if n := len(turns); n > start && turns[n-1].Role == m.Role {
			turns[n-1].Content = joinBlocks(turns[n-1].Content, blocks)
			continue
		}
		turns = append(turns, Turn{Role: m.Role, Content: blocks})
	}
	for i := start; i < len(turns); i++ {
		if turns[i].Role == RoleUser {
			turns[i].Content = ResultsFirst(turns[i].Content)
		}
	}
	return turns
}

// joinBlocks is a followed by b in a new slice: never an append into a,
// which may be the history's.
func joinBlocks(a, b []ContentBlock) []ContentBlock {
	out := make([]ContentBlock, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// ResultsFirst returns blocks with the tool results moved to the front,
// keeping the order within each group: the APIs refuse a user turn whose
// results do not open it. It returns blocks itself when they are in that
// order already, as they almost always are.
func ResultsFirst(blocks []ContentBlock) []ContentBlock {
	ordered := true
	for i := 1; i < len(blocks) && ordered; i++ {
		ordered = blocks[i].Type != BlockToolResult || blocks[i-1].Type == BlockToolResult
	}
	if ordered {
		return blocks
	}
	out := make([]ContentBlock, 0, len(blocks))
	for i := range blocks {
		if blocks[i].Type == BlockToolResult {
			out = append(out, blocks[i])
		}
	}
	for i := range blocks {
		if blocks[i].Type != BlockToolResult {
			out = append(out, blocks[i])
		}
	}
	return out
}

// WithReminder is view with a user turn of text put first: merged into the
// view's first turn when that is a user turn (after its tool results, as
// everywhere), so roles still alternate. view is not changed.
func WithReminder(view []Message, text string) []Message {
	out := make([]Message, 0, len(view)+1)
	out = append(out, Message{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: text}}})
	return mergeUsers(append(out, view...))
}
