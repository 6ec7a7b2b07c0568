package chat

import (
	"context"
	"slices"
	"strings"
	"time"

	"jetway/pkg/client"
)

// Lines from elsewhere: a session can be talked to from several places at
// once (two chats, the console, `jetway send`), and a person watching one
// chat should see what was said in the others, or the agent's answers
// reply to nothing they can see. The stream says which events a run took
// (run.started, run.delivered: their CE ids) but not what they said; the
// transcript has the turn that delivered them. So when a run takes an
// event this chat did not send, the chat reads the transcript entries that
// came since it last looked and shows each person's line among them that
// is not its own, as a person's line from elsewhere. Notices (jobs, events,
// sub-agents) are not shown here: their headlines are on the stream.

// elsewhereWait bounds the transcript read behind one line from elsewhere,
// so a slow dispatcher delays the stream by at most this much.
const elsewhereWait = 5 * time.Second

// elsewherePrefix starts a person's line sent from elsewhere, as "you: "
// starts the chat's own.
const elsewherePrefix = "person (elsewhere): "

// fromElsewhere shows the lines a person sent from elsewhere that the
// transcript holds since the chat last looked, when ids (the events a run
// just took) include one this chat did not send. Every entry read is
// judged, not only the ones delivering ids: a read can run ahead of the
// stream, and the entries it passes are not read again.
func (c *chat) fromElsewhere(ctx context.Context, ids []string) {
	// A line this chat is sending right now is in mine once its POST has
	// answered, and the transcript can hold it as soon as the dispatcher
	// took it: hold off sending until the read is done, and wait for a
	// send under way before it.
	c.sending.RLock()
	defer c.sending.RUnlock()
	if !slices.ContainsFunc(ids, c.notMine) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, elsewhereWait)
	defer cancel()
	err := c.cfg.Client.EachTranscriptEntry(ctx, c.cfg.Session, c.cursor.Load(), func(e client.TranscriptEntry) error {
		c.cursor.Store(e.ID)
		if text := c.elsewhereText(e); text != "" {
			c.println(elsewherePrefix + clip(text, 300))
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		c.println("! a line sent from elsewhere could not be read: " + err.Error())
	}
}

// notMine reports an event id this chat did not send.
func (c *chat) notMine(id string) bool {
	_, ok := c.mine.Load(id)
	return !ok
}

// elsewhereText is the person's words in e that came from elsewhere: e
// must be a person's turn delivering an event this chat did not send, and
// any of this chat's own lines delivered with it are taken out.
func (c *chat) elsewhereText(e client.TranscriptEntry) string {
	if e.Role != "user" || e.MessageKind != "" || !slices.ContainsFunc(e.Delivers, c.notMine) ||
		!slices.Contains(strings.Split(client.Whose(e), "+"), "person") {
		return ""
	}
	text := firstText(e.Content)
	for _, id := range e.Delivers {
		if own, ok := c.mine.Load(id); ok {
			text = strings.Replace(text, own.(string), "", 1)
		}
	}
	return strings.TrimSpace(text)
}
