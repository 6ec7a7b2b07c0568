package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"jetway/pkg/events"
)

// DeadLetter is a webhook delivery that ran out of attempts: what it was,
// where it went, and the last error, with the exact body so an operator can
// replay it by hand.
type DeadLetter struct {
	ID        string          `json:"id"`
	Tenant    string          `json:"tenant"`
	Session   string          `json:"session"`
	URL       string          `json:"url"`
	Event     string          `json:"event"`
	About     string          `json:"about"`
	Headline  string          `json:"headline"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error"`
	Created   time.Time       `json:"created"`
	DeadAt    time.Time       `json:"dead_at"`
	Body      json.RawMessage `json:"body"`
}

// bury stores d as a dead letter (idempotently: same key, same record).
func (n *Notifier) bury(ctx context.Context, d delivery) error {
	dl := DeadLetter{
		ID: d.ID, Tenant: d.Tenant, Session: d.Session, URL: d.URL, Event: d.Event,
		About: d.About, Headline: d.Headline, Attempts: d.Attempts, LastError: d.LastError,
		Created: d.Created, DeadAt: time.Now().UTC(), Body: d.Body,
	}
	b, err := json.Marshal(dl)
	if err != nil {
		return fmt.Errorf("notifier: encode dead letter: %w", err)
	}
	if _, err := n.dead.Put(ctx, d.key(), b); err != nil {
		return fmt.Errorf("notifier: store dead letter %s: %w", d.key(), err)
	}
	n.metrics.deadLetters.Inc()
	return nil
}

// DeadLetters lists a tenant's dead letters, oldest first. It reads the
// bucket once per request and stops, so it is a watch's initial values, not
// a mirror: a request needs an answer or an error now, not a restart.
func (n *Notifier) DeadLetters(ctx context.Context, tenant string) ([]DeadLetter, error) {
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return nil, err
	}
	if n.dead == nil {
		return nil, fmt.Errorf("notifier: dead letters: not running yet")
	}
	w, err := n.dead.Watch(ctx, tenant+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("notifier: list dead letters: %w", err)
	}
	// Stopping only unsubscribes; a failure (the connection is gone)
	// leaves nothing behind to deliver to.
	defer func() { _ = w.Stop() }()
	out := []DeadLetter{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("notifier: list dead letters: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("notifier: list dead letters: watch ended")
			}
			if e == nil {
				slices.SortFunc(out, func(a, b DeadLetter) int { return a.DeadAt.Compare(b.DeadAt) })
				return out, nil
			}
			var dl DeadLetter
			if err := json.Unmarshal(e.Value(), &dl); err != nil {
				n.log.Warn().Err(err).Str("key", e.Key()).Msg("unreadable dead letter")
				continue
			}
			out = append(out, dl)
		}
	}
}

// DeadLetterList is the answer of the dead-letter endpoint and handler.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
}

// DeadLettersHandler serves GET: the caller's dead letters as JSON.
// tenantOf authenticates the request and names its tenant (the dispatcher's
// token check, when mounted next to it); its error is answered 401.
func (n *Notifier) DeadLettersHandler(tenantOf func(*http.Request) (string, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			httpProblem(w, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" is not allowed here")
			return
		}
		tenant, err := tenantOf(r)
		if err != nil {
			httpProblem(w, http.StatusUnauthorized, "Unauthorized", err.Error())
			return
		}
		dls, err := n.DeadLetters(r.Context(), tenant)
		if err != nil {
			httpProblem(w, http.StatusServiceUnavailable, "Dead letters unavailable", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(DeadLetterList{DeadLetters: dls})
	})
}

func httpProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"title": title, "status": status, "detail": detail})
}

// startMicro registers the jetway-notifier micro service with its
// dead-letter endpoint: request {"tenant":"…"}, reply DeadLetterList.
func (n *Notifier) startMicro() (micro.Service, error) {
	svc, err := micro.AddService(n.cfg.Conn, micro.Config{
		Name:        ServiceName,
		Version:     n.cfg.Version,
		Description: "jetway notifier: headlines to terminals and webhooks",
	})
	if err != nil {
		return nil, fmt.Errorf("notifier: start micro service: %w", err)
	}
	err = svc.AddEndpoint("deadletters", micro.HandlerFunc(func(r micro.Request) {
		var req struct {
			Tenant string `json:"tenant"`
		}
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			_ = r.Error("400", "request must be JSON {\"tenant\":\"…\"}: "+err.Error(), nil)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dls, err := n.DeadLetters(ctx, req.Tenant)
		if err != nil {
			_ = r.Error("400", err.Error(), nil)
			return
		}
		_ = r.RespondJSON(DeadLetterList{DeadLetters: dls})
	}), micro.WithEndpointSubject(SubjectDeadLetters))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("notifier: add dead-letter endpoint: %w", err)
	}
	return svc, nil
}
