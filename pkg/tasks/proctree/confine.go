package proctree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// MinLandlockABI is the oldest Landlock ABI that counts as confinement.
// ABI 1 refuses every rename or link between directories (git's object
// store needs them), and before ABI 3 truncate(2) is not checked, so a job
// could empty any file the worker's user can write, outside its tree too.
// ABI 3 arrived with Linux 6.2.
const MinLandlockABI = 3

// LandlockABI is the kernel's Landlock ABI version; 0 when the kernel has no
// Landlock or it is disabled at boot.
func LandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Confinement is what a tree may reach of the file system, enforced with
// Landlock by the shim on itself just before it execs the command, so
// every process of the tree inherits it and none can lift it. Everything
// not listed is refused: reading, writing, listing and executing (stat of
// a known path is not, Landlock does not govern it). On kernels with
// Landlock ABI 6 or newer the tree is also scoped: it cannot signal, nor
// connect to the abstract unix sockets of, processes outside it. Where the
// worker runs as root the shim drops every capability as well, since a
// root with capabilities has ways past a file system rule set (loading a
// module, rebooting, reconfiguring the network).
type Confinement struct {
	// ReadWrite are directories the tree may read, write, create in,
	// execute from, and rename or link within and between.
	ReadWrite []string `json:"rw,omitempty"`
	// ReadOnlyDirs and ReadOnlyFiles may be read and executed. A missing
	// one is skipped.
	ReadOnlyDirs  []string `json:"rod,omitempty"`
	ReadOnlyFiles []string `json:"rof,omitempty"`
	// Devices are files (device nodes such as /dev/null) the tree may read
	// and write, without ioctls. A missing one is skipped.
	Devices []string `json:"dev,omitempty"`
}

// landlockConfig is every file system right of ABI 5 and, from ABI 6, the
// signal and abstract socket scopes. Network rights stay unhandled: jobs
// fetch modules and clone repositories. Best effort lowers it to what the
// kernel knows; the worker refuses confinement below MinLandlockABI.
var landlockConfig = landlock.Config{
	HandledAccessFS: landlock.V5.HandledAccessFS,
	Scoped:          landlock.V6.Scoped,
}.BestEffort()

// confine restricts the calling thread, which is about to exec, to c. It
// runs in the shim with the OS thread locked: a Landlock domain belongs to
// the thread, and execve from it makes it the new program's. The shim then
// sets the rlimits and drops the capabilities (dropCapabilities), in that
// order, since raising a hard limit may need one.
func confine(c *Confinement) error {
	rules := []landlock.Rule{
		landlock.RODirs(c.ReadOnlyDirs...).IgnoreIfMissing(),
		landlock.ROFiles(c.ReadOnlyFiles...).IgnoreIfMissing(),
		landlock.RWFiles(c.Devices...).IgnoreIfMissing(),
		landlock.RWDirs(c.ReadWrite...).WithRefer(),
	}
	fd, flags, err := landlockConfig.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("landlock rule set: %w", err)
	}
	if fd < 0 {
		// Best effort fell back to restricting nothing: fail closed.
		return errors.New("landlock rule set: the kernel offers nothing to restrict")
	}
	defer unix.Close(fd)
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}

// dropCapabilities empties this thread's capability sets, so the command
// runs without any, root or not. A thread that holds CAP_SETPCAP (root)
// empties the bounding set too, so an exec gains none back (a root's exec
// takes the bounding set as its permitted set). One without it (an
// ordinary user, the usual case) has nothing to drop, and no_new_privs
// already keeps set-uid programs and file capabilities from adding any.
// Like confine, it holds for the thread that execs.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data == [2]unix.CapUserData{} {
		return nil
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := 0; c <= 63; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				if errors.Is(err, unix.EINVAL) {
					break // past the last capability this kernel knows
				}
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// sensitiveEtc are entries of /etc that hold secrets on common systems:
// password hashes, sudo rules, the host's ssh keys (the ssh client's
// configuration stays readable), TLS and VPN private keys, cluster and
// container daemon credentials, stored network and mail passwords. A
// worker running as root reads a 0600 file of root's even without
// capabilities, so only the rule set keeps these from its jobs; a worker
// running as an ordinary user has file permissions on its side as well.
var sensitiveEtc = map[string]bool{
	"shadow": true, "shadow-": true, "gshadow": true, "gshadow-": true,
	"sudoers": true, "sudoers.d": true, "ssh": true, "ssl": true, "pki": true,
	"security": true, "credstore": true, "credstore.encrypted": true,
	"jetway": true, "letsencrypt": true, "wireguard": true, "openvpn": true,
	"ipsec.secrets": true, "ipsec.d": true, "krb5.keytab": true,
	"kubernetes": true, "docker": true, "containerd": true, "ceph": true,
	"NetworkManager": true, "netplan": true, "ppp": true, "libvirt": true,
	"mysql": true, "postgresql": true, "exim4": true, "msmtprc": true,
	"davfs2": true, "rancher": true, "k3s": true, "cni": true,
}

var (
	systemOnce              sync.Once
	systemDirs, systemFiles []string
	systemDevices           = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
	systemProcFiles         = []string{"/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/loadavg", "/proc/uptime", "/proc/version", "/proc/filesystems"}
	systemReadOnlyDirs      = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys/devices/system/cpu"}
	etcKept                 = []string{"/etc/ssh/ssh_config", "/etc/ssh/ssh_config.d", "/etc/ssh/ssh_known_hosts", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/pki/tls/certs", "/etc/pki/ca-trust", "/etc/pki/tls/openssl.cnf"}
)

// SystemConfinement is the read-only part of a job's confinement: the
// directories a shell and ordinary tools need (/usr, /bin, /sbin, /lib*),
// /etc without its secrets (see sensitiveEtc), a few system-wide /proc
// files (cpuinfo, meminfo, stat, loadavg, uptime, version, filesystems: no
// process's directory), the CPU topology, and the harmless devices. It is
// computed once; add the tree's own read-write directories to a copy.
func SystemConfinement() Confinement {
	systemOnce.Do(func() {
		ents, _ := os.ReadDir("/etc")
		paths := make([]string, 0, len(ents)+len(etcKept))
		for _, e := range ents {
			if !sensitiveEtc[e.Name()] {
				paths = append(paths, filepath.Join("/etc", e.Name()))
			}
		}
		paths = append(paths, etcKept...)
		for _, p := range paths {
			real, err := filepath.EvalSymlinks(p)
			if err != nil || strings.HasPrefix(real, "/proc/") {
				continue // dangling, or /etc/mtab's way into /proc
			}
			fi, err := os.Stat(real)
			inEtcOrUsr := strings.HasPrefix(real, "/etc/") || strings.HasPrefix(real, "/usr/")
			switch {
			case err != nil:
			case fi.IsDir() && inEtcOrUsr:
				systemDirs = append(systemDirs, real)
			case fi.IsDir():
				// A link out of /etc to a directory elsewhere (/run/...)
				// would open all of it: left out.
			default:
				systemFiles = append(systemFiles, real) // resolv.conf in /run, say
			}
		}
		systemDirs = append(systemDirs, systemReadOnlyDirs...)
		systemFiles = append(systemFiles, systemProcFiles...)
		sort.Strings(systemDirs)
		sort.Strings(systemFiles)
	})
	return Confinement{
		ReadOnlyDirs:  append([]string(nil), systemDirs...),
		ReadOnlyFiles: append([]string(nil), systemFiles...),
		Devices:       append([]string(nil), systemDevices...),
	}
}

// AddReadOnly adds paths (directories or files, symlinks resolved) to c's
// read-only part; a path that does not exist is an error, to catch a
// mistyped flag.
func (c *Confinement) AddReadOnly(paths ...string) error {
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("proctree: read-only path %s: %w", p, err)
		}
		real, err = filepath.Abs(real)
		if err != nil {
			return fmt.Errorf("proctree: read-only path %s: %w", p, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("proctree: read-only path %s: %w", p, err)
		}
		if fi.IsDir() {
			c.ReadOnlyDirs = append(c.ReadOnlyDirs, real)
		} else {
			c.ReadOnlyFiles = append(c.ReadOnlyFiles, real)
		}
	}
	return nil
}

// Overlaps reports the read-only path of c that contains dir or lies
// inside it, if any: a worker whose workspaces lie below a read-only path,
// or one given a path inside its root to read, would let jobs read other
// sessions' workspaces.
func (c *Confinement) Overlaps(dir string) (string, bool) {
	within := func(p, d string) bool {
		return p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/")
	}
	for _, p := range append(append([]string(nil), c.ReadOnlyDirs...), c.ReadOnlyFiles...) {
		if within(dir, p) || within(p, dir) {
			return p, true
		}
	}
	return "", false
}
