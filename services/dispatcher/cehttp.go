package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// The CloudEvents HTTP binding as POST /v1/events reads it.

// maxBatch bounds the events in one batch request.
const maxBatch = 100

// readCloudEvents reads one event (binary or structured mode) or a batch
// from an HTTP request's headers and body with the SDK's HTTP binding.
func readCloudEvents(h http.Header, body []byte) ([]event.Event, bool, error) {
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	// Finish releases a message read from memory: nothing can fail there.
	defer func() { _ = msg.Finish(nil) }()
	switch msg.ReadEncoding() {
	case binding.EncodingStructured, binding.EncodingBatch:
		// The SDK keeps one of data and data_base64 and silently drops the
		// other; the NATS API refuses the pair, and so must this door, or
		// the same event would mean different things by the way it came.
		if err := refuseDataPair(body, msg.ReadEncoding() == binding.EncodingBatch); err != nil {
			return nil, msg.ReadEncoding() == binding.EncodingBatch, err
		}
	}
	if msg.ReadEncoding() == binding.EncodingBatch {
		evs, err := cehttp.NewEventsFromHTTPRequest(&http.Request{Header: h, Body: io.NopCloser(bytes.NewReader(body))})
		if err != nil {
			return nil, true, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvents batch", "%v", err)
		}
		switch {
		case len(evs) == 0:
			return nil, true, problem(http.StatusBadRequest, "invalid-event", "Invalid CloudEvents batch", "the batch is empty")
		case len(evs) > maxBatch:
			return nil, true, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvents batch",
				"the batch holds %d events, at most %d are accepted", len(evs), maxBatch)
		}
		return evs, true, nil
	}
	if msg.ReadEncoding() == binding.EncodingUnknown {
		return nil, false, problem(http.StatusUnsupportedMediaType, "unsupported-media-type", "Not a CloudEvent",
			"send ce-* headers (binary mode) or Content-Type application/cloudevents+json (structured mode)")
	}
	e, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		return nil, false, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent", "%v", err)
	}
	return []event.Event{*e}, false, nil
}

// refuseDataPair answers 400 when a structured event (or any event of a
// batch) carries both data and data_base64. Bodies that are not JSON are
// left for the SDK to refuse with its own words.
func refuseDataPair(body []byte, batch bool) error {
	var objs []map[string]json.RawMessage
	if batch {
		if json.Unmarshal(body, &objs) != nil {
			return nil
		}
	} else {
		var one map[string]json.RawMessage
		if json.Unmarshal(body, &one) != nil {
			return nil
		}
		objs = append(objs, one)
	}
	isSet := func(raw json.RawMessage, ok bool) bool {
		return ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	}
	for i, o := range objs {
		d, hasData := o["data"]
		b, hasB64 := o["data_base64"]
		if isSet(d, hasData) && isSet(b, hasB64) {
			where := "the event"
			if batch {
				where = "event " + strconv.Itoa(i+1) + " of the batch"
			}
			return problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent",
				"%s has both data and data_base64; send one (data_base64 for binary data)", where)
		}
	}
	return nil
}
