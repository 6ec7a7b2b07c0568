package llm

import (
	"context"
	"errors"
	"fmt"
)

// ErrorKind classifies a failed model call by what the loop should do next.
type ErrorKind string

const (
	// ErrKindOverflow: the prompt is too long for the model's context. The
	// loop compacts and retries.
	ErrKindOverflow ErrorKind = "overflow"
	// ErrKindMaxTokens: the model stopped at its output cap. The loop
	// escalates the cap or asks the model to continue.
	ErrKindMaxTokens ErrorKind = "max_tokens"
	// ErrKindImage: an image was refused — an unsupported media type, too
	// large, or data the provider could not process — by the API or by the
	// provider's check before sending. Retrying the same request cannot
	// help; the loop ends with image_error.
	ErrKindImage ErrorKind = "image"
	// ErrKindModel: anything else the provider refused or failed with, after
	// retries.
	ErrKindModel ErrorKind = "model_error"
)

// Error is a classified provider failure.
type Error struct {
	Kind       ErrorKind
	Provider   string
	StatusCode int // HTTP status, 0 if none
	Err        error
}

func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s: %s (HTTP %d): %v", e.Provider, e.Kind, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Provider, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the classification of err, ErrKindModel for an
// unclassified error and "" for nil.
func KindOf(err error) ErrorKind {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ErrKindModel
}

// IsOverflow reports whether err says the prompt was too long.
func IsOverflow(err error) bool { return KindOf(err) == ErrKindOverflow }

// IsImage reports whether err says an image was refused.
func IsImage(err error) bool { return KindOf(err) == ErrKindImage }

// Cancelled is a provider's failure err as the caller's cancellation, when
// it is one (ctx ended, or err is a cancellation or a deadline): the
// context's own error under the provider's name, which the loop reads as
// an abort, not as the model failing. It reports false otherwise.
func Cancelled(ctx context.Context, provider string, err error) (error, bool) {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", provider, ctx.Err()), true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", provider, err), true
	}
	return nil, false
}
