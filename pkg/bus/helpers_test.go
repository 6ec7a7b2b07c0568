package bus_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"jetway/pkg/events"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func itoa(i int) string { return strconv.Itoa(i) }

// eventsFiredSubject is events.FiredSubject, for the tests here.
func eventsFiredSubject(p int, tenant, session string) (string, error) {
	return events.FiredSubject(p, tenant, session)
}
