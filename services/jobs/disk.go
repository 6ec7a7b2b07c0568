package jobs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs/jobsapi"
)

// The disk cap of a session's workspace. Each session gets its own ext4
// file system in an image file, loop-mounted, so the kernel itself refuses
// a write past the cap (ENOSPC), for the worker's file tools and for every
// process of every job alike, and no job can get around it by writing
// somewhere else it may write: the image holds both the workspace and the
// session's temporary directory.
//
//	<root>/.jobs/<tenant>/<session>/disk.img   the image (sparse: it takes
//	                                           what the files take)
//	<root>/.jobs/<tenant>/<session>/disk/      its mount (nosuid, nodev)
//	                                  ws/      bind-mounted on the workspace
//	                                  tmp/     the session's TMPDIR
//
// Why an image and not the alternatives: a tmpfs loses the workspace when
// the worker restarts; ext4 or XFS project quotas would cap a directory
// tree without a mount per session, but only where the file system under
// --root was made and mounted with them (prjquota), which a fresh machine's
// root file system is not; a worker that measures usage itself can only
// notice after the fact, while the write already went through. An image
// needs root (mount) and e2fsprogs, which a worker running as root on
// Debian has; it costs about 25 ms at a session's first use (mkfs and
// mount, measured here for 1 GiB and 100000 files), 4.7 MB of real disk
// for an empty image (its 4 MiB journal and metadata), and one loop device
// per session while the worker runs.
//
// Where that is not available (an ordinary user, a container without
// CAP_SYS_ADMIN, no mkfs.ext4 or loop devices) the worker has no disk cap:
// it says so at start and in its service metadata ("disk_cap"), and
// workspaces grow until the file system under --root is full.

// Disk cap defaults.
const (
	DefaultWorkspaceSize  = 1 << 30 // bytes
	DefaultWorkspaceFiles = 100_000
)

// MetadataDiskCap is the micro service metadata key saying whether and how
// workspaces are capped: "ext4 image per workspace: 1 GiB, 100000 files"
// or "none (why)".
const MetadataDiskCap = "disk_cap"

// diskCaps is the worker's disk cap machinery.
type diskCaps struct {
	size, files int64
	off         string // why there is no cap ("" when there is)
	turnedOff   bool   // by the configuration, not for want of a mechanism

	mu    sync.Mutex
	disks map[string]*disk // by session key: attached in this incarnation
}

// disk is one session's mounted image.
type disk struct {
	mnt, ws, tmp string
}

// newDiskCaps checks that the mechanism works here by making, mounting and
// unmounting a small image under root, so a worker never believes in a
// cap it cannot set: the first session would otherwise find out.
func newDiskCaps(root string, size, files int64) *diskCaps {
	d := &diskCaps{size: size, files: files, disks: map[string]*disk{}}
	if size <= 0 && files <= 0 {
		d.turnedOff = true
		d.off = "turned off by --workspace-size 0 and --workspace-files 0"
		return d
	}
	if d.size <= 0 {
		d.size = DefaultWorkspaceSize
	}
	if d.files <= 0 {
		d.files = DefaultWorkspaceFiles
	}
	if err := probeDisk(filepath.Join(root, ".jobs")); err != nil {
		d.off = err.Error()
	}
	return d
}

func (d *diskCaps) on() bool { return d.off == "" }

// String is the MetadataDiskCap value.
func (d *diskCaps) String() string {
	if !d.on() {
		return "none (" + d.off + ")"
	}
	return fmt.Sprintf("ext4 image per workspace: %s, %d files", proctree.Bytes(d.size), d.files)
}

// words say what the cap is and what to do, for a write the cap refused.
func (d *diskCaps) words() string {
	return fmt.Sprintf("the session's workspace is at its disk cap of %s and %d files (the jobs worker's --workspace-size and --workspace-files; "+
		"$TMPDIR counts too): writes fail with \"No space left on device\" until files are deleted", proctree.Bytes(d.size), d.files)
}

// probeDisk makes, mounts and unmounts an 8 MiB image in dir.
func probeDisk(dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("the worker is not root: mounting a loop device needs it")
	}
	if sbin("mkfs.ext4") == "" || sbin("mount") == "" {
		return errors.New("no mkfs.ext4 or mount (install e2fsprogs and mount)")
	}
	probe := filepath.Join(dir, ".disk-probe")
	_ = unmount(filepath.Join(probe, "mnt"))
	_ = os.RemoveAll(probe)
	// A leftover probe is removed by the next probe, just above.
	defer func() { _ = os.RemoveAll(probe) }()
	mnt := filepath.Join(probe, "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return fmt.Errorf("probe directory: %w", err)
	}
	img := filepath.Join(probe, "disk.img")
	if err := makeImage(img, 8<<20, 64); err != nil {
		return err
	}
	if err := mountImage(img, mnt); err != nil {
		return err
	}
	return unmount(mnt)
}

// makeImage makes a sparse image of size bytes holding an ext4 file system
// with room for files inodes, no blocks reserved for root (a job may run
// as root), and the worker as its root's owner.
func makeImage(img string, size, files int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("disk image %s: %w", img, err)
	}
	// The inodes of the image's own directories (root, ws, tmp, lost+found
	// before it is removed) come on top of the files a session may make.
	args := []string{"-q", "-F", "-b", "4096", "-m", "0", "-N", strconv.FormatInt(files+16, 10),
		"-E", fmt.Sprintf("root_owner=%d:%d", os.Getuid(), os.Getgid())}
	if size >= 64<<20 {
		// The journal is kept (a workspace outlives a crash of the worker)
		// but at its smallest, 4 MiB: mkfs's own choice for 1 GiB, 32 MiB,
		// would be written out in every session's image before it holds a
		// file. A small image gets mkfs's choice, which is smaller.
		args = append(args, "-J", "size=4")
	}
	out, err := exec.Command(sbin("mkfs.ext4"), append(args, img)...).CombinedOutput()
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", img, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sbin finds a system program on PATH or in the sbin directories, which a
// service's PATH may leave out; "" when there is none.
func sbin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// mountImage loop-mounts img on mnt, nosuid and nodev: a job must not make
// a set-uid program or a device node that works.
func mountImage(img, mnt string) error {
	out, err := exec.Command(sbin("mount"), "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", img, mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w: %s", img, mnt, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unmount unmounts dir, detaching it lazily when it is busy (a process
// the kill has not reaped yet); a dir that is no mount point is left.
func unmount(dir string) error {
	if !isMountPoint(dir) {
		return nil
	}
	err := syscall.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is the root of a mount: it lies on
// another device than its parent (the image's file system, or its bind
// mount, is never the one --root is on).
func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(dir, &st) != nil || syscall.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// errUncapped is attach's answer for a workspace that predates the cap.
var errUncapped = errors.New("the workspace existed before its disk cap")

// attach mounts the session's image (making it the first time) and binds
// its ws directory on the workspace, so that the workspace opened next is
// the image's. A workspace directory that already holds files and has no
// image (made before the worker capped workspaces, or by hand) is left
// as it is, uncapped: mounting over it would hide its files.
func (d *diskCaps) attach(root, sid, wsDir string) (*disk, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if k := d.disks[sid]; k != nil {
		return k, nil
	}
	tenant, session := splitSession(sid)
	base := filepath.Join(root, ".jobs", tenant, session)
	k := &disk{mnt: filepath.Join(base, "disk"), ws: wsDir}
	k.tmp = filepath.Join(k.mnt, "tmp")
	img := filepath.Join(base, "disk.img")
	for _, dir := range []string{k.mnt, wsDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("jobs: disk of %s: %w", sid, err)
		}
	}
	fresh := false
	if !isMountPoint(k.mnt) {
		if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
			if !isMountPoint(wsDir) && !emptyDir(wsDir) {
				return nil, errUncapped
			}
			if err := makeImage(img, d.size, d.files); err != nil {
				return nil, fmt.Errorf("jobs: disk of %s: %w", sid, err)
			}
		}
		if err := mountImage(img, k.mnt); err != nil {
			return nil, fmt.Errorf("jobs: disk of %s: %w", sid, err)
		}
		fresh = true
	}
	_ = os.Remove(filepath.Join(k.mnt, "lost+found"))
	if fresh {
		// The temporary directory starts empty in each incarnation, as
		// the uncapped one does (clearTmpDirs).
		_ = os.RemoveAll(k.tmp)
	}
	for _, dir := range []string{filepath.Join(k.mnt, "ws"), k.tmp} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("jobs: disk of %s: %w", sid, err)
		}
	}
	if err := os.Chmod(k.tmp, 0o700); err != nil {
		return nil, fmt.Errorf("jobs: disk of %s: %w", sid, err)
	}
	if !isMountPoint(wsDir) {
		if err := syscall.Mount(filepath.Join(k.mnt, "ws"), wsDir, "", syscall.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("jobs: disk of %s: bind its workspace on %s: %w", sid, wsDir, err)
		}
	}
	d.disks[sid] = k
	return k, nil
}

// tmpOf is the session's temporary directory inside its image, when it has
// one.
func (d *diskCaps) tmpOf(sid string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if k := d.disks[sid]; k != nil {
		return k.tmp, true
	}
	return "", false
}

// capped reports whether the session's workspace is on its image.
func (d *diskCaps) capped(sid string) bool {
	_, ok := d.tmpOf(sid)
	return ok
}

// detachAll unmounts every session's workspace and image (the worker
// stops: its processes are gone). A restarted worker mounts them again at
// each session's next use.
func (d *diskCaps) detachAll() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for sid, k := range d.disks {
		for _, dir := range []string{k.ws, k.mnt} {
			if err := unmount(dir); err != nil {
				errs = append(errs, err)
			}
		}
		delete(d.disks, sid)
	}
	return errs
}

func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// full reports whether the file system under dir has no room left: less
// than one MiB, or no inode.
func full(dir string) bool {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < 1<<20 || st.Ffree == 0
}

// diskNote is the end note of a session's command: the cap's words when it
// ended with the session's disk full, or after a write the cap refused
// (what the shell printed says so); nil when the session has no cap.
func (w *Worker) diskNote(sid string) func(int, string) string {
	if !w.disks.capped(sid) {
		return nil
	}
	k, _ := w.disks.tmpOf(sid)
	return func(_ int, out string) string {
		if strings.Contains(out, "No space left on device") || strings.Contains(out, "Disk quota exceeded") || full(k) {
			return "[jobs] " + w.disks.words()
		}
		return ""
	}
}

// diskFull names the cap in a file tool's refusal the kernel gave for it.
func (w *Worker) diskFull(err error) error {
	if err == nil || !(errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return err
	}
	msg := err.Error() + ": " + w.disks.words()
	if !w.disks.on() {
		msg = err.Error() + ": the file system of the jobs worker's --root is full"
	}
	return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: msg}
}
