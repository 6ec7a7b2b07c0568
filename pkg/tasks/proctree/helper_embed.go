//go:build jetway_confiner

package proctree

import (
	_ "embed"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// embeddedHelper is the static helper `make build` compiled into
// confiner/jetway-confine just before it built this binary with the
// jetway_confiner tag.
//
//go:embed confiner/jetway-confine
var embeddedHelper []byte

func helperBytes() ([]byte, error) { return embeddedHelper, nil }

// releaseHelperBytes gives back the pages of the binary the copy into the
// memfd touched (about 2 MiB of the worker's RSS): they are never read
// again, and a read would fault them back in from the file.
func releaseHelperBytes() {
	page := uintptr(os.Getpagesize())
	base := unsafe.Pointer(unsafe.SliceData(embeddedHelper))
	addr := uintptr(base)
	start := (addr+page-1)&^(page-1) - addr // offsets into the slice
	end := (addr+uintptr(len(embeddedHelper)))&^(page-1) - addr
	if end > start {
		_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(base, start)), end-start), unix.MADV_DONTNEED)
	}
}

// useHelperFile is for tests of binaries without the helper inside; this
// one has it.
func useHelperFile(string) {}

// HelperFile writes the embedded helper to a file of its own and returns
// its path (for tests that hand it to another process).
func HelperFile() (string, error) {
	f, err := os.CreateTemp("", helperName+"-")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(embeddedHelper); err != nil {
		f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}
