package wirecache

import (
	"encoding/json"
	"fmt"
)

// OpenBody starts a request body: the SDK's encoding of params (which
// hold none of what the provider splices in already encoded), opened with
// "stream":true when the call streams, without its closing brace, with
// room for extra more bytes. The caller adds its fields (AppendField) and
// closes it.
//
// The SDK would set "stream" on the finished body (sjson), which finds a
// first key at once but has to read a body without it to its end before
// appending: a whole history, every call.
func OpenBody(params any, stream bool, extra int) ([]byte, error) {
	head, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return OpenBodyFrom(head, stream, extra)
}

// OpenBodyFrom is OpenBody from the params' encoding, head, for a
// provider that keeps it (it only reads head).
func OpenBodyFrom(head []byte, stream bool, extra int) ([]byte, error) {
	if len(head) < 2 || head[len(head)-1] != '}' {
		return nil, fmt.Errorf("encode request: not a JSON object: %.40s", head)
	}
	body := make([]byte, 0, len(head)+extra+16)
	body = append(body, '{')
	if stream {
		body = append(body, `"stream":true`...)
	}
	if fields := head[1 : len(head)-1]; len(fields) > 0 {
		body = AppendField(body, "")
		body = append(body, fields...)
	}
	return body, nil
}

// AppendField appends the key name to a body OpenBody opened, after a
// comma when a field came before it; the caller appends the value. An
// empty name appends only the comma.
func AppendField(body []byte, name string) []byte {
	if len(body) > 1 {
		body = append(body, ',')
	}
	if name == "" {
		return body
	}
	body = append(body, '"')
	body = append(body, name...)
	return append(body, `":`...)
}
