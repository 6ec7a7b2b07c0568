package proctree

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// Rule sets, and the view's steps, are kept for reuse. Making a rule set
// opens and adds every path of a confinement (a hundred-odd, most of them
// /etc's entries), which cost more than the rest of a job's start
// together, and the view's steps look at each path it binds; a session's
// jobs all have the same confinement. A rule set holds inodes, so one is
// reused only while its paths still name the inodes it was made with: the
// read-write directories (a workspace made anew) are looked at at every
// reuse, every path (an /etc file replaced by a rename) at the first reuse
// a second or more after the last such look, since a stat of each of
// them costs half of making the rule set again. A file replaced in the
// system directories is thus unreadable to new jobs for a second at most;
// a rule set never reaches an inode its paths did not name when it was
// made.

// rulesetCacheSize bounds the rule sets kept (a descriptor each): enough
// for the sessions a worker runs jobs for at once.
const rulesetCacheSize = 64

// rulesetRecheck is how long a rule set is reused before all its paths are
// looked at again.
const rulesetRecheck = time.Second

type cachedRuleset struct {
	key   string
	fd    int
	flags uint32
	view  []byte   // the view's steps; nil without a view
	ns    heldView // the view made once and kept; unset without
	ids   []fileID // of every path, in pathIDs order
	rw    []fileID // of the read-write directories
	at    time.Time
}

// fileID names an inode of a mount: a file system mounted again (a
// workspace's disk image) has the same device and inode numbers but new
// inodes in the kernel, which only the mount's id tells apart. The zero
// value is a path that did not exist.
type fileID struct{ dev, ino, mnt uint64 }

var rulesets struct {
	mu   sync.Mutex
	list []*cachedRuleset // most recently used last
}

// confinementParts are what compile needs of a confinement: the view's
// steps (nil without a view) and a descriptor of its rule set, the
// caller's to close (a duplicate of the one the cache keeps).
type confinementParts struct {
	view  []byte
	fd    int
	flags uint32
	// ns: descriptors of the kept view's namespaces, the caller's to
	// close; mnt is -1 when the helper is to build the view itself from
	// the steps in view.
	ns heldView
}

// partsOf is c's parts, from the cache while they hold.
func partsOf(c *confspec.Confinement) (confinementParts, error) {
	key := cacheKey(c)
	rw := statIDs(c.ReadWrite)
	now := time.Now()
	rulesets.mu.Lock()
	defer rulesets.mu.Unlock()
	if i := slices.IndexFunc(rulesets.list, func(r *cachedRuleset) bool { return r.key == key }); i >= 0 {
		r := rulesets.list[i]
		rulesets.list = append(slices.Delete(rulesets.list, i, i+1), r)
		fresh := slices.Equal(r.rw, rw)
		if fresh && now.Sub(r.at) >= rulesetRecheck {
			fresh, r.at = slices.Equal(r.ids, pathIDs(c)), now
		}
		if fresh {
			return r.parts()
		}
		rulesets.list = rulesets.list[:len(rulesets.list)-1]
		r.close() // its paths moved on; made again below
	}
	ids := pathIDs(c)
	var view []byte
	if c.View {
		v := &program{}
		if err := v.view(c); err != nil {
			return confinementParts{}, fmt.Errorf("proctree: the file system view: %w", err)
		}
		view = v.b
	}
	fd, flags, err := landlockRuleset(c)
	if err != nil {
		return confinementParts{}, err
	}
	ns := noView
	if view != nil {
		// Where the view cannot be kept, every start builds it (the
		// steps in view), as it would without the cache.
		ns, _ = holdView(view)
	}
	if len(rulesets.list) == rulesetCacheSize {
		rulesets.list[0].close() // the least recently used
		rulesets.list = slices.Delete(rulesets.list, 0, 1)
	}
	r := &cachedRuleset{key: key, fd: fd, flags: flags, view: view, ns: ns, ids: ids, rw: rw, at: now}
	rulesets.list = append(rulesets.list, r)
	return r.parts()
}

func (r *cachedRuleset) parts() (confinementParts, error) {
	d, err := unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return confinementParts{}, fmt.Errorf("proctree: landlock rule set: %w", err)
	}
	ns, err := r.ns.dup()
	if err != nil {
		_ = unix.Close(d)
		return confinementParts{}, fmt.Errorf("proctree: the kept view: %w", err)
	}
	return confinementParts{view: r.view, fd: d, flags: r.flags, ns: ns}, nil
}

// close releases the rule set and the kept view.
func (r *cachedRuleset) close() {
	_ = unix.Close(r.fd)
	r.ns.close()
}

// cacheKey names c's contents: every field, each string preceded by its
// length, so no two confinements share a key. It is made at every start,
// and JSON took 14 µs of one for the hundred-odd paths; this takes a
// tenth of that. confcache_test.go holds it to every field of
// confspec.Confinement.
func cacheKey(c *confspec.Confinement) string {
	n := 16 + len(c.Network)
	lists := [][]string{c.ReadWrite, c.ReadOnlyDirs, c.ReadOnlyFiles, c.Devices}
	for _, l := range lists {
		for _, s := range l {
			n += len(s) + 8
		}
	}
	b := make([]byte, 0, n)
	str := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(append(b, ':'), s...)
	}
	for _, l := range lists {
		b = strconv.AppendInt(b, int64(len(l)), 10)
		b = append(b, '|')
		for _, s := range l {
			str(s)
		}
	}
	str(c.Network)
	if c.View {
		b = append(b, 'v')
	}
	return string(b)
}

// pathIDs stats every path of c's rules, following links as the rule set
// does when it opens them.
func pathIDs(c *confspec.Confinement) []fileID {
	var ids []fileID
	for _, list := range [][]string{c.ReadOnlyDirs, c.ReadOnlyFiles, c.Devices, c.ReadWrite} {
		ids = append(ids, statIDs(list)...)
	}
	return ids
}

// statIDs names what each path is now; the mount's id is the unique one
// where the kernel has it (Linux 6.8), else one that a later mount may
// reuse.
func statIDs(paths []string) []fileID {
	ids := make([]fileID, len(paths))
	for i, p := range paths {
		var st unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_INO|unix.STATX_MNT_ID|unix.STATX_MNT_ID_UNIQUE, &st) == nil {
			ids[i] = fileID{unix.Mkdev(st.Dev_major, st.Dev_minor), st.Ino, st.Mnt_id}
		}
	}
	return ids
}
