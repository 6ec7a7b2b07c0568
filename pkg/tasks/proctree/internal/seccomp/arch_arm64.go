package seccomp

import "golang.org/x/sys/unix"

// arm64, with the 32-bit ARM compat ABI.
const (
	nativeArch       = unix.AUDIT_ARCH_AARCH64
	compatArch       = unix.AUDIT_ARCH_ARM
	x32Bit           = 0
	sysSocket        = unix.SYS_SOCKET
	sysIOUringSetup  = 425
	compatSocketcall = 102
	compatSocket     = 281
)
