package telemetry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"jetway/pkg/telemetry"
)

func TestMetricsHandler_serves_a_registered_counter(t *testing.T) {
	reg := telemetry.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "jetway_test_events_total", Help: "events seen"})
	reg.MustRegister(c)
	c.Add(3)

	srv := httptest.NewServer(telemetry.MetricsHandler(reg))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	body := string(b)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, want := range []string{"jetway_test_events_total 3", "go_goroutines", "process_"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
