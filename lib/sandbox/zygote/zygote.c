/*
 * hero-zygote: the forking sandbox (lib/sandbox/zygote.go, docs/security.md "The
 * forking sandbox"). It is the first process (PID 1) of a sandbox bwrap made ahead of
 * need, with CAP_SYS_ADMIN and CAP_SETPCAP in that sandbox's user namespace and nothing else, and it
 * serves the runner one job at a time:
 *
 *   argv[1]  the report descriptor: it writes "start\n" there once it runs, then
 *            closes it (the runner waits for that, as for any sandbox made ahead).
 *   argv[2]  the control socket (a unix stream socket): the runner sends each job's
 *            spec on it, with the job's four descriptors (stdin, stdout, stderr, its
 *            report pipe); the zygote answers "E <exit code> <signal>\n" once the job
 *            and every process of it are gone. End of file: it exits.
 *   argv[3]  the job's filesystem's bound (/tmp, bytes; 0: the kernel's default),
 *   argv[4]  /dev/shm's,
 *   argv[5...] the sandbox's mounts under /tmp (host directories bound there): each
 *            job's fresh /tmp gets them again, bound at the same place.
 *
 * Per job it clones a child into fresh PID, mount, IPC and UTS namespaces, before the
 * job comes (its making is off the job's path). That child, PID 1 of its namespace
 * ("init"), mounts a fresh tmpfs on /tmp (the job's own filesystem: its work
 * directory, of the job's disk bound) and on /dev/shm, a /proc of its namespace (with
 * /proc/sys and the like read-only, as bwrap has them), then reads the job's spec from
 * the control socket, makes the work directory, and starts the job's process (a clone
 * sharing init's memory until it executes the job: job_main): it takes its descriptors, its
 * rlimits, drops every capability (bounding: init's set, emptied before the job
 * came, inherited; ambient, inheritable, permitted, effective), sets no_new_privs, writes "start\nbegun <unix ns>\n" (now: the job's
 * started_at_us) to its report and executes
 * the job's command with the job's environment. When that process ends, init kills
 * every other process of the namespace, reaps them, and writes the rest of the report
 * as the wrapper shell does (files.go): "ok"/"full" (a byte cannot be written to the
 * job's filesystem), the kind of the result file (never followed through a link,
 * never opened unless regular) and its first bytes, closes the job's pipes and tells
 * the zygote the job's status, which the zygote answers at once (every process of
 * the job is gone then). Init's end ends the namespace — its tmpfs — after that
 * answer; the zygote reaps it, then makes the next one.
 *
 * Spec: a 4-byte little-endian length, then that many bytes of NUL-terminated
 * fields: dir, result, result max (+1), n, n pairs (rlimit resource, value), argc,
 * argv..., envc, env.... The four descriptors come with the
 * first byte of the length.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>

#define SPEC_MAX (16 << 20)
#define MAX_RLIMITS 8
#define JOB_STACK (256 << 10)
#define SPEC_WARM (16 << 10)

extern char **environ;

struct job {
	char *buf;
	const char *dir, *result;
	long long result_max;
	int nrl;
	int rl_res[MAX_RLIMITS];
	long long rl_val[MAX_RLIMITS];
	char **argv, **env;
	int fds[4]; /* stdin, stdout, stderr, report */
};

static void die(const char *what)
{
	dprintf(2, "hero-zygote: %s: %s\n", what, strerror(errno));
	_exit(125);
}

static int write_all(int fd, const char *b, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_full(int fd, char *b, size_t n)
{
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* next returns the field at *p and moves past it; NULL past the end. */
static char *next(char **p, char *end)
{
	char *f = *p, *z;
	if (f >= end || (z = memchr(f, 0, (size_t)(end - f))) == NULL)
		return NULL;
	*p = z + 1;
	return f;
}

static int number(char **p, char *end, long long *v)
{
	char *f = next(p, end), *e;
	if (f == NULL || *f == 0)
		return -1;
	errno = 0;
	*v = strtoll(f, &e, 10);
	return (*e || errno) ? -1 : 0;
}

static char **list(char **p, char *end)
{
	long long n;
	if (number(p, end, &n) < 0 || n < 0 || n > (1 << 20))
		return NULL;
	char **l = calloc((size_t)n + 1, sizeof(char *));
	if (l == NULL)
		return NULL;
	for (long long i = 0; i < n; i++)
		if ((l[i] = next(p, end)) == NULL) {
			free(l);
			return NULL;
		}
	return l;
}

static int parse(struct job *j, char *p, char *end)
{
	long long n, v;
	if ((j->dir = next(&p, end)) == NULL || (j->result = next(&p, end)) == NULL ||
	    number(&p, end, &j->result_max) < 0 || number(&p, end, &n) < 0 || n < 0 || n > MAX_RLIMITS)
		return -1;
	j->nrl = (int)n;
	for (int i = 0; i < j->nrl; i++) {
		if (number(&p, end, &v) < 0)
			return -1;
		j->rl_res[i] = (int)v;
		if (number(&p, end, &j->rl_val[i]) < 0)
			return -1;
	}
	if ((j->argv = list(&p, end)) == NULL || j->argv[0] == NULL)
		return -1;
	if ((j->env = list(&p, end)) == NULL)
		return -1;
	return p == end ? 0 : -1;
}

/* receive reads one job's spec and descriptors: 1 a job, 0 the end of the socket,
 * -1 a bad spec. */
static int receive(int ctl, struct job *j)
{
	unsigned char len[4];
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = {len, sizeof len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t r;
	memset(j, 0, sizeof *j);
	for (int i = 0; i < 4; i++)
		j->fds[i] = -1;
	do
		r = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(4 * sizeof(int)))
			memcpy(j->fds, CMSG_DATA(c), 4 * sizeof(int));
	if (r != sizeof len || j->fds[3] < 0)
		return -1;
	uint32_t n = len[0] | len[1] << 8 | len[2] << 16 | (uint32_t)len[3] << 24;
	if (n > SPEC_MAX || (j->buf = malloc(n + 1)) == NULL || read_full(ctl, j->buf, n) < 0)
		return -1;
	return parse(j, j->buf, j->buf + n) < 0 ? -1 : 1;
}

/* drop_bounding empties the capability bounding set: init's, before its job comes
 * (off the job's way to its start), which the job's process inherits. Init keeps its
 * own capabilities (it executes nothing). */
static void drop_bounding(void)
{
	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break; /* past the kernel's last capability */
			die("drop the capability bounding set");
		}
}

/* drop_capabilities drops the rest (the bounding set is empty already: init's,
 * inherited): ambient, inheritable, permitted, effective; no_new_privs. */
static void drop_capabilities(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) != 0)
		die("the capability bounding set is not empty");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		die("clear the ambient capabilities");
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) < 0)
		die("drop the capabilities");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("no_new_privs");
}

/* run_job is the job's process: its descriptors, rlimits, no capability, then its
 * command. */
static void run_job(struct job *j)
{
	for (int i = 0; i < 3; i++)
		if (dup2(j->fds[i], i) < 0)
			die("descriptors");
	for (int i = 0; i < j->nrl; i++) {
		struct rlimit rl = {(rlim_t)j->rl_val[i], (rlim_t)j->rl_val[i]};
		if (setrlimit(j->rl_res[i], &rl) < 0)
			die("rlimit");
	}
	drop_capabilities();
	signal(SIGPIPE, SIG_DFL);
	/* The job's begin (its started_at_us): now, before any code of the job runs. */
	struct timespec ts;
	char begun[64];
	clock_gettime(CLOCK_REALTIME, &ts);
	int n = snprintf(begun, sizeof begun, "start\nbegun %lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
	if (write_all(j->fds[3], begun, (size_t)n) < 0)
		_exit(1); /* the runner is gone: the job does not start */
	environ = j->env;
	execvp(j->argv[0], j->argv);
	dprintf(2, "hero-zygote: %s: %s\n", j->argv[0], strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/* job_main is the job's process, made by clone(CLONE_VM | CLONE_VFORK): it shares
 * init's memory, not a copy of it (a fork's copy-on-write faults cost ~1.5 ms on a
 * small VM: the job's start waited for them), and init sleeps until it executes the
 * job's command or dies. It has its own stack, descriptors, credentials and signal
 * dispositions; it writes nothing of init's that init reads after. */
static int job_main(void *arg)
{
	run_job(arg);
	return 127;
}

static void mount_tmpfs(const char *where, long long size, const char *mode)
{
	char opt[64];
	if (size > 0)
		snprintf(opt, sizeof opt, "size=%lld,mode=%s", size, mode);
	else
		snprintf(opt, sizeof opt, "mode=%s", mode);
	if (mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, opt) < 0)
		die(where);
}

/* mount_point makes the parents of path (0755), then path itself, a directory (dir) or an
 * empty file: a mount point. */
static void mount_point(char *path, int dir)
{
	for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			die(path);
		*s = '/';
	}
	if (dir ? mkdir(path, 0755) < 0 && errno != EEXIST : close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
		die(path);
}

/* prepare makes the job's own mounts, in its own mount namespace: its /tmp of disk
 * bytes (0: the kernel's default), its /dev/shm of shm, its /proc; keep are the
 * sandbox's mounts under /tmp, bound again in the job's /tmp. */
static void prepare(long long disk, long long shm, char **keep)
{
	static const char *ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", NULL};
	int n = 0;
	while (keep[n])
		n++;
	int held[n + 1];
	struct stat st;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("make the mounts private");
	for (int i = 0; i < n; i++)
		if ((held[i] = open(keep[i], O_PATH | O_CLOEXEC)) < 0)
			die(keep[i]);
	mount_tmpfs("/tmp", disk, "0755");
	for (int i = 0; i < n; i++) {
		char fd[32];
		snprintf(fd, sizeof fd, "/proc/self/fd/%d", held[i]);
		if (fstat(held[i], &st) < 0)
			die(keep[i]);
		mount_point(keep[i], S_ISDIR(st.st_mode));
		if (mount(fd, keep[i], NULL, MS_BIND | MS_REC, NULL) < 0)
			die(keep[i]);
		close(held[i]);
	}
	mount_tmpfs("/dev/shm", shm, "1777");
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("/proc");
	for (int i = 0; ro[i]; i++) {
		if (access(ro[i], F_OK) < 0)
			continue;
		if (mount(ro[i], ro[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
		    mount(NULL, ro[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			die(ro[i]);
	}
}

static const char *kind(const struct stat *st)
{
	switch (st->st_mode & S_IFMT) {
	case S_IFREG: return "file";
	case S_IFLNK: return "a symbolic link";
	case S_IFIFO: return "a FIFO";
	case S_IFSOCK: return "a socket";
	case S_IFBLK:
	case S_IFCHR: return "a device";
	case S_IFDIR: return "a directory";
	}
	return "another kind of file";
}

/* report writes the end of the job's report: its filesystem's state, its result file. */
static void report(struct job *j, int fd)
{
	char line[128];
	const char *disk = "ok", *k = "none";
	struct stat st;
	int p = open(".hero-disk-probe", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (p < 0 || write(p, "x", 1) != 1)
		disk = "full";
	if (p >= 0)
		close(p);
	int f = -1;
	if (*j->result && fstatat(AT_FDCWD, j->result, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		k = kind(&st);
		if (strcmp(k, "file") == 0 &&
		    ((f = open(j->result, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0 ||
		     fstat(f, &st) < 0 || !S_ISREG(st.st_mode)))
			k = f < 0 ? "none" : kind(&st);
	}
	snprintf(line, sizeof line, "%s %s\n", disk, k);
	if (write_all(fd, line, strlen(line)) < 0 || f < 0 || strcmp(k, "file") != 0)
		return;
	char buf[32768];
	long long left = j->result_max;
	while (left > 0) {
		ssize_t r = read(f, buf, left < (long long)sizeof buf ? (size_t)left : sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || write_all(fd, buf, (size_t)r) < 0)
			break;
		left -= r;
	}
}

/* had_job_and_die tells the zygote init had its job (its status then says how the job
 * ended: init's own), and dies of what failed. */
static void had_job_and_die(int status, const char *what)
{
	int e = errno, got = 1;
	(void)write_all(status, (const char *)&got, sizeof got);
	errno = e;
	die(what);
}

/* init is PID 1 of a job's namespaces, made before its job comes: its mounts made,
 * it reads the job's spec from the control socket, runs the job, ends what it left,
 * reports, and passes the job's status on (status: the int 1 once it has its job, or
 * 2 at the control socket's end; then the job's exit code and signal). */
static void init(int ctl, int status, long long disk, long long shm, char **keep)
{
	int ws = 0, out[2] = {-1, 0}, got = 1;
	struct job j;
	/* Not dumpable: no process of the job (its user) may trace it or open its
	 * descriptors through /proc (nor may it anyway: it holds capabilities they lack). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		die("dumpable");
	prepare(disk, shm, keep);
	drop_bounding();
	/* The job's process's stack, made before the job comes (its pages come as used). */
	char *stack = mmap(NULL, JOB_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		die("mmap");
	/* The heap the job's spec is read into, made and touched before the job comes:
	 * its first allocations' page faults are not on the job's way to its start. */
	char *warm = malloc(SPEC_WARM);
	if (warm == NULL)
		die("malloc");
	memset(warm, 0, SPEC_WARM);
	free(warm);
	int r = receive(ctl, &j);
	close(ctl);
	if (r <= 0) {
		got = 2;
		if (r < 0)
			dprintf(2, "hero-zygote: bad job spec\n");
		else
			(void)write_all(status, (const char *)&got, sizeof got);
		_exit(r < 0);
	}
	if (dup2(j.fds[2], 2) < 0)
		_exit(1); /* from here its own errors go to the job's stderr */
	if (mkdir(j.dir, 0700) < 0 || chdir(j.dir) < 0)
		had_job_and_die(status, j.dir);
	pid_t pid = clone(job_main, stack + JOB_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &j);
	if (pid < 0)
		had_job_and_die(status, "fork");
	/* Said once the job's process runs (the zygote, waiting for it, wakes then, not
	 * on the job's way to its start). */
	if (write_all(status, (const char *)&got, sizeof got) < 0)
		_exit(1);
	for (int i = 0; i < 3; i++)
		close(j.fds[i]);
	for (;;) {
		pid_t w = waitpid(-1, &ws, 0);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			die("wait");
	}
	kill(-1, SIGKILL); /* every other process of the job's namespace */
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	if (WIFEXITED(ws))
		out[0] = WEXITSTATUS(ws);
	else if (WIFSIGNALED(ws))
		out[1] = WTERMSIG(ws);
	signal(SIGPIPE, SIG_IGN);
	report(&j, j.fds[3]);
	/* The job's pipes end here, before its status goes out: the runner reads their
	 * ends at once, not at init's own end. */
	close(j.fds[3]);
	close(2);
	(void)write_all(status, (const char *)out, sizeof out);
	_exit(0);
}

/* reap waits for init's end. */
static int reap(pid_t pid, int *ws)
{
	while (waitpid(pid, ws, 0) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

/* serve makes the next job's namespaces (init) and answers its job's status once it
 * ended: 0, or 1 at the control socket's end, -1 when the sandbox is broken. */
static int serve(int ctl, long long disk, long long shm, char **keep)
{
	int st[2], ws, got = 0, out[2] = {-1, SIGKILL};
	char line[64];
	if (pipe2(st, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		close(st[0]);
		init(ctl, st[1], disk, shm, keep);
	}
	close(st[1]);
	if (pid < 0) {
		dprintf(2, "hero-zygote: clone: %s\n", strerror(errno));
		close(st[0]);
		return -1;
	}
	/* The job's status comes before init's end: init writes it once every process of
	 * the job is gone (killed and reaped) and its report written, and the answer goes
	 * out then; init's own end (its namespaces' teardown: the job's tmpfs unmounted)
	 * is waited for after it, off the time from the job's end to its answer. */
	if (read_full(st[0], (char *)&got, sizeof got) < 0 || got != 1) {
		close(st[0]);
		if (reap(pid, &ws) < 0)
			return -1;
		return got == 2 ? 1 : -1; /* no job: the socket's end, or init failed */
	}
	int early = read_full(st[0], (char *)out, sizeof out);
	close(st[0]);
	if (early < 0) {
		if (reap(pid, &ws) < 0)
			return -1;
		out[0] = -1; /* init failed before the job ended: its own word is on stderr */
		out[1] = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
		if (WIFEXITED(ws))
			out[0] = WEXITSTATUS(ws);
	}
	snprintf(line, sizeof line, "E %d %d\n", out[0], out[1]);
	int w = write_all(ctl, line, strlen(line));
	if (early == 0 && reap(pid, &ws) < 0)
		return -1;
	return w;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		dprintf(2, "usage: hero-zygote <report fd> <control fd> <disk bytes> <shm bytes> [mount under /tmp...] (started by the Hero runner in its sandbox)\n");
		return 2;
	}
	int rep = atoi(argv[1]), ctl = atoi(argv[2]);
	long long disk = atoll(argv[3]), shm = atoll(argv[4]);
	if (fcntl(ctl, F_SETFD, FD_CLOEXEC) < 0)
		die("control socket");
	signal(SIGPIPE, SIG_IGN);
	if (write_all(rep, "start\n", 6) < 0)
		return 1;
	close(rep);
	for (;;) {
		int s = serve(ctl, disk, shm, argv + 5);
		if (s != 0)
			return s < 0;
	}
}
