package bus_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

func TestStartEmbedded_keeps_streams_and_messages_across_a_clean_restart(t *testing.T) {
	cfg := bus.EmbeddedConfig{StoreDir: t.TempDir(), ServerName: "restart"}
	s, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s) })
	nc, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	for i := range 5 {
		if _, err := js.Publish(ctx, "jetway.transcript.t.s", fmt.Appendf(nil, "turn %d", i)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	nc.Close()
	bus.StopEmbedded(s)

	s2, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s2) })
	_, js2 := bustest.Connect(t, s2.ClientURL())
	tr, err := js2.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if n := tr.CachedInfo().State.Msgs; n != 5 {
		t.Fatalf("%s holds %d messages after restart, want 5", bus.StreamTranscripts, n)
	}
	m, err := tr.GetLastMsgForSubject(ctx, "jetway.transcript.t.s")
	if err != nil {
		t.Fatalf("last turn after restart: %v", err)
	}
	if string(m.Data) != "turn 4" {
		t.Errorf("last turn after restart = %q, want \"turn 4\"", m.Data)
	}
}

func TestStartEmbedded_requires_a_store_dir(t *testing.T) {
	if s, err := bus.StartEmbedded(bus.EmbeddedConfig{}); err == nil {
		bus.StopEmbedded(s)
		t.Fatal("started without a StoreDir")
	}
}

func TestStartEmbedded_fails_fast_naming_the_cause_when_the_port_is_taken(t *testing.T) {
	s := bustest.StartServer(t)
	port := s.Addr().(*net.TCPAddr).Port
	other, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir(), Port: port, ReadyTimeout: time.Minute})
	if err == nil {
		bus.StopEmbedded(other)
		t.Fatal("second server started on a taken port")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q does not name the cause", err)
	}
}
