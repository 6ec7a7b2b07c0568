package redact

import (
	"io"

	"github.com/rs/zerolog"
)

// Writer returns a writer that redacts with Secrets what it passes on to w,
// for the destination of a service's logs:
//
//	log := zerolog.New(redact.Writer(os.Stderr))
//
// zerolog hands each event to one Write, so a secret is never split between
// two calls; a writer used by something that splits lines across writes
// should buffer whole lines before this one. The redacted event stays valid
// JSON: Secrets replaces only text inside strings (never an escape or a
// quote) or an unquoted value with a quoted marker, and here it reads the
// text as JSON, so in {"message":"bad secret:"} the quote after "secret:"
// ends the message rather than opening a value. When w is a
// zerolog.LevelWriter, so is the result.
func Writer(w io.Writer) io.Writer {
	if lw, ok := w.(zerolog.LevelWriter); ok {
		return levelWriter{writer{lw}, lw}
	}
	return writer{w}
}

type writer struct{ w io.Writer }

// Write reports len(p) on success: the caller's bytes were all consumed,
// even though fewer or more were written after redaction.
func (r writer) Write(p []byte) (int, error) {
	if _, err := r.w.Write([]byte(secrets(string(p), true))); err != nil {
		return 0, err
	}
	return len(p), nil
}

type levelWriter struct {
	writer
	lw zerolog.LevelWriter
}

func (r levelWriter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	if _, err := r.lw.WriteLevel(l, []byte(secrets(string(p), true))); err != nil {
		return 0, err
	}
	return len(p), nil
}
