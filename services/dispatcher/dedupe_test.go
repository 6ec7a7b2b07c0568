package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// An id is a duplicate only of an earlier event of the same tenant and
// session: two tenants (the docs' own "ci-42") and two sessions of one
// tenant using the same id are all stored, and each is told it is new.
func TestDuplicate_is_scoped_to_tenant_and_session(t *testing.T) {
	f := newFixture(t)
	sends := []struct{ token, session, subject string }{
		{tokUser, "s1", "jetway.events.default.s1"},
		{tokAcme, "s1", "jetway.events.acme.s1"},
		{tokUser, "s2", "jetway.events.default.s2"},
	}
	for _, s := range sends {
		acc := decode[Accepted](t, f.do("POST", "/v1/sessions/"+s.session+"/input", s.token, InputRequest{Text: "x", ID: "ci-42"}), http.StatusAccepted)
		if acc.Duplicate {
			t.Errorf("%s: ci-42 answered as a duplicate of another tenant's or session's event", s.subject)
		}
	}
	for _, s := range sends {
		if hs, _ := f.eventsOn(s.subject); len(hs) != 1 {
			t.Errorf("%s holds %d events with id ci-42, want 1", s.subject, len(hs))
		}
	}
	// The retry in one of them is still a duplicate there.
	again := decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokAcme, InputRequest{Text: "x", ID: "ci-42"}), http.StatusAccepted)
	if !again.Duplicate {
		t.Errorf("acme's retry of ci-42 in s1 was not answered as a duplicate")
	}
}

// BenchmarkPublish measures what the scoped duplicate check costs: an
// input without an id (no claim) against one with a caller-chosen id (one
// key-value create before the publish).
func BenchmarkPublish(b *testing.B) {
	f := newFixture(b)
	p, err := f.d.auth.Authenticate(tokUser)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := func(b *testing.B, id func(i int) string) {
		for i := 0; b.Loop(); i++ {
			if _, err := f.d.Input(ctx, p, "bench", InputRequest{Text: "x", ID: id(i)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("generated_id", func(b *testing.B) { run(b, func(int) string { return "" }) })
	b.Run("caller_id", func(b *testing.B) { run(b, func(i int) string { return fmt.Sprintf("bench-%d-%d", b.N, i) }) })
}
