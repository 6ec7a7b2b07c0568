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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAGIC "jetway-confine 1"
#define SPEC_FD 3
#define MAX_SPEC (16 << 20)

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

static char *spec, *end, *cur;

static void say(const char *a, const char *b, const char *c) {
	char line[4096];
	int n = snprintf(line, sizeof line, "jetway confine: %s%s%s\n", a, b, c);
	if (n > (int)sizeof line - 1) {
		n = sizeof line - 1;
		line[n - 1] = '\n';
	}
	if (write(2, line, n) < 0) {
		/* nothing else to tell it on */
	}
}

/* fail ends the helper: what failed, and why from errno. */
static void fail(const char *what, const char *arg) {
	const char *why = errno ? strerror(errno) : "bad program";
	char msg[1024];
	snprintf(msg, sizeof msg, "%s%s%s: ", what, *arg ? " " : "", arg);
	say("cannot confine the command, so it does not run: ", msg, why);
	_exit(127);
}

/* next is the program's next string; a program that ends early is bad. */
static char *next(const char *op) {
	if (cur >= end) {
		errno = 0;
		fail(op, "(truncated)");
	}
	char *s = cur;
	char *nul = memchr(cur, 0, end - cur);
	if (!nul) {
		errno = 0;
		fail(op, "(unterminated)");
	}
	cur = nul + 1;
	return s;
}

/* number parses a decimal argument in full. */
static unsigned long long number(const char *op, const char *s) {
	char *e;
	errno = 0;
	unsigned long long v = strtoull(s, &e, 10);
	if (errno || e == s || *e) {
		errno = 0;
		fail(op, s);
	}
	return v;
}

static void read_spec(void) {
	size_t cap = 1 << 16, n = 0;
	spec = malloc(cap);
	for (;;) {
		if (!spec)
			fail("read the program", "");
		if (n == cap) {
			if (cap >= MAX_SPEC) {
				errno = E2BIG;
				fail("read the program", "");
			}
			cap *= 2;
			spec = realloc(spec, cap);
			continue;
		}
		ssize_t r = read(SPEC_FD, spec + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fail("read the program", "from descriptor 3");
		if (r == 0)
			break;
		n += r;
	}
	close(SPEC_FD);
	cur = spec;
	end = spec + n;
	if (strcmp(next("program"), MAGIC) != 0) {
		errno = 0;
		fail("program", "(not a jetway-confine program)");
	}
}

static void join_cgroup(const char *file) {
	char pid[32];
	int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, pid, n) != n)
		fail("join cgroup", file);
	close(fd);
}

/* write_file writes s to an existing file whole. */
static void write_file(const char *what, const char *file, const char *s) {
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	size_t n = strlen(s);
	if (fd < 0 || write(fd, s, n) != (ssize_t)n)
		fail(what, file);
	close(fd);
}

/* enter_namespaces puts the helper in a mount namespace of its own and,
 * given a uid and gid (a worker that is not root), a user namespace of its
 * own first, in which they are mapped to themselves and the helper holds
 * every capability (dropped again before the exec). */
static void enter_namespaces(const char *uid, const char *gid) {
	if (unshare(CLONE_NEWNS | (*uid ? CLONE_NEWUSER : 0)) < 0)
		fail("view: unshare", *uid ? "(user and mount namespaces)" : "(mount namespace)");
	if (!*uid)
		return;
	char map[64];
	write_file("view: user namespace", "/proc/self/setgroups", "deny");
	snprintf(map, sizeof map, "%s %s 1", uid, uid);
	write_file("view: user namespace", "/proc/self/uid_map", map);
	snprintf(map, sizeof map, "%s %s 1", gid, gid);
	write_file("view: user namespace", "/proc/self/gid_map", map);
}

/* pivot makes dir (a tmpfs holding the view) the root, detaches the old
 * root and makes the new one read-only, so nothing can be created next to
 * the bound paths. */
static void pivot(const char *dir) {
	if (chdir(dir) < 0)
		fail("view: chdir", dir);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		fail("view: pivot_root", dir);
	if (umount2(".", MNT_DETACH) < 0)
		fail("view: detach the old root", "");
	if (mount("", "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
		fail("view: make the root read-only", "");
	if (chdir("/") < 0)
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
		if (setns(fd, CLONE_NEWUSER) < 0)
			fail("view: enter the user namespace", "");
		close(fd);
	}
	int fd = (int)number("view: setns", mnt);
	if (setns(fd, CLONE_NEWNS) < 0)
		fail("view: enter the mount namespace", "");
	close(fd);
	if (chdir("/") < 0)
		fail("view: chdir", "/");
}

/* hold keeps a view just made alive for the worker: it says "held" on
 * stdout, and waits for the worker, which opens this process's namespaces
 * and then closes our stdin. */
static void hold(void) {
	if (write(1, "held\n", 5) != 5)
		fail("hold", "");
	char c;
	for (;;) {
		ssize_t r = read(0, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
	}
	_exit(0);
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
	size_t n = strlen(hex);
	if (n == 0 || n % 16 != 0 || n / 16 > BPF_MAXINSNS) {
		errno = 0;
		fail("seccomp", "(bad filter)");
	}
	unsigned char *b = malloc(n / 2);
	if (!b)
		fail("seccomp", "");
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			errno = 0;
			fail("seccomp", "(bad filter)");
		}
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	struct sock_fprog prog = {.len = (unsigned short)(n / 16), .filter = (struct sock_filter *)b};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		fail("seccomp", "");
	free(b);
}

/* drop_capabilities empties this process's capability sets, so the
 * command runs without any, root or not. A process that holds
 * CAP_SETPCAP (root, or the helper in a user namespace of its own)
 * empties the bounding set too, so an exec gains none back. */
static void drop_capabilities(void) {
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	if (syscall(SYS_capget, &hdr, data) < 0)
		fail("capget", "");
	if (!(data[0].effective | data[0].permitted | data[0].inheritable |
	      data[1].effective | data[1].permitted | data[1].inheritable))
		return;
	if (data[0].effective & (1u << CAP_SETPCAP)) {
		for (int c = 0; c <= 63; c++) {
			if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
				if (errno == EINVAL)
					break; /* past the last capability this kernel knows */
				fail("drop a capability from the bounding set", "");
			}
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		fail("clear the ambient capabilities", "");
	memset(data, 0, sizeof data);
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail("capset", "");
}

/* strings reads a count and that many strings into a NULL-terminated
 * array pointing into the program. */
static char **strings(const char *op) {
	unsigned long long n = number(op, next(op));
	if (n > (unsigned long long)(end - cur)) {
		errno = 0;
		fail(op, "(count past the program's end)");
	}
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		fail(op, "");
	for (unsigned long long i = 0; i < n; i++)
		v[i] = next(op);
	return v;
}

static void exec_command(void) {
	char *path = next("exec");
	char **argv = strings("exec");
	char **envp = strings("exec");
	execve(path, argv, envp);
	char why[256];
	snprintf(why, sizeof why, ": %s", strerror(errno));
	say("cannot exec ", path, why);
	_exit(127);
}

int main(void) {
	read_spec();
	for (;;) {
		const char *op = next("step");
		if (!strcmp(op, "cgroup")) {
			join_cgroup(next(op));
		} else if (!strcmp(op, "unshare")) {
			const char *uid = next(op), *gid = next(op);
			enter_namespaces(uid, gid);
		} else if (!strcmp(op, "private")) {
			/* Nothing mounted from here may propagate back to the host. */
			if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
				fail("view: make the mounts private", "");
		} else if (!strcmp(op, "tmpfs")) {
			const char *dir = next(op);
			if (mount("jetway-view", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
				fail("view: mount a tmpfs on", dir);
		} else if (!strcmp(op, "mkdir")) {
			const char *p = next(op);
			if (mkdir(p, 0755) < 0 && errno != EEXIST)
				fail("view: mount point", p);
		} else if (!strcmp(op, "touch")) {
			const char *p = next(op);
			int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
			if (fd < 0)
				fail("view: mount point", p);
			close(fd);
		} else if (!strcmp(op, "symlink")) {
			const char *target = next(op), *p = next(op);
			if (symlink(target, p) < 0 && errno != EEXIST)
				fail("view: symlink", p);
		} else if (!strcmp(op, "bind")) {
			const char *src = next(op), *dst = next(op);
			if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
				fail("view: bind", src);
		} else if (!strcmp(op, "setns")) {
			const char *user = next(op), *mnt = next(op);
			enter_view(user, mnt);
		} else if (!strcmp(op, "hold")) {
			hold();
		} else if (!strcmp(op, "pivot")) {
			pivot(next(op));
		} else if (!strcmp(op, "chdir")) {
			const char *dir = next(op);
			if (chdir(dir) < 0)
				fail("chdir", dir);
		} else if (!strcmp(op, "rlimit")) {
			const char *res = next(op), *soft = next(op), *hard = next(op);
			struct rlimit rl = {.rlim_cur = number(op, soft), .rlim_max = number(op, hard)};
			if (setrlimit((int)number(op, res), &rl) < 0)
				fail("rlimit", res);
		} else if (!strcmp(op, "nnp")) {
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
				fail("no_new_privs", "");
		} else if (!strcmp(op, "landlock")) {
			const char *fd = next(op), *flags = next(op);
			if (syscall(SYS_landlock_restrict_self, (int)number(op, fd), (unsigned)number(op, flags)) < 0)
				fail("landlock_restrict_self", "");
			close((int)number(op, fd));
		} else if (!strcmp(op, "seccomp")) {
			install_seccomp(next(op));
		} else if (!strcmp(op, "caps")) {
			drop_capabilities();
		} else if (!strcmp(op, "say")) {
			const char *text = next(op);
			if (write(1, text, strlen(text)) < 0 || write(1, "\n", 1) < 0)
				fail("say", "");
		} else if (!strcmp(op, "exit")) {
			_exit((int)number(op, next(op)));
		} else if (!strcmp(op, "exec")) {
			exec_command();
		} else {
			errno = 0;
			fail("unknown step", op);
		}
	}
}
