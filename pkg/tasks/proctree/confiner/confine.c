/*
 * jetway-confine: the jobs worker's confinement helper, the process every
 * confined or limited command starts as.
 *
 * It is C, static, and knows nothing of policy. The worker (Go,
 * pkg/tasks/proctree/program.go) decides everything and compiles it into
 * a program of steps; this helper runs the steps in order and the last one
 * execs the command. It is C because a Go program pays its runtime's start
 * and a multi-threaded exec on every job (about 1.2 ms of a job's start,
 * measured), and static because a dynamic loader would read LD_AUDIT,
 * LD_PRELOAD, GCONV_PATH and the like before anything is confined.
 *
 * It uses no C library either (built with -nostdlib -fno-stack-protector):
 * its own _start, system calls made directly, the few string functions it
 * needs below. A static glibc's start-up alone (its TLS, IRELATIVE
 * relocations and stdio, about 26 page faults) cost 0.25-0.35 ms of every
 * job's start on this project's VMs, more than all the confinement steps
 * together; this helper starts with two or three.
 *
 * It starts with an empty environment (the worker gives it none) and reads
 * its program from descriptor 3; the command's own environment is used by
 * the final execve alone, after every restriction holds. Any step that
 * fails ends the helper with status 127 and a line on stderr naming the
 * step: a command that cannot be confined does not run.
 *
 * The program is a sequence of NUL-terminated strings: the magic word,
 * then steps, each an operation name followed by its arguments (see ops
 * below); exec, the last step, takes the path, a count and the arguments,
 * a count and the environment.
 *
 * One program is different: "serve" makes the helper the worker's fork
 * server (pkg/tasks/proctree/forkserver.go). It stays, and for each
 * request on its socket forks a child that takes the request's
 * descriptors as its own 0, 1, 2, 3… and then reads and runs its program
 * from descriptor 3 exactly as a helper started by the worker would. The
 * worker is spared a clone of itself and this helper's execve at every
 * start; the child is the worker's (CLONE_PARENT), born in the tree's
 * cgroup (CLONE_INTO_CGROUP), and confines itself before it execs
 * anything, as ever.
 */
#include <asm/unistd.h>
#include <linux/capability.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/filter.h>
#include <linux/mman.h>
#include <linux/mount.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>

#define MAGIC "jetway-confine 1"
#define SPEC_FD 3
#define MAX_SPEC (16 << 20)

#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef MNT_DETACH
#define MNT_DETACH 2
#endif
#ifndef CLONE_NEWUSER
#define CLONE_NEWUSER 0x10000000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#define NULL ((void *)0)

typedef unsigned long size_t;
typedef long ssize_t;

/* System calls, made directly: each returns the result or -errno. */
#if defined(__x86_64__)
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
/* The kernel enters at _start with the stack pointer at argc; start has
 * no use for argc, argv or the (empty) environment. */
__asm__(".text\n.global _start\n.type _start,@function\n_start:\n"
	"\txor %ebp, %ebp\n\tand $-16, %rsp\n\tcall start\n\thlt\n");
#elif defined(__aarch64__)
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}
__asm__(".text\n.global _start\n.type _start,%function\n_start:\n"
	"\tmov x29, #0\n\tmov x30, #0\n\tbl start\n");
#else
#error "jetway-confine: system calls are written for x86_64 and aarch64 only"
#endif

#define sys0(n) sys6(n, 0, 0, 0, 0, 0, 0)
#define sys1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* err is the last failed call's errno, 0 for a bad program. */
static int err;

/* check keeps a failed call's errno and reports whether it failed. */
static int failed(long r) {
	if (r < 0 && r > -4096) {
		err = (int)-r;
		return 1;
	}
	return 0;
}

static __attribute__((noreturn)) void exit_now(int code) {
	for (;;)
		sys1(__NR_exit_group, code);
}

static ssize_t read_fd(int fd, void *b, size_t n) { return sys3(__NR_read, fd, b, n); }
static ssize_t write_fd(int fd, const void *b, size_t n) { return sys3(__NR_write, fd, b, n); }
static void close_fd(int fd) { sys1(__NR_close, fd); }

/* The compiler may call these for copies and clears of its own. */
void *memset(void *d, int c, size_t n) {
	unsigned char *p = d;
	while (n--)
		*p++ = (unsigned char)c;
	return d;
}
void *memcpy(void *d, const void *s, size_t n) {
	unsigned char *p = d;
	const unsigned char *q = s;
	while (n--)
		*p++ = *q++;
	return d;
}
void *memmove(void *d, const void *s, size_t n) {
	unsigned char *p = d;
	const unsigned char *q = s;
	if (p < q) {
		while (n--)
			*p++ = *q++;
	} else {
		while (n--)
			p[n] = q[n];
	}
	return d;
}
int memcmp(const void *a, const void *b, size_t n) {
	const unsigned char *p = a, *q = b;
	for (; n; n--, p++, q++)
		if (*p != *q)
			return *p - *q;
	return 0;
}
size_t strlen(const char *s) {
	const char *p = s;
	while (*p)
		p++;
	return p - s;
}
static int streq(const char *a, const char *b) {
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* strerror_of names the common errors as the C library does; others by
 * number. */
static const char *strerror_of(int e) {
	switch (e) {
	case EPERM: return "Operation not permitted";
	case ENOENT: return "No such file or directory";
	case ESRCH: return "No such process";
	case EINTR: return "Interrupted system call";
	case EIO: return "Input/output error";
	case E2BIG: return "Argument list too long";
	case ENOEXEC: return "Exec format error";
	case EBADF: return "Bad file descriptor";
	case EAGAIN: return "Resource temporarily unavailable";
	case ENOMEM: return "Cannot allocate memory";
	case EACCES: return "Permission denied";
	case EFAULT: return "Bad address";
	case EBUSY: return "Device or resource busy";
	case EEXIST: return "File exists";
	case ENOTDIR: return "Not a directory";
	case EISDIR: return "Is a directory";
	case EINVAL: return "Invalid argument";
	case EMFILE: return "Too many open files";
	case ETXTBSY: return "Text file busy";
	case EFBIG: return "File too large";
	case ENOSPC: return "No space left on device";
	case EROFS: return "Read-only file system";
	case ENAMETOOLONG: return "File name too long";
	case ENOSYS: return "Function not implemented";
	case ELOOP: return "Too many levels of symbolic links";
	case EOPNOTSUPP: return "Operation not supported";
	case ELIBBAD: return "Accessing a corrupted shared library";
	}
	return NULL;
}

/* A line being written, cut at its size. */
struct line {
	char b[4096];
	size_t n;
};

static void put(struct line *l, const char *s) {
	while (*s && l->n < sizeof l->b - 1)
		l->b[l->n++] = *s++;
}

static void put_number(struct line *l, unsigned long long v) {
	char d[24];
	int i = sizeof d;
	d[--i] = 0;
	do
		d[--i] = (char)('0' + v % 10);
	while ((v /= 10) && i > 0);
	put(l, d + i);
}

static void put_error(struct line *l, int e) {
	const char *s = strerror_of(e);
	if (s) {
		put(l, s);
		return;
	}
	put(l, "error ");
	put_number(l, (unsigned)e);
}

static char *spec, *end, *cur;

static void say(const char *a, const char *b, const char *c, int e) {
	struct line l;
	l.n = 0;
	put(&l, "jetway confine: ");
	put(&l, a);
	put(&l, b);
	put(&l, c);
	if (e >= 0)
		put_error(&l, e);
	l.b[l.n++] = '\n';
	if (write_fd(2, l.b, l.n) < 0) {
		/* nothing else to tell it on */
	}
}

/* fail ends the helper: what failed, and why from err. */
static __attribute__((noreturn)) void fail(const char *what, const char *arg) {
	struct line m;
	m.n = 0;
	put(&m, what);
	if (*arg) {
		put(&m, " ");
		put(&m, arg);
	}
	put(&m, ": ");
	m.b[m.n] = 0;
	if (err)
		say("cannot confine the command, so it does not run: ", m.b, "", err);
	else
		say("cannot confine the command, so it does not run: ", m.b, "bad program", -1);
	exit_now(127);
}

/* next is the program's next string; a program that ends early is bad. */
static char *next(const char *op) {
	if (cur >= end) {
		err = 0;
		fail(op, "(truncated)");
	}
	char *s = cur;
	while (cur < end && *cur)
		cur++;
	if (cur == end) {
		err = 0;
		fail(op, "(unterminated)");
	}
	cur++;
	return s;
}

/* number parses a decimal argument in full. */
static unsigned long long number(const char *op, const char *s) {
	unsigned long long v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (~0ULL - d) / 10) {
			err = 0;
			fail(op, s);
		}
		v = v * 10 + d;
	}
	if (p == s || *p) {
		err = 0;
		fail(op, s);
	}
	return v;
}

/* alloc is fresh zeroed memory, never freed: the helper execs soon. */
static void *alloc(size_t n) {
	long p = sys6(__NR_mmap, 0, (long)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (failed(p))
		return NULL;
	return (void *)p;
}

static void read_spec(void) {
	size_t cap = 1 << 16, n = 0;
	spec = alloc(cap);
	for (;;) {
		if (!spec)
			fail("read the program", "");
		if (n == cap) {
			if (cap >= MAX_SPEC) {
				err = E2BIG;
				fail("read the program", "");
			}
			long p = sys5(__NR_mremap, spec, cap, cap * 2, MREMAP_MAYMOVE, 0);
			spec = failed(p) ? NULL : (char *)p;
			cap *= 2;
			continue;
		}
		ssize_t r = read_fd(SPEC_FD, spec + n, cap - n);
		if (r == -EINTR)
			continue;
		if (failed(r))
			fail("read the program", "from descriptor 3");
		if (r == 0)
			break;
		n += r;
	}
	close_fd(SPEC_FD);
	cur = spec;
	end = spec + n;
	if (!streq(next("program"), MAGIC)) {
		err = 0;
		fail("program", "(not a jetway-confine program)");
	}
}

static int open_file(const char *file, int flags, int mode) {
	return (int)sys4(__NR_openat, AT_FDCWD, file, flags, mode);
}

/* write_file writes s to an existing file whole. */
static void write_file(const char *what, const char *file, const char *s) {
	int fd = open_file(file, O_WRONLY | O_CLOEXEC, 0);
	size_t n = strlen(s);
	if (failed(fd))
		fail(what, file);
	ssize_t w = write_fd(fd, s, n);
	if (failed(w) || (size_t)w != n)
		fail(what, file);
	close_fd(fd);
}

static void join_cgroup(const char *file) {
	struct line pid;
	pid.n = 0;
	put_number(&pid, (unsigned long long)sys0(__NR_getpid));
	pid.b[pid.n] = 0;
	write_file("join cgroup", file, pid.b);
}

/* enter_namespaces puts the helper in a mount namespace of its own and,
 * given a uid and gid (a worker that is not root), a user namespace of its
 * own first, in which they are mapped to themselves and the helper holds
 * every capability (dropped again before the exec). */
static void enter_namespaces(const char *uid, const char *gid) {
	if (failed(sys1(__NR_unshare, CLONE_NEWNS | (*uid ? CLONE_NEWUSER : 0))))
		fail("view: unshare", *uid ? "(user and mount namespaces)" : "(mount namespace)");
	if (!*uid)
		return;
	struct line map;
	map.n = 0;
	write_file("view: user namespace", "/proc/self/setgroups", "deny");
	put(&map, uid);
	put(&map, " ");
	put(&map, uid);
	put(&map, " 1");
	map.b[map.n] = 0;
	write_file("view: user namespace", "/proc/self/uid_map", map.b);
	map.n = 0;
	put(&map, gid);
	put(&map, " ");
	put(&map, gid);
	put(&map, " 1");
	map.b[map.n] = 0;
	write_file("view: user namespace", "/proc/self/gid_map", map.b);
}

static long do_mount(const char *src, const char *dst, const char *type, unsigned long flags, const char *data) {
	return sys5(__NR_mount, src, dst, type, flags, data);
}

/* pivot makes dir (a tmpfs holding the view) the root, detaches the old
 * root and makes the new one read-only, so nothing can be created next to
 * the bound paths. */
static void pivot(const char *dir) {
	if (failed(sys1(__NR_chdir, dir)))
		fail("view: chdir", dir);
	if (failed(sys2(__NR_pivot_root, ".", ".")))
		fail("view: pivot_root", dir);
	if (failed(sys2(__NR_umount2, ".", MNT_DETACH)))
		fail("view: detach the old root", "");
	if (failed(do_mount("", "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL)))
		fail("view: make the root read-only", "");
	if (failed(sys1(__NR_chdir, "/")))
		fail("view: chdir", "/");
}

/* enter_view enters a view the worker keeps (a mount namespace made once
 * by a helper that ran the view's steps and then held it, see hold): its
 * user namespace first where the worker is not root, then the mount
 * namespace, whose root is the view's. The descriptors are closed at once:
 * the command inherits neither. */
static void enter_view(const char *user, const char *mnt) {
	if (*user) {
		int fd = (int)number("view: setns", user);
		if (failed(sys2(__NR_setns, fd, CLONE_NEWUSER)))
			fail("view: enter the user namespace", "");
		close_fd(fd);
	}
	int fd = (int)number("view: setns", mnt);
	if (failed(sys2(__NR_setns, fd, CLONE_NEWNS)))
		fail("view: enter the mount namespace", "");
	close_fd(fd);
	if (failed(sys1(__NR_chdir, "/")))
		fail("view: chdir", "/");
}

/* hold keeps a view just made alive for the worker: it says "held" on
 * stdout, and waits for the worker, which opens this process's namespaces
 * and then closes our stdin. */
static void hold(void) {
	if (write_fd(1, "held\n", 5) != 5) {
		err = EIO;
		fail("hold", "");
	}
	char c;
	for (;;) {
		ssize_t r = read_fd(0, &c, 1);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			break;
	}
	exit_now(0);
}

static int hexval(char c) {
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* install_seccomp installs a classic BPF filter given as the hex of its
 * instructions in the kernel's layout (8 bytes each, little-endian as the
 * worker wrote them on this machine). */
static void install_seccomp(const char *hex) {
	static struct sock_filter filter[BPF_MAXINSNS];
	unsigned char *b = (unsigned char *)filter;
	size_t n = strlen(hex);
	if (n == 0 || n % 16 != 0 || n / 16 > BPF_MAXINSNS) {
		err = 0;
		fail("seccomp", "(bad filter)");
	}
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			err = 0;
			fail("seccomp", "(bad filter)");
		}
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	struct sock_fprog prog = {.len = (unsigned short)(n / 16), .filter = filter};
	if (failed(sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)))
		fail("seccomp", "");
}

/* drop_capabilities empties this process's capability sets, so the
 * command runs without any, root or not. A process that holds
 * CAP_SETPCAP (root, or the helper in a user namespace of its own)
 * empties the bounding set too, so an exec gains none back. */
static void drop_capabilities(void) {
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	if (failed(sys2(__NR_capget, &hdr, data)))
		fail("capget", "");
	if (!(data[0].effective | data[0].permitted | data[0].inheritable |
	      data[1].effective | data[1].permitted | data[1].inheritable))
		return;
	if (data[0].effective & (1u << CAP_SETPCAP)) {
		for (int c = 0; c <= 63; c++) {
			long r = sys2(__NR_prctl, PR_CAPBSET_DROP, c);
			if (r == -EINVAL)
				break; /* past the last capability this kernel knows */
			if (failed(r))
				fail("drop a capability from the bounding set", "");
		}
	}
	long r = sys2(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL);
	if (r != -EINVAL && failed(r))
		fail("clear the ambient capabilities", "");
	memset(data, 0, sizeof data);
	if (failed(sys2(__NR_capset, &hdr, data)))
		fail("capset", "");
}

/* strings reads a count and that many strings into a NULL-terminated
 * array pointing into the program. */
static char **strings(const char *op) {
	unsigned long long n = number(op, next(op));
	if (n > (unsigned long long)(end - cur)) {
		err = 0;
		fail(op, "(count past the program's end)");
	}
	char **v = alloc((n + 1) * sizeof *v);
	if (!v)
		fail(op, "");
	for (unsigned long long i = 0; i < n; i++)
		v[i] = next(op);
	return v;
}

/* close_from closes every descriptor from fd up. */
static void close_from(int fd) {
	long r = sys3(__NR_close_range, fd, ~0U, 0);
	if (r != -ENOSYS) {
		if (failed(r))
			fail("close the descriptors from", "");
		return;
	}
	/* Before Linux 5.9: each one up to the soft limit. */
	struct {
		unsigned long long cur, max;
	} rl = {0, 0};
	if (failed(sys4(__NR_prlimit64, 0, 7 /* RLIMIT_NOFILE */, NULL, &rl)))
		fail("close the descriptors from", "");
	if (rl.cur > (1u << 20))
		rl.cur = 1u << 20;
	for (unsigned long long i = (unsigned)fd; i < rl.cur; i++)
		close_fd((int)i);
}

static void exec_command(void) {
	char *path = next("exec");
	char **argv = strings("exec");
	char **envp = strings("exec");
	/* The command gets its standard streams and nothing else: the
	 * program's own descriptors are closed by now, and any other was
	 * inherited by the worker from whatever started it, without
	 * close-on-exec, and passed on by every exec since. */
	close_from(3);
	long r = sys3(__NR_execve, path, argv, envp);
	say("cannot exec ", path, ": ", (int)-r);
	exit_now(127);
}

struct rlimit64 {
	unsigned long long cur, max;
};

static __attribute__((noreturn)) void serve(int sock);

/* run_steps runs the program read by read_spec; its last step execs the
 * command (or exits). */
static __attribute__((noreturn)) void run_steps(void) {
	for (;;) {
		const char *op = next("step");
		if (streq(op, "cgroup")) {
			join_cgroup(next(op));
		} else if (streq(op, "unshare")) {
			const char *uid = next(op), *gid = next(op);
			enter_namespaces(uid, gid);
		} else if (streq(op, "private")) {
			/* Nothing mounted from here may propagate back to the host. */
			if (failed(do_mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL)))
				fail("view: make the mounts private", "");
		} else if (streq(op, "tmpfs")) {
			const char *dir = next(op);
			if (failed(do_mount("jetway-view", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")))
				fail("view: mount a tmpfs on", dir);
		} else if (streq(op, "mkdir")) {
			const char *p = next(op);
			long r = sys3(__NR_mkdirat, AT_FDCWD, p, 0755);
			if (r != -EEXIST && failed(r))
				fail("view: mount point", p);
		} else if (streq(op, "touch")) {
			const char *p = next(op);
			int fd = open_file(p, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
			if (failed(fd))
				fail("view: mount point", p);
			close_fd(fd);
		} else if (streq(op, "symlink")) {
			const char *target = next(op), *p = next(op);
			long r = sys3(__NR_symlinkat, target, AT_FDCWD, p);
			if (r != -EEXIST && failed(r))
				fail("view: symlink", p);
		} else if (streq(op, "bind")) {
			const char *src = next(op), *dst = next(op);
			if (failed(do_mount(src, dst, NULL, MS_BIND | MS_REC, NULL)))
				fail("view: bind", src);
		} else if (streq(op, "setns")) {
			const char *user = next(op), *mnt = next(op);
			enter_view(user, mnt);
		} else if (streq(op, "hold")) {
			hold();
		} else if (streq(op, "pivot")) {
			pivot(next(op));
		} else if (streq(op, "chdir")) {
			const char *dir = next(op);
			if (failed(sys1(__NR_chdir, dir)))
				fail("chdir", dir);
		} else if (streq(op, "rlimit")) {
			const char *res = next(op), *soft = next(op), *hard = next(op);
			struct rlimit64 rl = {.cur = number(op, soft), .max = number(op, hard)};
			if (failed(sys4(__NR_prlimit64, 0, (int)number(op, res), &rl, NULL)))
				fail("rlimit", res);
		} else if (streq(op, "nnp")) {
			if (failed(sys2(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1)))
				fail("no_new_privs", "");
		} else if (streq(op, "landlock")) {
			const char *fd = next(op), *flags = next(op);
			if (failed(sys2(__NR_landlock_restrict_self, (int)number(op, fd), (unsigned)number(op, flags))))
				fail("landlock_restrict_self", "");
			close_fd((int)number(op, fd));
		} else if (streq(op, "seccomp")) {
			install_seccomp(next(op));
		} else if (streq(op, "caps")) {
			drop_capabilities();
		} else if (streq(op, "say")) {
			const char *text = next(op);
			if (failed(write_fd(1, text, strlen(text))) || failed(write_fd(1, "\n", 1)))
				fail("say", "");
		} else if (streq(op, "exit")) {
			exit_now((int)number(op, next(op)));
		} else if (streq(op, "exec")) {
			exec_command();
		} else if (streq(op, "serve")) {
			serve((int)number(op, next(op)));
		} else {
			err = 0;
			fail("unknown step", op);
		}
	}
}

__attribute__((noreturn, used)) void start(void) {
	read_spec();
	run_steps();
}

/*
 * The fork server. A request is one message on a SOCK_SEQPACKET socket:
 * a spawn_request and, as SCM_RIGHTS, the child's descriptors in order
 * (0, 1, 2, the program on 3, then what the program names), followed by
 * the cgroup to clone into when SPAWN_CGROUP is set; SPAWN_SETSID makes
 * the child a session leader (else it leads a process group), and
 * SPAWN_WORKER_CWD moves it to the worker's current directory. The
 * answer is the child's pid, or a negative errno when no child was made;
 * a child that cannot set itself up ends with status 127 and a line on
 * its stderr, as a helper does. The server ends when the worker closes
 * its end or dies (it has the parent-death signal too).
 */
#define SOL_SOCKET 1
#define SCM_RIGHTS 1
#define MSG_CTRUNC 0x8
#define MSG_CMSG_CLOEXEC 0x40000000
#define SPAWN_MAGIC 0x6a637a31u
#define SPAWN_SETSID 1u
#define SPAWN_CGROUP 2u
#define SPAWN_WORKER_CWD 4u
#define SPAWN_MAX_FDS 16

struct spawn_request {
	unsigned magic, flags, nfds;
};

/* The kernel's layouts of these (struct user_msghdr, cmsghdr, iovec),
 * declared here for want of a C library. */
struct io_vec {
	void *base;
	size_t len;
};
struct msg_hdr {
	void *name;
	int namelen;
	struct io_vec *iov;
	size_t iovlen;
	void *control;
	size_t controllen;
	unsigned flags;
};
struct cmsg_hdr {
	size_t len;
	int level, type;
};
#define CMSG_ALIGN_(n) (((n) + sizeof(size_t) - 1) & ~(sizeof(size_t) - 1))

/* spawned_child sets a new child up and runs its program; it never
 * returns. fds are the request's descriptors, n of them for the child. */
static __attribute__((noreturn)) void spawned_child(const struct spawn_request *rq, const int *fds, int worker, int sock) {
	close_fd(sock);
	/* Lets the server answer first where both share a CPU: the worker
	 * waits for that answer, and the child has all of its own work
	 * ahead (measured: the answer came 0.1-0.5 ms later without). */
	sys0(__NR_sched_yield);
	/* Every descriptor to its place: first each above the places (a
	 * received one may sit on another's place), then down. */
	int tmp[SPAWN_MAX_FDS];
	int n = (int)rq->nfds;
	for (int i = 0; i < n; i++) {
		tmp[i] = (int)sys3(__NR_fcntl, fds[i], F_DUPFD_CLOEXEC, n);
		if (failed(tmp[i]))
			fail("spawn: place the descriptors", "");
	}
	for (int i = 0; i < n; i++)
		if (failed(sys3(__NR_dup3, tmp[i], i, 0)))
			fail("spawn: place the descriptors", "");
	/* The copies above, the request's descriptors as received. */
	close_from(n);
	if (rq->flags & SPAWN_SETSID) {
		if (failed(sys0(__NR_setsid)))
			fail("spawn: setsid", "");
	} else if (failed(sys2(__NR_setpgid, 0, 0))) {
		fail("spawn: setpgid", "");
	}
	/* Dies with the worker, like every tree's root; a worker already
	 * gone left this child to another parent. */
	if (failed(sys2(__NR_prctl, PR_SET_PDEATHSIG, 9 /* SIGKILL */)))
		fail("spawn: parent-death signal", "");
	if (sys0(__NR_getppid) != worker)
		exit_now(127);
	if (rq->flags & SPAWN_WORKER_CWD) {
		/* A command given no directory runs in the worker's, as a
		 * child of the worker would: its current one, not the one it
		 * had when this server started. */
		struct line cwd;
		cwd.n = 0;
		put(&cwd, "/proc/");
		put_number(&cwd, (unsigned long long)worker);
		put(&cwd, "/cwd");
		cwd.b[cwd.n] = 0;
		if (failed(sys1(__NR_chdir, cwd.b)))
			fail("spawn: chdir", cwd.b);
	}
	read_spec();
	run_steps();
}

/* The kernel's struct clone_args (linux/sched.h, Linux 5.7's size). */
struct clone_args3 {
	unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

static long spawn(const struct spawn_request *rq, const int *fds, int worker, int sock) {
	struct clone_args3 ca;
	memset(&ca, 0, sizeof ca);
	/* The child is the worker's: it waits for it, and its end goes to
	 * the worker's SIGCHLD. (The exit signal is this server's own,
	 * SIGCHLD; clone3 wants 0 here with CLONE_PARENT.) */
	ca.flags = CLONE_PARENT;
	if (rq->flags & SPAWN_CGROUP) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (unsigned long long)fds[rq->nfds];
	}
	long pid = sys2(__NR_clone3, &ca, sizeof ca);
	if (pid == 0)
		spawned_child(rq, fds, worker, sock);
	return pid;
}

static __attribute__((noreturn)) void serve(int sock) {
	int worker = (int)sys0(__NR_getppid);
	/* Nothing but the standard streams (/dev/null) and the socket: what
	 * else the worker inherited and passed on is not ours to keep. */
	close_from(sock + 1);
	for (;;) {
		struct spawn_request rq;
		union {
			struct cmsg_hdr h;
			char b[CMSG_ALIGN_(sizeof(struct cmsg_hdr)) + sizeof(int) * (SPAWN_MAX_FDS + 1)];
		} cm;
		struct io_vec iov = {.base = &rq, .len = sizeof rq};
		struct msg_hdr mh;
		memset(&mh, 0, sizeof mh);
		memset(&cm, 0, sizeof cm);
		mh.iov = &iov;
		mh.iovlen = 1;
		mh.control = &cm;
		mh.controllen = sizeof cm;
		long r = sys3(__NR_recvmsg, sock, &mh, MSG_CMSG_CLOEXEC);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			exit_now(0);
		int fds[SPAWN_MAX_FDS + 1], n = 0;
		char *p = (char *)&cm, *lim = p + (mh.controllen < sizeof cm ? mh.controllen : sizeof cm);
		while (p + sizeof(struct cmsg_hdr) <= lim) {
			struct cmsg_hdr *h = (struct cmsg_hdr *)p;
			if (h->len < sizeof(struct cmsg_hdr) || p + h->len > lim)
				break;
			if (h->level == SOL_SOCKET && h->type == SCM_RIGHTS) {
				int *in = (int *)(p + CMSG_ALIGN_(sizeof(struct cmsg_hdr)));
				size_t k = (h->len - CMSG_ALIGN_(sizeof(struct cmsg_hdr))) / sizeof(int);
				for (size_t i = 0; i < k; i++) {
					if (n < SPAWN_MAX_FDS + 1)
						fds[n++] = in[i];
					else
						close_fd(in[i]);
				}
			}
			p += CMSG_ALIGN_(h->len);
		}
		long res;
		if (r != sizeof rq || rq.magic != SPAWN_MAGIC || (mh.flags & MSG_CTRUNC) || rq.nfds < 4 ||
		    rq.nfds > SPAWN_MAX_FDS || (unsigned)n != rq.nfds + ((rq.flags & SPAWN_CGROUP) ? 1 : 0))
			res = -EINVAL;
		else
			res = spawn(&rq, fds, worker, sock);
		for (int i = 0; i < n; i++)
			close_fd(fds[i]);
		int v = (int)res;
		if (write_fd(sock, &v, sizeof v) != sizeof v)
			exit_now(0);
	}
}
