/*
 * xce-launch: the shepherd of one job run, and the job's sandbox up to its command's exec.
 *
 * The worker (xce/worker/sandbox.py) spawns it for every run:
 *
 *   xce-launch xce-shepherd RUN [--mount-ns] [--user UID GID GROUPS] [--allow-system-user]
 *              [--allow-no-openat2] [--cgroup v1|v2 DIR] [--cgroup-join DIR]... [--cgroup-later DIR]...
 *              [--lease FILE] [--cwd-fallback DIR] [--report FD] CWD STDOUT STDERR -- CMD [ARG...]
 *
 * The shepherd (this process) records its pid in RUN/shepherd.pid, forks the job, waits for it and
 * writes how it ended to RUN/status (its exit code, or 128 + the signal that killed it, as a shell
 * says it), after RUN/usage (max RSS bytes, user and system CPU seconds, from wait4).  It never gets a
 * signal from the worker, so it outlives a worker restart: the next worker adopts the run, or reads
 * the status of a run that ended while no worker was there.
 *
 * The job, in the child, before its command:
 *   0. with --cgroup-join: into each of the run's cgroups (its cgroup.procs), before anything else,
 *      so nothing of the job ever runs outside them (a v2 --cgroup: the job is cloned into it instead);
 *      the --cgroup-later ones (a v1 CPU share) once it has run DEFER_MS (join_later);
 *   1. setsid(): its own session and process group, whose id it writes to RUN/pgid (once the file
 *      exists, the group does);
 *   2. with --mount-ns (root): a private mount namespace, and each claim of RUN/mounts bind-mounted
 *      where XCE chose, nosuid and nodev always, read-only where the claim says so; a failure ends
 *      the run with status 125 (PUBLISH_FAILED) before the command runs, and the shepherd writes why
 *      to RUN/publish.err;
 *   3. with --user: the job's supplementary groups (resolved by the worker, which has the system's
 *      name services), group and user, real, effective and saved.  uid 0, gid 0 and uids below the
 *      system's UID_MIN (/etc/login.defs) are refused unless --allow-system-user;
 *   4. as that user: CWD entered, STDOUT and STDERR opened for appending (STDERR the same file when
 *      it is the same path); a failure ends the run with status 126 (LAUNCH_FAILED), and the
 *      shepherd writes why to RUN/launch.err (the user cannot write the run directory).  With
 *      --cwd-fallback, a CWD this user cannot enter here (it does not exist, or is not theirs to
 *      enter: resolved as the user, so no link is followed with root's rights) is replaced by DIR, and
 *      the job says so in a note;
 *   5. every signal back to its default action and unblocked (the worker is a Python process, which
 *      ignores SIGPIPE), the command exec'd along $PATH with the job's environment: RUN/env when the
 *      worker wrote one (NUL-ended "NAME=VALUE" records; the shepherd itself runs with the worker's
 *      clean environment, never the submitter's: a root process must not read LD_PRELOAD and the like
 *      from a user), else the shepherd's own.  A command that cannot be exec'd ends the run with 127
 *      (not found) or 126, and the shepherd keeps why in RUN/launch.err.
 *
 * With --report FD (a pipe to the worker), the shepherd writes to FD what the job said before its exec
 * (its notes, "note: ..." lines, or why it failed) and closes it: the worker learns that the command
 * was exec'd, or not, without waiting for the run to end.
 *
 * With --stdin FIFO (a task's standard input, which the worker fills from its blaunch: xce/worker/relay.py),
 * the job reads FIFO (opened as its user) and the shepherd holds a write end of it, so that the job never
 * reads an early end while the worker restarts; the shepherd closes it when RUN/stdin appears (the
 * worker wrote the input's last byte), and the job then reads the end.
 *
 * With --hold FD (an open file the worker locked: a machine-wide reservation such as the run's rendezvous
 * port), the shepherd keeps FD open for as long as it lives, and the job does not get it (close-on-exec):
 * the reservation lasts exactly as long as the run's shepherd, across restarts of the worker.
 *
 * What the shepherd does while the job runs (DESIGN §12: one kill path; runs fenced like claim agents).
 * It waits in poll() on the job's end (a signalfd for SIGCHLD), on RUN/wake (a FIFO the worker writes
 * a byte to after it changed a control file) and on its deadlines:
 *   - RUN/kill ("GRACE" seconds, written once by the worker when the job is to end): SIGINT and SIGTERM
 *     to every process of the job, once, then SIGKILL to all of them when GRACE has passed;
 *   - RUN/signals ("SEQ SIGNUM" lines): each signal once, in order (xce kill -s), to every process;
 *   - RUN/limit ("LIMIT WARN SIGNUM GRACE"): the run limit, kept on our own clock from the job's start:
 *     the warning signal WARN seconds before it, then the kill path, and RUN/limited says so;
 *   - RUN/freeze ("1" or "0"): the job frozen or thawed (xce stop / xce resume);
 *   - the lease (--lease FILE: "DEADLINE" in CLOCK_BOOTTIME nanoseconds, renewed by the worker each
 *     time the controller answers its heartbeat): once the deadline has passed and the file says no
 *     later one, the run is fenced: RUN/fenced is written and every process of the job is killed.
 *     The controller gives a run's host up (and runs the job elsewhere) only after a longer interval,
 *     measured on its own clock (docs/architecture.md, "Runs are fenced").
 * "Every process of the job" is its cgroup (--cgroup: frozen with v2's cgroup.freeze or the v1 freezer,
 * SIGKILL to each process, thawed), so a process that left the job's session is not missed; without
 * a cgroup it is the job's process group.  When the job's own process has ended, whatever it left in
 * its cgroup is killed too, and the shepherd waits (a bounded while) until nothing is left.
 *
 * The job says why it failed on a close-on-exec pipe to the shepherd, which reads it to its end (the
 * exec, or the job's exit) before waiting: a run that starts creates no message file at all.
 *
 * Why a program and not the shell chain it replaces (sh, setsid, unshare --mount, sh, mount -a,
 * setpriv, sh): each exec of a glibc program costs ~0.5-1 ms of CPU on a virtual machine, most of
 * it glibc's start-up probing of the CPU's caches with cpuid, which traps to the hypervisor.  Built
 * static with musl (`make dev` uses musl-gcc when it is there), this one exec costs about a third
 * of one glibc exec (an empty program in a shell loop: 0.26 against 0.78 ms, the loop's fork
 * included).  Not bubblewrap: it sets no_new_privs on every sandbox, and a job could then
 * no longer use setuid programs or file capabilities.  No no_new_privs here either (claims are
 * mounted nosuid,nodev, so a setuid file in a claim gives nothing).
 *
 * RUN/mounts, written by the worker (0600, in a directory users cannot write), holds one record per
 * claim: "ro" or "rw", the claim's data path (resolved, inside the worker's storage roots: the worker
 * checked) and the mount point, each field ended by a NUL byte, so any path is read back whole.  The
 * data path is opened without following any symlink (openat2 RESOLVE_NO_SYMLINKS) and the mount is
 * made from that open directory, so a link swapped in after the worker's check is refused, not
 * followed.  Before Linux 5.6 (no openat2) the run is refused unless --allow-no-openat2 (then only
 * the last component is not followed).
 *
 * Build: `make dev` compiles it to .venv/bin/xce-launch, beside the xce command.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* default_signals() writes the kernel's struct sigaction, whose layout is per architecture: these two
 * are the ones it is written for.  Elsewhere, check the layout (arch/.../include/uapi/asm/signal.h)
 * and add the architecture here. */
#if !defined(__x86_64__) && !defined(__aarch64__)
#error "xce-launch: default_signals() hard-codes the kernel's struct sigaction of x86-64 and arm64"
#endif

#define PUBLISH_FAILED 125 /* sandbox.PUBLISH_FAILED */
#define LAUNCH_FAILED 126  /* sandbox.LAUNCH_FAILED */
#define MAX_GROUPS 65536
#define MAX_JOINS 16
#define DEFER_MS 50 /* how long a job runs before it is moved into its --cgroup-later cgroups */
#define DEFAULT_UID_MIN 1000

#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#define XCE_CLONE_INTO_CGROUP 0x200000000ULL
struct xce_clone_args { /* the kernel's struct clone_args up to its cgroup field (Linux 5.7) */
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};
#define RESOLVE_NO_SYMLINKS 0x04
struct open_how {
    unsigned long long flags, mode, resolve;
};

enum cgroup_version { CG_NONE, CG_V1, CG_V2 };

struct launch {
    const char *run;
    int mount_ns;
    int run_as;
    int allow_system_user;
    int allow_no_openat2;
    uid_t uid;
    gid_t gid;
    gid_t groups[MAX_GROUPS];
    size_t ngroups;
    enum cgroup_version cg;
    const char *cg_control;
    const char *cg_join[MAX_JOINS];
    size_t njoin;
    const char *cg_later[MAX_JOINS]; /* joined once the job has run DEFER_MS: its CPU share */
    size_t nlater;
    const char *lease;
    const char *cwd_fallback; /* where the job starts when CWD does not exist (its workspace) */
    int report;               /* --report FD, or -1 */
    int hold;                 /* --hold FD, or -1: kept open by the shepherd, not given to the job */
    const char *stdin_fifo;   /* --stdin FIFO: the job's standard input (else the shepherd's, /dev/null) */
    const char *cwd, *out, *err;
    char **argv; /* the command */
};

static void usage(void) {
    fprintf(stderr, "usage: xce-launch xce-shepherd RUN [--mount-ns] [--user UID GID GROUPS] [--allow-system-user] "
                    "[--allow-no-openat2] [--cgroup v1|v2 DIR] [--cgroup-join DIR]... [--cgroup-later DIR]... "
                    "[--lease FILE] [--cwd-fallback DIR] [--report FD] [--hold FD] [--stdin FIFO] "
                    "CWD STDOUT STDERR -- CMD [ARG...]\n");
    exit(2);
}

static int parse_id(const char *text, unsigned long *out) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v > 0xfffffffeUL) return -1;
    *out = v;
    return 0;
}

static void parse(int argc, char **argv, struct launch *l) {
    int i = 1;
    l->report = -1;
    l->hold = -1;
    if (argc < 3 || strcmp(argv[i++], "xce-shepherd") != 0) usage();
    l->run = argv[i++];
    for (; i < argc && strncmp(argv[i], "--", 2) == 0 && argv[i][2]; i++) {
        unsigned long v;
        if (strcmp(argv[i], "--mount-ns") == 0) {
            l->mount_ns = 1;
        } else if (strcmp(argv[i], "--allow-system-user") == 0) {
            l->allow_system_user = 1;
        } else if (strcmp(argv[i], "--allow-no-openat2") == 0) {
            l->allow_no_openat2 = 1;
        } else if (strcmp(argv[i], "--user") == 0 && i + 3 < argc) {
            l->run_as = 1;
            if (parse_id(argv[++i], &v)) usage();
            l->uid = (uid_t)v;
            if (parse_id(argv[++i], &v)) usage();
            l->gid = (gid_t)v;
            char *groups = argv[++i], *save = NULL;
            for (char *g = strtok_r(groups, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
                if (l->ngroups == MAX_GROUPS || parse_id(g, &v)) usage();
                l->groups[l->ngroups++] = (gid_t)v;
            }
        } else if (strcmp(argv[i], "--cgroup") == 0 && i + 2 < argc) {
            const char *version = argv[++i];
            if (strcmp(version, "v1") == 0) l->cg = CG_V1;
            else if (strcmp(version, "v2") == 0) l->cg = CG_V2;
            else usage();
            l->cg_control = argv[++i];
        } else if (strcmp(argv[i], "--cgroup-join") == 0 && i + 1 < argc) {
            if (l->njoin == MAX_JOINS) usage();
            l->cg_join[l->njoin++] = argv[++i];
        } else if (strcmp(argv[i], "--cgroup-later") == 0 && i + 1 < argc) {
            if (l->nlater == MAX_JOINS) usage();
            l->cg_later[l->nlater++] = argv[++i];
        } else if (strcmp(argv[i], "--lease") == 0 && i + 1 < argc) {
            l->lease = argv[++i];
        } else if (strcmp(argv[i], "--cwd-fallback") == 0 && i + 1 < argc) {
            l->cwd_fallback = argv[++i];
        } else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc) {
            if (parse_id(argv[++i], &v) || v < 3 || v > 1024) usage();
            l->report = (int)v;
        } else if (strcmp(argv[i], "--stdin") == 0 && i + 1 < argc) {
            l->stdin_fifo = argv[++i];
        } else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc) {
            if (parse_id(argv[++i], &v) || v < 3 || v > 1024) usage();
            l->hold = (int)v;
        } else {
            usage();
        }
    }
    if (i + 4 >= argc || strcmp(argv[i + 3], "--") != 0) usage();
    l->cwd = argv[i];
    l->out = argv[i + 1];
    l->err = argv[i + 2];
    l->argv = argv + i + 4;
}

/* RUN/NAME written with TEXT: under a temporary name, then renamed, so a reader sees all or nothing. */
static int write_run_text(const char *run, const char *name, const char *text) {
    char path[4096], tmp[4096];
    size_t n = strlen(text);
    if (snprintf(path, sizeof path, "%s/%s", run, name) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp", run, name) >= (int)sizeof tmp)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int ok = write(fd, text, n) == (ssize_t)n;
    close(fd);
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

static int write_run_file(const char *run, const char *name, long value) {
    char text[32];
    snprintf(text, sizeof text, "%ld\n", value);
    return write_run_text(run, name, text);
}

/* Up to SIZE - 1 bytes of PATH, NUL-ended (no link followed); the length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = '\0';
    return n;
}

static ssize_t read_run(const char *run, const char *name, char *buf, size_t size) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", run, name) >= (int)sizeof path) return -1;
    return read_small(path, buf, size);
}

/* TEXT into the control file DIR/NAME of a cgroup. */
static int cg_write(const char *dir, const char *name, const char *text) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return -1;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* The job's end of the pipe to the shepherd (close-on-exec: the job's command never has it). */
static int messages = -1;

/* Say why the run cannot go on, to the shepherd, and end it with STATUS (PUBLISH_FAILED or
 * LAUNCH_FAILED: which file the shepherd keeps the message in). */
static void fail(int status, const char *fmt, ...) {
    char line[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    dprintf(messages, "%s\n", line);
    _exit(status);
}

#define launch_failed(...) fail(LAUNCH_FAILED, __VA_ARGS__)
#define publish_failed(...) fail(PUBLISH_FAILED, __VA_ARGS__)

static int open_no_symlinks(const char *path, int allow_fallback) {
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS) {
        if (!allow_fallback) return -1; /* errno ENOSYS: publish() says what to do */
        /* before Linux 5.6, allowed by the site: at least the last component is not followed */
        fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    return fd;
}

/* The flags of the mount at PATH that a remount of a bind must keep. */
static unsigned long kept_flags(const char *path) {
    struct statvfs st;
    unsigned long flags = 0;
    if (statvfs(path, &st) != 0) return 0;
    if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
    if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
    if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
    if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
    return flags;
}

/* A private mount namespace with every claim of RUN/mounts bound in it: nosuid and nodev always (a
 * setuid file or a device node a user left in a claim gives nothing), read-only where it says so. */
static void publish(const struct launch *l) {
    const char *run = l->run;
    if (unshare(CLONE_NEWNS) != 0) publish_failed("cannot make a mount namespace: %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        publish_failed("cannot make the mount namespace private: %s", strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/mounts", run);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return; /* no claims */
        publish_failed("cannot read %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size > (16 << 20)) publish_failed("cannot read %s", path);
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf || read(fd, buf, size) != (ssize_t)size) publish_failed("cannot read %s", path);
    close(fd);
    buf[size] = '\0';
    const char *end = buf + size;
    for (char *p = buf; p < end;) {
        const char *mode = p;
        const char *src = mode + strlen(mode) + 1;
        if (src >= end) publish_failed("%s is cut short", path);
        const char *dst = src + strlen(src) + 1;
        if (dst >= end) publish_failed("%s is cut short", path);
        p = (char *)dst + strlen(dst) + 1;
        int readonly = strcmp(mode, "ro") == 0;
        if (!readonly && strcmp(mode, "rw") != 0) publish_failed("%s: unknown mode %s", path, mode);
        int src_fd = open_no_symlinks(src, l->allow_no_openat2);
        if (src_fd < 0 && errno == ENOSYS)
            publish_failed("cannot bind %s at %s safely: this kernel has no openat2 (Linux 5.6), so a "
                           "symbolic link swapped into the path could not be refused (the worker's "
                           "--allow-no-openat2 accepts that)", src, dst);
        if (src_fd < 0)
            publish_failed("cannot bind %s at %s: %s%s", src, dst, strerror(errno),
                           errno == ELOOP ? " (a symbolic link on the way)" : "");
        char via[64];
        snprintf(via, sizeof via, "/proc/self/fd/%d", src_fd);
        if (mount(via, dst, NULL, MS_BIND, NULL) != 0)
            publish_failed("cannot bind %s at %s: %s", src, dst, strerror(errno));
        close(src_fd);
        unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | kept_flags(dst);
        if (mount(NULL, dst, NULL, flags | (readonly ? MS_RDONLY : 0), NULL) != 0)
            publish_failed("cannot make %s %s at %s: %s", src, readonly ? "read-only, nosuid and nodev" : "nosuid and nodev",
                           dst, strerror(errno));
    }
    free(buf);
}

/* The system's first uid for people: UID_MIN in /etc/login.defs, else 1000 (as sandbox.uid_min). */
static unsigned long uid_min(void) {
    char buf[65536];
    if (read_small("/etc/login.defs", buf, sizeof buf) < 0) return DEFAULT_UID_MIN;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        while (*line == ' ' || *line == '\t') line++;
        if (strncmp(line, "UID_MIN", 7) == 0 && (line[7] == ' ' || line[7] == '\t')) {
            char *v = line + 7, *end;
            while (*v == ' ' || *v == '\t') v++;
            unsigned long n = strtoul(v, &end, 10);
            if (end != v) return n;
        }
    }
    return DEFAULT_UID_MIN;
}

static void become(const struct launch *l) {
    /* the worker refused these already; the launcher, which does the setuid, refuses them again */
    if (!l->allow_system_user && (l->uid == 0 || l->gid == 0 || l->uid < uid_min()))
        launch_failed("refusing to run as uid %u gid %u: a system account (the worker's --allow-system-users "
                      "allows it)", l->uid, l->gid);
    if (setgroups(l->ngroups, l->groups) != 0) launch_failed("cannot set the job's groups: %s", strerror(errno));
    if (setresgid(l->gid, l->gid, l->gid) != 0) launch_failed("cannot set group %u: %s", l->gid, strerror(errno));
    if (setresuid(l->uid, l->uid, l->uid) != 0) launch_failed("cannot set user %u: %s", l->uid, strerror(errno));
}

/* The job's environment: RUN/env's NUL-ended records as an environ array (NULL: no RUN/env, the
 * shepherd's own).  Read by the shepherd, as root, before the fork: the file is the worker's (0600, in
 * the run directory users cannot write), opened without following a link. */
static char **job_environment(const char *run) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/env", run) >= (int)sizeof path) return NULL;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    char *buf = NULL;
    size_t size = 0;
    if (fstat(fd, &st) == 0 && st.st_size <= (64 << 20)) {
        size = (size_t)st.st_size;
        buf = malloc(size + 1);
        if (buf && read(fd, buf, size) != (ssize_t)size) size = 0;
    }
    close(fd);
    if (!buf) return NULL;
    buf[size] = '\0';
    size_t n = 0;
    for (size_t i = 0; i < size; i++) n += buf[i] == '\0';
    char **env = calloc(n + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (char *p = buf; p < buf + size && k < n; p += strlen(p) + 1)
        if (strchr(p, '=')) env[k++] = p;
    env[k] = NULL;
    return env;
}

static int open_output(const char *path) {
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOCTTY, 0666);
}

/* Every signal to its default action.  The raw system call, because libc's sigaction refuses the
 * signals it keeps for itself (32-34), and glibc's posix_spawn in the worker sets those to ignored in
 * the child: left so, a job's own threads library could not use them.  SIGKILL, SIGSTOP: EINVAL. */
static void default_signals(void) {
    struct { /* the kernel's struct sigaction (x86-64, arm64: the #error above), not libc's */
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        unsigned long mask;
    } dfl = {.handler = SIG_DFL};
    for (int sig = 1; sig <= 64; sig++) syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
}

/* The job: steps 0-5 of the header.  BORN_IN: the cgroup directory the job was cloned into (not joined again);
 * ENV: its environment (NULL: the shepherd's). */
static void job(const struct launch *l, const char *born_in, char **env) {
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    for (size_t i = 0; i < l->njoin; i++)
        if ((!born_in || strcmp(l->cg_join[i], born_in) != 0) && cg_write(l->cg_join[i], "cgroup.procs", pid) != 0)
            launch_failed("cannot join cgroup %s: %s", l->cg_join[i], strerror(errno));
    if (setsid() < 0) launch_failed("cannot start a session: %s", strerror(errno));
    if (write_run_file(l->run, "pgid", getpid()) != 0) launch_failed("cannot record the job's process group");
    if (l->mount_ns) publish(l);
    if (l->run_as) become(l);
    if (l->report >= 0) close(l->report); /* the worker's: only the shepherd writes it */
    if (chdir(l->cwd) != 0) {
        int e = errno;
        if (!l->cwd_fallback || (e != ENOENT && e != ENOTDIR && e != EACCES))
            launch_failed("cannot enter working directory %s: %s", l->cwd, strerror(e));
        if (chdir(l->cwd_fallback) != 0)
            launch_failed("cannot enter working directory %s: %s", l->cwd_fallback, strerror(errno));
        dprintf(messages, "note: the submission directory %s cannot be entered on this host (%s): the job "
                          "started in its workspace %s\n", l->cwd, strerror(e), l->cwd_fallback);
    }
    if (l->stdin_fifo) { /* (the shepherd holds a writer: the open does not wait, a read does) */
        struct stat st;
        int in = open(l->stdin_fifo, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
        if (in < 0 || fstat(in, &st) != 0 || !S_ISFIFO(st.st_mode) || fcntl(in, F_SETFL, 0) != 0 || dup2(in, 0) < 0)
            launch_failed("cannot open standard input %s: %s", l->stdin_fifo, strerror(errno));
        if (in != 0) close(in);
    }
    int out = open_output(l->out);
    if (out < 0) launch_failed("cannot open output file %s: %s", l->out, strerror(errno));
    if (dup2(out, 1) < 0) launch_failed("cannot open output file %s: %s", l->out, strerror(errno));
    if (strcmp(l->err, l->out) == 0) {
        if (dup2(1, 2) < 0) launch_failed("cannot open output file %s: %s", l->err, strerror(errno));
    } else {
        int err = open_output(l->err);
        if (err < 0 || dup2(err, 2) < 0) launch_failed("cannot open output file %s: %s", l->err, strerror(errno));
        if (err != 2) close(err);
    }
    if (out != 1) close(out);
    default_signals();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (env) environ = env; /* execvp searches the job's PATH and passes its environment */
    execvp(l->argv[0], l->argv);
    int e = errno;
    dprintf(2, "xce-job: %s: %s\n", l->argv[0], e == ENOENT ? "not found" : strerror(e));
    if (e == ENOENT) dprintf(messages, "command not found: %s\n", l->argv[0]);
    else dprintf(messages, "cannot run %s: %s\n", l->argv[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
}

/* RUN/NAME, appended to (mode 0600): TEXT. */
static void keep_message(const char *run, const char *name, const char *text, size_t len) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", run, name) >= (int)sizeof path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    ssize_t written = write(fd, text, len); /* if it fails, there is nothing left to say it with */
    (void)written;
    close(fd);
}

/* ------------------------------------------------------------------ the shepherd: the job's processes */

static const struct launch *L;
static int stdin_writer = -1; /* our write end of the job's --stdin FIFO, until RUN/stdin says it is over */
static pid_t job_pid; /* the job's own process, and its process group */

static int64_t now_ns(void) { /* CLOCK_BOOTTIME: it goes on while the host is suspended */
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The pids in the job's cgroup, into PIDS (at most MAX); how many, or -1 when it cannot be read. */
static int cg_pids(pid_t *pids, int max) {
    static char buf[1 << 20];
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", L->cg_control);
    if (read_small(path, buf, sizeof buf) < 0) return -1;
    int n = 0;
    for (char *p = buf, *end; *p && n < max; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v > 0) pids[n++] = (pid_t)v;
        while (*end == '\n') end++;
    }
    return n;
}

/* SIG to every process of the job: its cgroup's, or its process group. */
static void signal_all(int sig) {
    static pid_t pids[65536];
    int n = L->cg != CG_NONE ? cg_pids(pids, 65536) : -1;
    if (n < 0) {
        kill(-job_pid, sig);
        return;
    }
    for (int i = 0; i < n; i++) kill(pids[i], sig);
}

static void freeze(int on) {
    if (L->cg == CG_V2) cg_write(L->cg_control, "cgroup.freeze", on ? "1" : "0");
    else if (L->cg == CG_V1) cg_write(L->cg_control, "freezer.state", on ? "FROZEN" : "THAWED");
    else kill(-job_pid, on ? SIGSTOP : SIGCONT);
}

static void pause_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* SIGKILL to every process of the job, none missed: freeze the cgroup (no process forks meanwhile), kill
 * each, thaw (a frozen process dies once thawed); without a cgroup, the process group.  Not v2's
 * cgroup.kill: on Linux 6.18 a cgroup once killed so kills every process later cloned into it
 * (CLONE_INTO_CGROUP), and a run's cgroup is used again by the next run. */
static void kill_all(void) {
    if (L->cg == CG_NONE) {
        kill(-job_pid, SIGKILL);
        return;
    }
    static pid_t pids[65536];
    if (cg_pids(pids, 1) == 0) return; /* nothing left (a job that ended alone): no freeze needed */
    for (int round = 0; round < 50; round++) {
        freeze(1);
        if (L->cg == CG_V1) { /* FREEZING until every task has stopped: a bounded wait */
            char state[64];
            char path[4096];
            snprintf(path, sizeof path, "%s/freezer.state", L->cg_control);
            for (int i = 0; i < 100 && read_small(path, state, sizeof state) > 0 && strncmp(state, "FROZEN", 6); i++)
                pause_ms(1);
        }
        int n = cg_pids(pids, 65536);
        for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
        freeze(0);
        if (n <= 0) return;
        pause_ms(2);
    }
}

/* Until nothing of the job is left in its cgroup (a bounded wait: a process stuck in the kernel is
 * the worker's to report; the status is written either way). */
static void wait_empty(void) {
    static pid_t pids[16];
    for (int i = 0; L->cg != CG_NONE && i < 1000; i++) {
        int n = cg_pids(pids, 16);
        if (n <= 0) return;
        if (i % 50 == 0) kill_all();
        pause_ms(10);
    }
}

/* The lease's deadline (CLOCK_BOOTTIME ns), or 0 when there is none to read: expired. */
static int64_t lease_deadline(void) {
    char buf[64];
    if (read_small(L->lease, buf, sizeof buf) <= 0) return 0;
    return strtoll(buf, NULL, 10);
}

/* Every process of the job into the --cgroup-later cgroups (its CPU share), the tree frozen meanwhile so
 * that none forks unseen.  Moving a process takes the kernel's cgroup lock for writing, which waits for
 * an RCU grace period and holds up every fork on the host meanwhile: a job that ends within DEFER_MS
 * is never moved (most of a short job's cost, measured in bench/throughput.py), one that runs on is
 * moved once. */
static void join_later(int frozen) {
    static pid_t pids[65536];
    if (!frozen) freeze(1);
    if (L->cg == CG_V1) { /* FREEZING until every task has stopped: a bounded wait */
        char state[64], path[4096];
        snprintf(path, sizeof path, "%s/freezer.state", L->cg_control);
        for (int i = 0; i < 100 && read_small(path, state, sizeof state) > 0 && strncmp(state, "FROZEN", 6); i++)
            pause_ms(1);
    }
    int n = cg_pids(pids, 65536);
    for (size_t j = 0; j < L->nlater; j++)
        for (int i = 0; i < n; i++) {
            char pid[32];
            snprintf(pid, sizeof pid, "%d", (int)pids[i]);
            cg_write(L->cg_later[j], "cgroup.procs", pid); /* (one that ended meanwhile: ESRCH, nothing to move) */
        }
    if (!frozen) freeze(0);
}

struct control {
    int terminating;    /* RUN/kill seen: SIGINT and SIGTERM sent */
    int64_t kill_at;    /* when SIGKILL follows them (0: not yet asked) */
    int killed;         /* SIGKILL sent */
    long signals_done;  /* the last RUN/signals sequence number delivered */
    int frozen;
};

/* The kill path: SIGINT and SIGTERM once (a frozen job thawed first: it could not handle them),
 * SIGKILL when the grace has passed. */
static void terminate(struct control *c, double grace) {
    if (!(grace >= 0)) grace = 0;
    c->terminating = 1;
    if (c->frozen) freeze(0), c->frozen = 0;
    signal_all(SIGINT);
    signal_all(SIGTERM);
    c->kill_at = now_ns() + (int64_t)(grace * 1e9);
}

/* The run limit (RUN/limit "LIMIT WARN SIGNUM GRACE", seconds; written by the worker before we
 * started): when, on our own clock, the warning signal comes and the kill path starts (0: never). */
struct limit {
    int64_t warn_at, end_at;
    int warn_signal;
    double grace;
};

static struct limit read_limit(int64_t started) {
    struct limit lim = {0};
    char buf[256];
    double limit = 0, warn = 0, grace = 10;
    int sig = 0;
    if (read_run(L->run, "limit", buf, sizeof buf) > 0 && sscanf(buf, "%lf %lf %d %lf", &limit, &warn, &sig, &grace) >= 1 &&
        limit > 0) {
        lim.end_at = started + (int64_t)(limit * 1e9);
        if (sig > 0 && sig < 65 && warn > 0) lim.warn_at = lim.end_at - (int64_t)(warn * 1e9), lim.warn_signal = sig;
        lim.grace = grace;
    }
    return lim;
}

/* Act on what the worker wrote (RUN/kill, RUN/signals, RUN/freeze): each thing once. */
static void apply_control(struct control *c) {
    char buf[65536];
    if (!c->terminating && read_run(L->run, "kill", buf, sizeof buf) > 0) terminate(c, strtod(buf, NULL));
    if (read_run(L->run, "signals", buf, sizeof buf) > 0) {
        for (char *line = buf, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = '\0';
            char *end;
            long seq = strtol(line, &end, 10);
            long sig = strtol(end, NULL, 10);
            if (seq > c->signals_done && sig > 0 && sig < 65) {
                signal_all((int)sig);
                c->signals_done = seq;
            }
        }
    }
    if (!c->terminating && read_run(L->run, "freeze", buf, sizeof buf) > 0) {
        int want = buf[0] == '1';
        if (want != c->frozen) freeze(want), c->frozen = want;
    }
    if (stdin_writer >= 0 && read_run(L->run, "stdin", buf, sizeof buf) >= 0) {
        close(stdin_writer); /* the input's end: once the job has read what is left, it reads the end */
        stdin_writer = -1;
    }
}

/* Wait for the job, acting on control files, the kill's grace and the lease meanwhile; the job's wait
 * status and its rusage. */
static void shepherd(int sfd, int wake, int *status, struct rusage *ru) {
    struct control c = {0};
    int64_t lease = L->lease ? lease_deadline() : 0;
    int fenced = 0;
    struct limit lim = read_limit(now_ns());
    int64_t later_at = L->nlater && L->cg != CG_NONE ? now_ns() + (int64_t)DEFER_MS * 1000000 : 0;
    apply_control(&c); /* what the worker wrote before the job started */
    for (;;) {
        int64_t now = now_ns();
        if (later_at && now >= later_at) {
            later_at = 0;
            if (!c.terminating && !fenced) join_later(c.frozen);
        }
        if (L->lease && !fenced && now >= lease && (lease = lease_deadline()) <= now) {
            fenced = 1; /* no word from the controller in time: it may give the run up, so the run ends now */
            write_run_text(L->run, "fenced", "1\n");
            kill_all();
        }
        if (lim.warn_at && now >= lim.warn_at) {
            lim.warn_at = 0;
            if (!c.terminating) signal_all(lim.warn_signal);
        }
        if (lim.end_at && now >= lim.end_at) {
            lim.end_at = 0;
            if (!c.terminating && !fenced) {
                write_run_text(L->run, "limited", "1\n"); /* the worker reports "run limit H:MM reached" */
                terminate(&c, lim.grace);
            }
        }
        if (c.terminating && !c.killed && now >= c.kill_at) {
            c.killed = 1;
            kill_all();
        }
        int64_t next = later_at ? later_at : INT64_MAX;
        if (lim.warn_at && lim.warn_at < next) next = lim.warn_at;
        if (lim.end_at && lim.end_at < next) next = lim.end_at;
        if (L->lease && !fenced && lease < next) next = lease;
        if (c.terminating && !c.killed && c.kill_at < next) next = c.kill_at;
        int timeout = -1;
        if (next != INT64_MAX) {
            int64_t ms = (next - now) / 1000000 + 1;
            timeout = ms > 60000 ? 60000 : (ms < 0 ? 0 : (int)ms);
        }
        struct pollfd fds[2] = {{.fd = sfd, .events = POLLIN}, {.fd = wake, .events = POLLIN}};
        if (poll(fds, wake >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR) pause_ms(100);
        if (wake >= 0 && (fds[1].revents & POLLIN)) {
            char drain[256];
            while (read(wake, drain, sizeof drain) > 0) {
            }
            apply_control(&c);
        }
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) > 0) {
        }
        pid_t r = wait4(job_pid, status, WNOHANG, ru);
        if (r == job_pid) return;
        if (r < 0 && errno != EINTR) { /* cannot happen: the job is our only child */
            *status = 0;
            memset(ru, 0, sizeof *ru);
            return;
        }
    }
}

int main(int argc, char **argv) {
    static struct launch l;
    static char said[8192];
    size_t len = 0;
    int pipe_fds[2];
    parse(argc, argv, &l);
    L = &l;
    if (l.report >= 0 && fcntl(l.report, F_SETFD, FD_CLOEXEC) != 0) l.report = -1;
    if (l.hold >= 0) fcntl(l.hold, F_SETFD, FD_CLOEXEC); /* ours: the job's exec closes its copy */
    if (l.stdin_fifo) stdin_writer = open(l.stdin_fifo, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    char **env = job_environment(l.run);
    /* without it the run is not adopted after a worker restart, but it still runs and reports */
    write_run_file(l.run, "shepherd.pid", getpid());
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL); /* the job unblocks every signal before its exec */
    int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    char wake_path[4096];
    snprintf(wake_path, sizeof wake_path, "%s/wake", l.run);
    if (mkfifo(wake_path, 0600) != 0 && errno != EEXIST) wake_path[0] = '\0';
    /* read and write: the FIFO always has a writer, so poll() never sees a hang-up; the worker's
     * non-blocking open for writing fails (ENXIO) once no shepherd reads it */
    int wake = wake_path[0] ? open(wake_path, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC) : -1;
    /* a v2 tree: the job is created in it (clone3 CLONE_INTO_CGROUP, Linux 5.7) rather than moved there, which
     * takes the cgroup core's global lock for writing (and an RCU grace period) at every run; else fork */
    const char *born_in = NULL;
    pid_t pid = -1;
    if (sfd >= 0 && pipe2(pipe_fds, O_CLOEXEC) == 0) {
        int cg_fd = l.cg == CG_V2 ? open(l.cg_control, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (cg_fd >= 0) {
            struct xce_clone_args ca = {.flags = XCE_CLONE_INTO_CGROUP, .exit_signal = SIGCHLD,
                                        .cgroup = (unsigned long long)cg_fd};
            pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
            if (pid >= 0) born_in = l.cg_control;
            close(cg_fd);
        }
        if (!born_in) pid = fork(); /* one thread here: fork is safe */
    }
    if (pid < 0) {
        len = (size_t)snprintf(said, sizeof said, "cannot start the job: %s\n", strerror(errno));
        keep_message(l.run, "launch.err", said, len);
        return write_run_file(l.run, "status", LAUNCH_FAILED) == 0 ? 0 : 1;
    }
    if (pid == 0) {
        close(pipe_fds[0]);
        messages = pipe_fds[1];
        job(&l, born_in, env);
    }
    job_pid = pid;
    close(pipe_fds[1]);
    for (ssize_t n; len < sizeof said && (n = read(pipe_fds[0], said + len, sizeof said - len)) != 0;)
        if (n > 0) len += (size_t)n;
        else if (errno != EINTR) break;
    close(pipe_fds[0]);
    if (l.report >= 0) { /* the worker: the exec happened (nothing said but notes), or the job failed */
        ssize_t written = len ? write(l.report, said, len) : 0;
        (void)written;
        close(l.report);
    }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    shepherd(sfd, wake, &status, &ru);
    kill_all(); /* what the job left behind goes with it, setsid() or not */
    wait_empty();
    long code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (len && (code == PUBLISH_FAILED || code == LAUNCH_FAILED || code == 127))
        keep_message(l.run, code == PUBLISH_FAILED ? "publish.err" : "launch.err", said, len);
    char usage_text[128];
    snprintf(usage_text, sizeof usage_text, "%lld %ld.%06ld %ld.%06ld\n", (long long)ru.ru_maxrss * 1024,
             (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec, (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    write_run_text(l.run, "usage", usage_text);
    return write_run_file(l.run, "status", code) == 0 ? 0 : 1;
}
