package tasks

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Files keeps task output files under Dir, one directory per session, and
// names them by refs ("out:<session>:<hex>") the model can pass back to
// other tools without seeing a host path.
type Files struct {
	Dir string
}

var (
	validSession = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	validHex     = regexp.MustCompile(`^[0-9a-f]{6,32}$`)
)

// Output is a Config.Output: a fresh file name and its ref.
func (f Files) Output(sessionID, taskID string) (path, ref string, err error) {
	if !validSession.MatchString(sessionID) {
		return "", "", fmt.Errorf("tasks: session id %q is not 1-64 of [A-Za-z0-9_-]", sessionID)
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("tasks: output name: %w", err)
	}
	h := hex.EncodeToString(b[:])
	return filepath.Join(f.Dir, sessionID, h+".out"), "out:" + sessionID + ":" + h, nil
}

// Resolve returns the path of the output file named by ref.
func (f Files) Resolve(ref string) (string, error) {
	parts := strings.Split(ref, ":")
	if len(parts) != 3 || parts[0] != "out" || !validSession.MatchString(parts[1]) || !validHex.MatchString(parts[2]) {
		return "", fmt.Errorf("tasks: %q is not an output ref (out:<session>:<hex>)", ref)
	}
	return filepath.Join(f.Dir, parts[1], parts[2]+".out"), nil
}
