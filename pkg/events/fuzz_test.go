package events

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

// parseHeaderBlob turns "Key: value" lines into a nats.Header, so the fuzzer
// can vary header names, values and repeats through one string.
func parseHeaderBlob(blob string) nats.Header {
	if blob == "" {
		return nil
	}
	h := nats.Header{}
	for _, line := range strings.Split(blob, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

var sentinels = []error{ErrInvalidToken, ErrInvalidSubject, ErrTooLarge, ErrMalformed, ErrMissingAttribute,
	ErrInvalidAttribute, ErrSpecVersion, ErrSubjectMismatch, ErrInvalidData, ErrForgedJobEvent, ErrForgedAgentEvent}

// FuzzDecode holds three properties for any input, binary or structured:
// Decode does not panic; a refusal matches one of the package's sentinel
// errors; and an accepted event survives Encode and Decode unchanged.
// The seed corpus is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add(subjEvents, "ce-specversion: 1.0\nce-type: io.jetway.input\nce-source: cli\nce-id: 1", []byte(`{"text":"hi"}`))
	f.Fuzz(func(t *testing.T, subject, headers string, data []byte) {
		h, err := Decode(subject, parseHeaderBlob(headers), data)
		if err != nil {
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("refusal %v (%T) matches no sentinel error", err, err)
		}
		if h.Payload == nil || h.Payload.EventType() != h.Type {
			t.Fatalf("accepted with payload %#v for type %q", h.Payload, h.Type)
		}
		if ValidateToken("tenant", h.Tenant) != nil || ValidateToken("session", h.Session) != nil {
			t.Fatalf("accepted bad tokens %q/%q", h.Tenant, h.Session)
		}
		if IsJobType(h.Type) && !h.FromJobs {
			t.Fatalf("accepted %s outside jobevents", h.Type)
		}
		m, err := Encode(context.Background(), subject, h.Event)
		if err != nil {
			t.Fatalf("accepted event does not encode: %v\n%s", err, h.Event)
		}
		again, err := Decoder{MaxSize: -1}.DecodeMsg(m)
		if err != nil {
			t.Fatalf("re-encoded event is refused: %v\nheaders %v\nbody %q", err, m.Header, m.Data)
		}
		if again.ID != h.ID || again.Type != h.Type || again.Source != h.Source || !again.Time.Equal(h.Time) ||
			again.Tenant != h.Tenant || again.Session != h.Session || again.FromJobs != h.FromJobs ||
			again.Event.Subject() != h.Event.Subject() || again.Event.DataContentType() != h.Event.DataContentType() ||
			again.Event.DataSchema() != h.Event.DataSchema() {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", h, again)
		}
		if !reflect.DeepEqual(normalise(again.Payload), normalise(h.Payload)) {
			t.Fatalf("round trip changed the payload:\n%#v\n%#v", h.Payload, again.Payload)
		}
		if a, b := formatExtensions(t, again.Event.Extensions()), formatExtensions(t, h.Event.Extensions()); !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the extensions:\n%v\n%v", b, a)
		}
	})
}

// normalise makes payloads comparable across content modes: an empty and
// a nil byte slice carry the same data.
func normalise(p Payload) Payload {
	if x, ok := p.(External); ok && len(x.Data) == 0 {
		x.Data = nil
		return x
	}
	return p
}

// formatExtensions renders extension values in their canonical string form:
// binary mode carries every value as a string.
func formatExtensions(t *testing.T, ext map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range ext {
		s, err := types.Format(v)
		if err != nil {
			t.Fatalf("extension %s: %v", k, err)
		}
		out[k] = s
	}
	return out
}
