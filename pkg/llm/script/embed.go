package script

import (
	_ "embed"
	"fmt"
)

//go:embed demo.json
var demoJSON []byte

// Demo is the script shipped in demo.json, built into the binary so `make
// run` works from any directory without a model: it starts a background
// job with the shell tool, keeps working, ends its turn, and reports the
// job's result when the exit notice arrives.
func Demo() (*Provider, error) {
	p, err := Parse(demoJSON)
	if err != nil {
		return nil, fmt.Errorf("script demo.json: %w", err)
	}
	p.name = "script demo.json (deterministic, no model)"
	return p, nil
}
