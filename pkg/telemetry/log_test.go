package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"jetway/pkg/telemetry"
)

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestNewLogger_writes_JSON_lines_at_or_above_the_level(t *testing.T) {
	var buf bytes.Buffer
	l, err := telemetry.NewLogger(telemetry.LogConfig{Level: "WARN", Out: &buf, Service: "runner"})
	if err != nil {
		t.Fatalf("NewLogger: %v", err)
	}
	l.Info().Msg("hidden")
	l.Warn().Str("session", "s1").Msg("shown")
	got := lines(t, &buf)
	if len(got) != 1 {
		t.Fatalf("got %d lines, want 1: %s", len(got), buf.String())
	}
	if got[0]["message"] != "shown" || got[0]["level"] != "warn" || got[0]["service"] != "runner" || got[0]["session"] != "s1" {
		t.Errorf("line = %v", got[0])
	}
	if _, ok := got[0]["time"]; !ok {
		t.Errorf("line has no time: %v", got[0])
	}
}

func TestNewLogger_is_JSON_by_default_when_not_writing_to_a_terminal(t *testing.T) {
	var buf bytes.Buffer
	l, err := telemetry.NewLogger(telemetry.LogConfig{Out: &buf})
	if err != nil {
		t.Fatalf("NewLogger: %v", err)
	}
	l.Info().Msg("hello")
	if got := lines(t, &buf); len(got) != 1 || got[0]["message"] != "hello" {
		t.Errorf("lines = %v", got)
	}
}

func TestNewLogger_console_format_is_for_people(t *testing.T) {
	var buf bytes.Buffer
	l, err := telemetry.NewLogger(telemetry.LogConfig{Out: &buf, Format: "console"})
	if err != nil {
		t.Fatalf("NewLogger: %v", err)
	}
	l.Info().Str("k", "v").Msg("hello there")
	out := buf.String()
	if json.Valid([]byte(strings.TrimSpace(out))) || !strings.Contains(out, "hello there") || !strings.Contains(out, "k=v") {
		t.Errorf("console line = %q", out)
	}
}

func TestNewLogger_refuses_unknown_levels_and_formats(t *testing.T) {
	if _, err := telemetry.NewLogger(telemetry.LogConfig{Level: "loud"}); err == nil {
		t.Error("level \"loud\" accepted")
	}
	if _, err := telemetry.NewLogger(telemetry.LogConfig{Format: "xml"}); err == nil {
		t.Error("format \"xml\" accepted")
	}
}

func TestWithTrace_puts_the_active_spans_ids_in_log_lines(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	sc := span.SpanContext()

	var buf bytes.Buffer
	base, err := telemetry.NewLogger(telemetry.LogConfig{Out: &buf})
	if err != nil {
		t.Fatal(err)
	}
	withTrace := telemetry.WithTrace(ctx, base)
	withTrace.Info().Msg("with logger")
	base.Info().Ctx(ctx).Msg("with hook")
	fromCtx := telemetry.FromContext(base.WithContext(ctx), zerolog.Nop())
	fromCtx.Info().Msg("from context")

	got := lines(t, &buf)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3: %s", len(got), buf.String())
	}
	for _, l := range got {
		if l["trace_id"] != sc.TraceID().String() || l["span_id"] != sc.SpanID().String() {
			t.Errorf("%v: trace_id/span_id = %v/%v, want %s/%s", l["message"], l["trace_id"], l["span_id"], sc.TraceID(), sc.SpanID())
		}
	}
}

func TestWithTrace_leaves_lines_alone_without_a_span(t *testing.T) {
	var buf bytes.Buffer
	base, _ := telemetry.NewLogger(telemetry.LogConfig{Out: &buf})
	plain := telemetry.WithTrace(context.Background(), base)
	plain.Info().Msg("plain")
	base.Info().Ctx(context.Background()).Msg("plain too")
	for _, l := range lines(t, &buf) {
		if _, ok := l["trace_id"]; ok {
			t.Errorf("line without a span has a trace_id: %v", l)
		}
	}
}

func TestLogs_never_carry_a_secret(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(telemetry.LogConfig{Format: telemetry.FormatJSON, Out: &buf})
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Str("env", "GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789").Msg("starting with API_KEY=sk-ant-api03-verysecretvalue1234567890")
	out := buf.String()
	if strings.Contains(out, "ghp_abcdefghijklmnopqrstuvwxyz0123456789") || strings.Contains(out, "verysecretvalue") {
		t.Fatalf("secret in log line: %s", out)
	}
	if !strings.Contains(out, "[REDACTED]") {
		t.Fatalf("no redaction marker: %s", out)
	}
}
