package handover

import (
	"fmt"
	"strings"
)

// enumName returns the stored name of v, or "" when v is not one of names.
func enumName[T ~int](names []string, v T) string {
	if v < 0 || int(v) >= len(names) {
		return ""
	}
	return names[v]
}

// marshalEnum is the MarshalText of every enum here. An unnamed value is an
// error rather than a number, so that a bug never reaches a store as data
// nobody can read back.
func marshalEnum[T ~int](what string, names []string, v T) ([]byte, error) {
	name := enumName(names, v)
	if name == "" {
		return nil, fmt.Errorf("handover: cannot store %s %d: not a known value", what, int(v))
	}
	return []byte(name), nil
}

// parseEnum is the UnmarshalText of every enum here. It names the allowed
// values, because the likeliest cause of a bad one is a hand-written config.
func parseEnum[T ~int](what string, names []string, s string) (T, error) {
	for i, name := range names {
		if name != "" && name == s {
			return T(i), nil
		}
	}
	var allowed []string
	for _, name := range names {
		if name != "" {
			allowed = append(allowed, fmt.Sprintf("%q", name))
		}
	}
	return 0, fmt.Errorf("handover: unknown %s %q (want one of %s)", what, s, strings.Join(allowed, ", "))
}

// stringEnum is the String of every enum here: the stored name, or a
// diagnostic for a value outside the list.
func stringEnum[T ~int](what string, names []string, v T) string {
	if name := enumName(names, v); name != "" {
		return name
	}
	return fmt.Sprintf("%s(%d)", what, int(v))
}
