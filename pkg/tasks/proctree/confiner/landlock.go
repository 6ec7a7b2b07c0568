package main

import (
	"errors"
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// landlockSelf restricts this thread to c's file system rules, its TCP
// rules and, from ABI 6, the signal and abstract socket scopes. Every file
// system right of ABI 5 is handled; network rights by mode: none handles
// TCP bind and connect with no port allowed, outbound handles bind alone,
// all handles none. Best effort lowers it to what the kernel knows (the
// worker refuses confinement below ABI 3; below ABI 4 the TCP rules are
// the seccomp filter's alone).
func landlockSelf(c *confspec.Confinement) error {
	var net landlock.AccessNetSet
	switch c.Network {
	case "", confspec.NetworkNone:
		net = landlock.AccessNetSet(ll.AccessNetBindTCP | ll.AccessNetConnectTCP)
	case confspec.NetworkOutbound:
		net = landlock.AccessNetSet(ll.AccessNetBindTCP)
	case confspec.NetworkAll:
	default:
		return fmt.Errorf("network mode %q is none of none, outbound, all", c.Network)
	}
	cfg := landlock.Config{
		HandledAccessFS:  landlock.V5.HandledAccessFS,
		HandledAccessNet: net,
		Scoped:           landlock.V6.Scoped,
	}.BestEffort()
	rules := []landlock.Rule{
		landlock.RODirs(c.ReadOnlyDirs...).IgnoreIfMissing(),
		landlock.ROFiles(c.ReadOnlyFiles...).IgnoreIfMissing(),
		landlock.RWFiles(c.Devices...).IgnoreIfMissing(),
		landlock.RWDirs(c.ReadWrite...).WithRefer(),
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("landlock rule set: %w", err)
	}
	if fd < 0 {
		// Best effort fell back to restricting nothing: fail closed.
		return errors.New("landlock rule set: the kernel offers nothing to restrict")
	}
	// The restriction holds once made; the rule set's descriptor is
	// no longer needed, closed or not.
	defer func() { _ = unix.Close(fd) }()
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
