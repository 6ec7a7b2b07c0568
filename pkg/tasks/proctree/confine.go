package proctree

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"jetway/pkg/tasks/proctree/confspec"
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

// Confinement is what a tree may reach (confspec.Confinement), enforced by
// the confinement helper on itself just before it execs the command, so
// every process of the tree inherits it and none can lift it: Landlock
// for the file system, TCP and, on kernels with ABI 6 or newer, signals
// and abstract unix sockets (the tree cannot signal, nor connect to the
// abstract sockets of, processes outside it); a seccomp filter for socket
// families; a file system view of its own where the host allows one (see
// ViewAvailable). Where the worker runs as root the helper drops every
// capability as well, since a root with capabilities has ways past a file
// system rule set (loading a module, rebooting, reconfiguring the network).
type Confinement = confspec.Confinement

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
