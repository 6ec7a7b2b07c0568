package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestWriter_redacts_zerolog_events_and_keeps_them_json(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(Writer(&buf))
	key := "sk-ant-api03-" + fake(40)
	log.Info().
		Str("api_key", key).
		Int("token_count", 7).
		Str("url", "https://bob:hunter2@example.com/x").
		Msg("calling provider with Authorization: Bearer " + key)

	out := buf.String()
	if strings.Contains(out, key[10:]) || strings.Contains(out, "hunter2") {
		t.Fatalf("secret reached the log: %s", out)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("redacted event is not JSON: %v\n%s", err, out)
	}
	if got, want := ev["api_key"], "sk-ant-"+Marker; got != want {
		t.Errorf("api_key = %v, want %q", got, want)
	}
	if ev["token_count"] != Marker {
		t.Errorf("token_count = %v, want %q", ev["token_count"], Marker)
	}
	if got, want := ev["message"], "calling provider with Authorization: Bearer sk-ant-[REDACTED]"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

type levelRecorder struct {
	bytes.Buffer
	levels []zerolog.Level
}

func (r *levelRecorder) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	r.levels = append(r.levels, l)
	return r.Write(p)
}

func TestWriter_passes_levels_to_a_level_writer(t *testing.T) {
	rec := &levelRecorder{}
	w := Writer(rec)
	if _, ok := w.(zerolog.LevelWriter); !ok {
		t.Fatalf("Writer(%T) is not a zerolog.LevelWriter", rec)
	}
	log := zerolog.New(w)
	log.Warn().Str("password", "pw1").Send()
	if len(rec.levels) != 1 || rec.levels[0] != zerolog.WarnLevel {
		t.Fatalf("levels = %v, want [warn]", rec.levels)
	}
	if strings.Contains(rec.String(), "pw1") {
		t.Fatalf("password reached the log: %s", rec.String())
	}
}

type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestWriter_reports_the_destination_error(t *testing.T) {
	n, err := Writer(failingWriter{}).Write([]byte("TOKEN=x\n"))
	if !errors.Is(err, errDiskFull) || n != 0 {
		t.Fatalf("Write = %d, %v; want 0, %v", n, err, errDiskFull)
	}
}

func TestWriter_reports_all_input_consumed(t *testing.T) {
	var buf bytes.Buffer
	in := []byte("PASSWORD=a-very-long-password-value\n")
	n, err := Writer(&buf).Write(in)
	if err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(in))
	}
	if got, want := buf.String(), "PASSWORD=[REDACTED]\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
}

func TestWriter_keeps_json_escapes_whole(t *testing.T) {
	tok := fake(40)
	for _, msg := range []string{
		"line one\nghp_" + fake(36),
		"line one\n" + tok,
		"é" + tok,
		`token=abc"rest`,
		`password='abc`,
		`{"secret":"xyz`,
		"password=C:\\Users\\me",
		"\x1b" + tok,
	} {
		var buf bytes.Buffer
		log := zerolog.New(Writer(&buf))
		log.Info().Msg(msg)
		out := buf.Bytes()
		if !json.Valid(out) {
			t.Errorf("message %q: redacted event is not JSON: %s", msg, out)
			continue
		}
		var ev struct{ Message string }
		if err := json.Unmarshal(out, &ev); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ev.Message, tok) || strings.Contains(ev.Message, fake(36)) || strings.Contains(ev.Message, "xyz") || strings.Contains(ev.Message, "abc") {
			t.Errorf("message %q: a secret survived: %q", msg, ev.Message)
		}
	}
}

// FuzzWriter holds that a redacted zerolog event is still JSON, whatever
// the strings in it.
func FuzzWriter(f *testing.F) {
	f.Add("password", `token=abc\"x`, "line\nghp_"+fake(36))
	f.Add("msg", "Bearer abc123", `{"secret":"v"}`)
	f.Add(`a"b`, "\\", "\\u00e9"+fake(33))
	f.Fuzz(func(t *testing.T, key, value, msg string) {
		var buf bytes.Buffer
		log := zerolog.New(Writer(&buf))
		log.Info().Str(key, value).Msg(msg)
		if !json.Valid(buf.Bytes()) {
			t.Fatalf("Str(%q, %q).Msg(%q): redacted event is not JSON: %s", key, value, msg, buf.Bytes())
		}
	})
}
