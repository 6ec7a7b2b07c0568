package llmtest

import (
	"iter"
	"sync"
	"time"

	"jetway/pkg/llm"
)

// Waits records the waits a provider's retries took (as retry.Policy's
// OnRetry), for tests of the backoff; safe for concurrent use.
type Waits struct {
	mu sync.Mutex
	d  []time.Duration
}

// Record is an OnRetry: it keeps the wait.
func (w *Waits) Record(_ int, d time.Duration, _ error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
}

// All is every wait recorded so far, in order.
func (w *Waits) All() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

// UserRequest is a request of one user message of text.
func UserRequest(text string) llm.CompletionRequest {
	return llm.CompletionRequest{Messages: []llm.Message{llm.UserText(text)}, MaxTokens: 1024}
}

// Collect runs a stream to its end, or to its first error: the events
// before it and the error.
func Collect(seq iter.Seq2[llm.StreamEvent, error]) ([]llm.StreamEvent, error) {
	var evs []llm.StreamEvent
	for ev, err := range seq {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
