package seccomp

import "golang.org/x/sys/unix"

// x86-64, with the i386 compat ABI (int 0x80) and x32 (native arch, the
// call numbers with bit 30 set).
const (
	nativeArch       = unix.AUDIT_ARCH_X86_64
	compatArch       = unix.AUDIT_ARCH_I386
	x32Bit           = 0x40000000
	sysSocket        = unix.SYS_SOCKET
	sysIOUringSetup  = 425
	compatSocketcall = 102
	compatSocket     = 359
)
