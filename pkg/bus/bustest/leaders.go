package bustest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// StepDownTo asks stream's leader to hand over to server, with the request
// type the server itself decodes. It returns an error even when the
// step-down was accepted, so that a caller polling for the new leader
// (testutil.EventuallyNil) looks again.
func StepDownTo(nc *nats.Conn, stream, to string) error {
	req, err := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: to}})
	if err != nil {
		return err
	}
	msg, err := nc.Request(fmt.Sprintf(server.JSApiStreamLeaderStepDownT, stream), req, 2*time.Second)
	if err != nil {
		return err
	}
	var resp server.JSApiStreamLeaderStepDownResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	return fmt.Errorf("stepped down towards %s", to) // look again
}
