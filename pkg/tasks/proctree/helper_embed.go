//go:build jetway_confiner

package proctree

import _ "embed"

// embeddedHelper is the static helper `make build` compiled into
// confiner/jetway-confine just before it built this binary with the
// jetway_confiner tag.
//
//go:embed confiner/jetway-confine
var embeddedHelper []byte

func helperBytes() ([]byte, error) { return embeddedHelper, nil }
