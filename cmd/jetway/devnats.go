package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"jetway/pkg/auth"
)

// devNATSTokenFile is the file in the data directory holding the dev bus's
// one credential. Jobs are confined to their workspace and cannot read it,
// so a job's shell that finds the bus on loopback still cannot use it.
const devNATSTokenFile = "nats.token"

// devNATSToken returns the dev bus's token, making it on first start. It is
// kept across restarts so that clients configured once keep working.
func devNATSToken(dataDir string) (token, path string, err error) {
	path = filepath.Join(dataDir, devNATSTokenFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, path, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", path, fmt.Errorf("dev NATS token: %w", err)
	}
	if token, err = auth.NewDevBusToken(); err != nil {
		return "", path, fmt.Errorf("dev NATS token: %w", err)
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", path, fmt.Errorf("dev NATS token: %w", err)
	}
	return token, path, nil
}
