package bus

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A source the server cannot set up leaves the upgrade waiting: the wait
// says what it waits for and what the server says of the source while it
// lasts, and ends at its own bound with that in the error, not with a
// bare deadline.
func TestWaitSourcing_tells_the_server_s_error_for_a_source_that_does_not_copy(t *testing.T) {
	defer func(wait, every time.Duration) { sourceRetryWait, sourceNoteEvery = wait, every }(sourceRetryWait, sourceNoteEvery)
	sourceRetryWait, sourceNoteEvery = 3*time.Second, 500*time.Millisecond

	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: filepath.Join(t.TempDir(), "nats"), ServerName: "wait-sourcing"})
	if err != nil {
		t.Fatal(err)
	}
	defer StopEmbedded(srv)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	const origin = "JETWAY_WORK_0"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: origin, Subjects: []string{"origin.>"}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "origin.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// The log sources the shard through a durable consumer that acks
	// explicitly where sourcing needs flow-control acks: the server
	// refuses to use it, each time it tries.
	if _, err := js.CreatePushConsumer(ctx, origin, jetstream.ConsumerConfig{
		Durable: EventsSourceConsumer, DeliverSubject: "jetway.sourcing.events.0", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamEvents, Sources: []*jetstream.StreamSource{{
		Name:     origin,
		Consumer: &jetstream.StreamConsumerSource{Name: EventsSourceConsumer, DeliverSubject: "jetway.sourcing.events.0"},
	}}}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var notes []string
	cfg := ProvisionConfig{Progress: func(l string) { mu.Lock(); notes = append(notes, l); mu.Unlock() }}
	err = waitSourcing(ctx, js, cfg, origin, 0)
	if err == nil {
		t.Fatal("waitSourcing returned no error for a source the server cannot set up")
	}
	if ctx.Err() != nil {
		t.Fatalf("the wait ran to the test's deadline, not its own bound: %v", err)
	}
	want := "JETWAY_EVENTS has not copied JETWAY_WORK_0 past 0 again in 3s (the server's last error setting it up: "
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q and the server's words", err, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) == 0 || !strings.HasPrefix(notes[len(notes)-1], "waiting for JETWAY_EVENTS to copy JETWAY_WORK_0 past 0 again (the server's last error setting it up: ") {
		t.Errorf("progress while waiting: %q, want lines saying what it waits for and the server's error", notes)
	}
	t.Logf("the error: %v", err)
}
