package bus_test

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func itoa(i int) string { return strconv.Itoa(i) }
