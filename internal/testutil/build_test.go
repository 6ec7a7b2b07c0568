package testutil

import (
	"os"
	"testing"
)

// smallPkg is a small main package of this module to build.
const smallPkg = "jetway/deploy/certs/gen"

// TestBinary_a_second_test_binary_reuses_the_build is what saves the
// suite its builds: another test binary (a fresh memo here) asking for
// the same package of the same tree gets the same file, not a new build.
func TestBinary_a_second_test_binary_reuses_the_build(t *testing.T) {
	first := Binary(t, smallPkg, "-s -w")
	fi, err := os.Stat(first)
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("build %s: %v, mode %v", first, err, fi.Mode())
	}
	buildsMu.Lock()
	builds = map[string]*build{}
	buildsMu.Unlock()
	again := Binary(t, smallPkg, "-s -w")
	if again != first {
		t.Fatalf("a second test binary got %s, the first %s", again, first)
	}
	fi2, err := os.Stat(again)
	if err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("the build was made again (%v, modified %v then %v)", err, fi.ModTime(), fi2.ModTime())
	}
}

// TestSourceKey_tells_packages_and_flags_apart: a build with other flags
// or of another package is another binary.
func TestSourceKey_tells_packages_and_flags_apart(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	key := func(pkg, flags string) string {
		k, err := sourceKey(root, pkg, flags)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a := key(smallPkg, "")
	if a != key(smallPkg, "") {
		t.Errorf("the same sources hash to two keys")
	}
	if a == key(smallPkg, "-s -w") {
		t.Errorf("other flags hash to the same key")
	}
	if a == key("jetway/internal/mcptest/mcptestserver", "") {
		t.Errorf("another package hashes to the same key")
	}
}

func TestBinaryName_is_the_name_go_build_gives(t *testing.T) {
	for pkg, want := range map[string]string{
		"jetway/cmd/jetway":                 "jetway",
		"github.com/nats-io/nats-server/v2": "nats-server",
		"example.com/tool/v10":              "tool",
		"example.com/v2ray":                 "v2ray",
	} {
		if got := binaryName(pkg); got != want {
			t.Errorf("binaryName(%s) = %s, want %s", pkg, got, want)
		}
	}
}
