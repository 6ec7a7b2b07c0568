//go:build !amd64 && !arm64

package seccomp

// No filter is written for other architectures: a confined command that
// needs one does not run (Filter says why).
const (
	nativeArch       = 0
	compatArch       = 0
	x32Bit           = 0
	sysSocket        = 0
	sysIOUringSetup  = 0
	compatSocketcall = 0
	compatSocket     = 0
)
