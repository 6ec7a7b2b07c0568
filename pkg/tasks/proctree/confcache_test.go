package proctree

import (
	"reflect"
	"testing"

	"jetway/pkg/tasks/proctree/confspec"
)

// The rule set cache's key tells every field of a confinement apart: a
// field the key left out would hand one confinement's rule set to
// another. Each field is changed in turn (a new field of another kind
// fails the test until the key covers it), and strings that would run
// together without their lengths give different keys.
func TestCacheKey_tells_every_field_apart(t *testing.T) {
	base := confspec.Confinement{
		ReadWrite: []string{"/w"}, ReadOnlyDirs: []string{"/usr"}, ReadOnlyFiles: []string{"/etc/hosts"},
		Devices: []string{"/dev/null"}, Network: "none",
	}
	seen := map[string]string{cacheKey(&base): "base"}
	v := reflect.TypeOf(base)
	for i := range v.NumField() {
		c := base
		f := reflect.ValueOf(&c).Elem().Field(i)
		switch f.Kind() {
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.ValueOf("/x")))
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		default:
			t.Fatalf("field %s is a %s, which cacheKey does not know", v.Field(i).Name, f.Kind())
		}
		k := cacheKey(&c)
		if other, dup := seen[k]; dup {
			t.Errorf("changing %s gives the key of %s", v.Field(i).Name, other)
		}
		seen[k] = v.Field(i).Name
	}
	a := confspec.Confinement{ReadWrite: []string{"/a", "/b"}}
	b := confspec.Confinement{ReadWrite: []string{"/a"}, ReadOnlyDirs: []string{"/b"}}
	c := confspec.Confinement{ReadWrite: []string{"/a/b"}}
	if cacheKey(&a) == cacheKey(&b) || cacheKey(&a) == cacheKey(&c) || cacheKey(&b) == cacheKey(&c) {
		t.Error("paths moved between lists or joined give the same key")
	}
}
