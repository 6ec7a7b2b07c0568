package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// SpreadLeaders is replaced by the helper's version at merge.
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, streams []string) (moved int, err error) {
	return 0, nil
}
