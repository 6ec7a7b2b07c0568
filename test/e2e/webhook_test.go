package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"jetway/pkg/events"
)

// webhookSecret signs what the notifier POSTs to the test's receiver.
const webhookSecret = "e2e-webhook-secret"

// hookCall is one POST the receiver got.
type hookCall struct {
	Delivery, Attempt string
	SignatureOK       bool
	Type, Subject     string
	Note              events.HeadlineNote
	Status            int // what the receiver answered
	Err               string
}

// failingReceiver is a webhook receiver that fails the first failures
// attempts of every delivery with 503 and accepts the next.
type failingReceiver struct {
	*feed[hookCall]
	failures int
	mu       sync.Mutex
	tries    map[string]int
}

func startFailingReceiver(t *testing.T, failures int) (*failingReceiver, string) {
	t.Helper()
	r := &failingReceiver{feed: newFeed[hookCall](), failures: failures, tries: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	return r, fmt.Sprintf(`{"default": [{"url": %q, "secret": %q, "types": ["io.jetway.job.*"]}]}`, srv.URL, webhookSecret)
}

func (r *failingReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	call := hookCall{Delivery: req.Header.Get("X-Jetway-Delivery"), Attempt: req.Header.Get("X-Jetway-Attempt")}
	// Checked as docs/SECURITY.md ("Webhooks") tells a receiver to: HMAC over the
	// timestamp, a dot and the body, and a timestamp inside the window.
	ts := req.Header.Get("Jetway-Timestamp")
	m := hmac.New(sha256.New, []byte(webhookSecret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	secs, terr := strconv.ParseInt(ts, 10, 64)
	call.SignatureOK = terr == nil && time.Since(time.Unix(secs, 0)).Abs() < 5*time.Minute &&
		hmac.Equal([]byte(req.Header.Get("Jetway-Signature")), []byte("v1="+hex.EncodeToString(m.Sum(nil))))
	// The body is a structured-mode CloudEvent: any CloudEvents SDK reads it.
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	if e, perr := cloudevents.NewEventFromHTTPRequest(req); err != nil || perr != nil {
		call.Err = fmt.Sprintf("read: %v, parse: %v", err, perr)
	} else {
		call.Type, call.Subject = e.Type(), e.Subject()
		if err := json.Unmarshal(e.Data(), &call.Note); err != nil {
			call.Err = "data: " + err.Error()
		}
	}
	r.mu.Lock()
	r.tries[call.Delivery]++
	n := r.tries[call.Delivery]
	r.mu.Unlock()
	call.Status = http.StatusNoContent
	if n <= r.failures {
		call.Status = http.StatusServiceUnavailable
	}
	w.WriteHeader(call.Status)
	r.add(call)
}

// testWebhookRetries ends a job and follows its headline to the tenant's
// webhook, which fails twice: the same delivery must come a third time,
// signed each time, and be accepted.
func testWebhookRetries(t *testing.T, d *devStack, hooks *failingReceiver) {
	const session = "e2e-webhook"
	publishJobExited(t, d.jetStream(t), session, events.JobExited{
		ID: 5, Program: "hookcheck", ExitStatus: 0, RunningForMS: (45 * time.Second).Milliseconds(), Status: events.StatusExited,
	})
	const headline = "job 5 (hookcheck) exited 0 after 45s"
	mine := func(calls []hookCall) []hookCall {
		var out []hookCall
		for _, c := range calls {
			if c.Note.Text == headline {
				out = append(out, c)
			}
		}
		return out
	}
	calls := mine(hooks.wait(t, runTimeout, "the webhook accepts the headline after two failures", func(calls []hookCall) bool {
		c := mine(calls)
		return len(c) > 0 && c[len(c)-1].Status/100 == 2
	}, func(calls []hookCall) string { return fmt.Sprintf("%+v", calls) }))
	if len(calls) != 3 {
		t.Fatalf("%d POSTs for the headline, want 2 refused and 1 accepted: %+v", len(calls), calls)
	}
	for i, c := range calls {
		if c.Delivery == "" || c.Delivery != calls[0].Delivery {
			t.Errorf("POST %d has delivery id %q, want the first's %q", i+1, c.Delivery, calls[0].Delivery)
		}
		if c.Attempt != fmt.Sprint(i+1) {
			t.Errorf("POST %d says attempt %q", i+1, c.Attempt)
		}
		if !c.SignatureOK {
			t.Errorf("POST %d: signature does not match the body", i+1)
		}
		if c.Err != "" || c.Type != events.TypeHeadline || c.Subject != "default/"+session || c.Note.About != events.TypeJobExited {
			t.Errorf("POST %d: %+v", i+1, c)
		}
	}
}
