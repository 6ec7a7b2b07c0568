package main

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() { addCommand(newVersionCmd) }

func newVersionCmd(*globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the jetway version and the Go version it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "jetway %s (%s, %s/%s)\n",
				version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// serviceVersion is version as the NATS micro services state it. micro
// takes only SemVer, so a build of an untagged commit ("48b7dc1", or "dev"
// without -ldflags) would show as 0.0.0 in `nats micro ls`; it becomes a
// pre-release of 0.0.0 that still names the build.
var serviceVersion = semverOf(version)

// semverOf is v without its leading "v" when that is SemVer, else
// 0.0.0-g<v> with what SemVer does not allow replaced by "-" (the "g", as
// git describe writes it, keeps an all-digit hash a valid identifier).
func semverOf(v string) string {
	s := strings.TrimPrefix(v, "v")
	if semverRE.MatchString(s) {
		return s
	}
	clean := strings.Map(func(r rune) rune {
		if r == '-' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' {
			return r
		}
		return '-'
	}, v)
	return "0.0.0-g" + clean
}

// semverRE is SemVer 2.0 as semver.org gives it.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)
