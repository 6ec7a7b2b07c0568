package telemetry

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"

	"jetway/pkg/redact"
)

// Log formats accepted by LogConfig.Format.
const (
	FormatAuto    = "auto"    // console on a terminal, JSON otherwise
	FormatJSON    = "json"    // one JSON object per line, for collectors
	FormatConsole = "console" // coloured, human-readable lines
)

// LogConfig configures NewLogger.
type LogConfig struct {
	// Level is a zerolog level name: trace, debug, info (default), warn,
	// error, fatal, panic, disabled.
	Level string
	// Format is FormatAuto (default), FormatJSON or FormatConsole.
	Format string
	// Out is where lines go (default os.Stderr).
	Out io.Writer
	// Service, if set, is added to every line as "service".
	Service string
}

// NewLogger builds a logger from cfg. JSON is the default because logs are
// read by machines in production; a person at a terminal gets the console
// writer unless they ask for JSON.
func NewLogger(cfg LogConfig) (zerolog.Logger, error) {
	out := cfg.Out
	if out == nil {
		out = os.Stderr
	}
	level := zerolog.InfoLevel
	if cfg.Level != "" {
		l, err := zerolog.ParseLevel(strings.ToLower(cfg.Level))
		if err != nil {
			return zerolog.Nop(), fmt.Errorf("telemetry: log level %q: %w", cfg.Level, err)
		}
		level = l
	}
	var w io.Writer
	switch strings.ToLower(cfg.Format) {
	case "", FormatAuto:
		w = out
		if isTerminal(out) {
			w = consoleWriter(out)
		}
	case FormatJSON:
		w = out
	case FormatConsole:
		w = consoleWriter(out)
	default:
		return zerolog.Nop(), fmt.Errorf("telemetry: log format %q: want auto, json or console", cfg.Format)
	}
	// Secrets never reach a log: every event is redacted as JSON, before a
	// console writer formats it.
	c := zerolog.New(redact.Writer(w)).Level(level).With().Timestamp()
	if cfg.Service != "" {
		c = c.Str("service", cfg.Service)
	}
	return c.Logger().Hook(TraceHook{}), nil
}

func consoleWriter(out io.Writer) zerolog.ConsoleWriter {
	return zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly, NoColor: !isTerminal(out)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// WithTrace returns l with the trace_id and span_id of the span in ctx, so
// log lines can be joined to traces. Without a valid span it returns l.
func WithTrace(ctx context.Context, l zerolog.Logger) zerolog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return l
	}
	return l.With().Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String()).Logger()
}

// FromContext is the logger stored in ctx (zerolog.Ctx) with the ids of the
// active span added; base is used when ctx holds no logger.
func FromContext(ctx context.Context, base zerolog.Logger) zerolog.Logger {
	l := base
	if cl := zerolog.Ctx(ctx); cl != nil && cl.GetLevel() != zerolog.Disabled {
		l = *cl
	}
	return WithTrace(ctx, l)
}

// TraceHook adds trace_id and span_id to events logged with .Ctx(ctx), for
// code that keeps one logger and passes contexts around. NewLogger installs it.
type TraceHook struct{}

// Run implements zerolog.Hook.
func (TraceHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	ctx := e.GetCtx()
	if ctx == nil {
		return
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	e.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
}
