/*
 * xce-launch: the shepherd of one job run, and the job's sandbox up to its command's exec.
 *
 * The worker (xce/worker/sandbox.py) spawns it for every run:
 *
 *   xce-launch xce-shepherd RUN [--mount-ns] [--user UID GID GROUPS] CWD STDOUT STDERR -- CMD [ARG...]
 *
 * The shepherd (this process) records its pid in RUN/shepherd.pid, forks the job, waits for it and
 * writes how it ended to RUN/status (its exit code, or 128 + the signal that killed it, as a shell
 * says it).  It never gets a signal from the worker, so it outlives a worker restart: the next
 * worker adopts the run, or reads the status of a run that ended while no worker was there.
 *
 * The job, in the child, before its command:
 *   1. setsid(): its own session and process group, whose id it writes to RUN/pgid (once the file
 *      exists, the group does: the worker signals the group, never the shepherd);
 *   2. with --mount-ns (root): a private mount namespace, and each claim of RUN/mounts bind-mounted
 *      where XCE chose, read-only where the claim says so; a failure ends the run with status 125
 *      (PUBLISH_FAILED) before the command runs, and the shepherd writes why to RUN/publish.err;
 *   3. with --user: the job's supplementary groups (resolved by the worker, which has the system's
 *      name services), group and user, real, effective and saved;
 *   4. as that user: CWD entered, STDOUT and STDERR opened for appending (STDERR the same file when
 *      it is the same path); a failure ends the run with status 126 (LAUNCH_FAILED), and the
 *      shepherd writes why to RUN/launch.err (the user cannot write the run directory);
 *   5. every signal back to its default action and unblocked (the worker is a Python process, which
 *      ignores SIGPIPE), the command exec'd along $PATH.
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
 * no longer use setuid programs or file capabilities.  No no_new_privs here either.
 *
 * RUN/mounts, written by the worker (0600, in a directory users cannot write), holds one record per
 * claim: "ro" or "rw", the claim's data path (resolved, inside the worker's storage roots: the worker
 * checked) and the mount point, each field ended by a NUL byte, so any path is read back whole.  The
 * data path is opened without following any symlink (openat2 RESOLVE_NO_SYMLINKS) and the mount is
 * made from that open directory, so a link swapped in after the worker's check is refused, not
 * followed.  A read-only bind keeps the flags of the mount it comes from (nosuid, nodev, noexec...).
 *
 * Build: `make dev` compiles it to .venv/bin/xce-launch, beside the xce command.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PUBLISH_FAILED 125 /* sandbox.PUBLISH_FAILED */
#define LAUNCH_FAILED 126  /* sandbox.LAUNCH_FAILED */
#define MAX_GROUPS 65536

#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#define RESOLVE_NO_SYMLINKS 0x04
struct open_how {
    unsigned long long flags, mode, resolve;
};

struct launch {
    const char *run;
    int mount_ns;
    int run_as;
    uid_t uid;
    gid_t gid;
    gid_t groups[MAX_GROUPS];
    size_t ngroups;
    const char *cwd, *out, *err;
    char **argv; /* the command */
};

static void usage(void) {
    fprintf(stderr, "usage: xce-launch xce-shepherd RUN [--mount-ns] [--user UID GID GROUPS] "
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
    if (argc < 3 || strcmp(argv[i++], "xce-shepherd") != 0) usage();
    l->run = argv[i++];
    for (; i < argc && strncmp(argv[i], "--", 2) == 0 && argv[i][2]; i++) {
        unsigned long v;
        if (strcmp(argv[i], "--mount-ns") == 0) {
            l->mount_ns = 1;
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

/* RUN/NAME written with "TEXT\n": under a temporary name, then renamed, so a reader sees all or nothing. */
static int write_run_file(const char *run, const char *name, long value) {
    char path[4096], tmp[4096], text[32];
    int n = snprintf(text, sizeof text, "%ld\n", value);
    if (snprintf(path, sizeof path, "%s/%s", run, name) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp", run, name) >= (int)sizeof tmp)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int ok = write(fd, text, n) == n;
    close(fd);
    return ok && rename(tmp, path) == 0 ? 0 : -1;
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

static int open_no_symlinks(const char *path) {
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS) /* before Linux 5.6: at least the last component is not followed */
        fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd;
}

/* The flags of the mount at PATH that a read-only remount of a bind must keep. */
static unsigned long kept_flags(const char *path) {
    struct statvfs st;
    unsigned long flags = 0;
    if (statvfs(path, &st) != 0) return 0;
    if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
    if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
    if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
    if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
    if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
    if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
    return flags;
}

/* A private mount namespace with every claim of RUN/mounts bound in it. */
static void publish(const char *run) {
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
        int src_fd = open_no_symlinks(src);
        if (src_fd < 0)
            publish_failed("cannot bind %s at %s: %s%s", src, dst, strerror(errno),
                           errno == ELOOP ? " (a symbolic link on the way)" : "");
        char via[64];
        snprintf(via, sizeof via, "/proc/self/fd/%d", src_fd);
        if (mount(via, dst, NULL, MS_BIND, NULL) != 0)
            publish_failed("cannot bind %s at %s: %s", src, dst, strerror(errno));
        close(src_fd);
        if (readonly &&
            mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | kept_flags(dst), NULL) != 0)
            publish_failed("cannot make %s read-only at %s: %s", src, dst, strerror(errno));
    }
    free(buf);
}

static void become(const struct launch *l) {
    if (setgroups(l->ngroups, l->groups) != 0) launch_failed("cannot set the job's groups: %s", strerror(errno));
    if (setresgid(l->gid, l->gid, l->gid) != 0) launch_failed("cannot set group %u: %s", l->gid, strerror(errno));
    if (setresuid(l->uid, l->uid, l->uid) != 0) launch_failed("cannot set user %u: %s", l->uid, strerror(errno));
}

static int open_output(const char *path) {
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOCTTY, 0666);
}

/* Every signal to its default action.  The raw system call, because libc's sigaction refuses the
 * signals it keeps for itself (32-34), and glibc's posix_spawn in the worker sets those to ignored in
 * the child: left so, a job's own threads library could not use them.  SIGKILL, SIGSTOP: EINVAL. */
static void default_signals(void) {
    struct { /* the kernel's struct sigaction (x86-64, arm64), not libc's */
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        unsigned long mask;
    } dfl = {.handler = SIG_DFL};
    for (int sig = 1; sig <= 64; sig++) syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
}

/* The job: steps 1-5 of the header. */
static void job(const struct launch *l) {
    if (setsid() < 0) launch_failed("cannot start a session: %s", strerror(errno));
    if (write_run_file(l->run, "pgid", getpid()) != 0) launch_failed("cannot record the job's process group");
    if (l->mount_ns) publish(l->run);
    if (l->run_as) become(l);
    if (chdir(l->cwd) != 0) launch_failed("cannot enter working directory %s: %s", l->cwd, strerror(errno));
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
    execvp(l->argv[0], l->argv);
    int e = errno;
    dprintf(2, "xce-job: %s: %s\n", l->argv[0], e == ENOENT ? "not found" : strerror(e));
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

int main(int argc, char **argv) {
    static struct launch l;
    static char said[8192];
    size_t len = 0;
    int pipe_fds[2];
    parse(argc, argv, &l);
    /* without it the run is not adopted after a worker restart, but it still runs and reports */
    write_run_file(l.run, "shepherd.pid", getpid());
    pid_t pid = pipe2(pipe_fds, O_CLOEXEC) == 0 ? fork() : -1; /* one thread here: fork is safe */
    if (pid < 0) {
        len = (size_t)snprintf(said, sizeof said, "cannot start the job: %s\n", strerror(errno));
        keep_message(l.run, "launch.err", said, len);
        return write_run_file(l.run, "status", LAUNCH_FAILED) == 0 ? 0 : 1;
    }
    if (pid == 0) {
        close(pipe_fds[0]);
        messages = pipe_fds[1];
        job(&l);
    }
    close(pipe_fds[1]);
    for (ssize_t n; len < sizeof said && (n = read(pipe_fds[0], said + len, sizeof said - len)) != 0;)
        if (n > 0) len += (size_t)n;
        else if (errno != EINTR) break;
    close(pipe_fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 1;
    long code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (len && (code == PUBLISH_FAILED || code == LAUNCH_FAILED))
        keep_message(l.run, code == PUBLISH_FAILED ? "publish.err" : "launch.err", said, len);
    return write_run_file(l.run, "status", code) == 0 ? 0 : 1;
}
