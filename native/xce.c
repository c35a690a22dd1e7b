/*
 * xce: the native front of the xce command, as Mercurial's chg is hg's.
 *
 * Python's start-up and the CLI's imports cost 250-450 ms a call on this VM, so a loop of one-shot
 * `xce submit` processes would spend nearly all of its time starting Python.  This front owns no
 * semantics: it parses no option, reads no config file and speaks no HTTP.  It hands the whole call
 * to a warm Python process that has the CLI imported (xce/cli/server.py): the arguments, the
 * working directory (a descriptor), the environment, the umask, and its stdin, stdout and stderr
 * (the descriptors themselves, so the command reads and writes them as its own), and exits as the
 * command did.  Every word of the command line is still defined once, in xce/cli.
 *
 * The server's socket is in a directory only this user may enter ($XCE_RUNTIME_DIR, else
 * $XDG_RUNTIME_DIR/xce, else /tmp/xce-UID), named by a hash of the interpreter's path and of the
 * variables that shape an interpreter at start-up (PYTHON*, LC_*, LANG).  When none answers, the
 * front starts one (python -m xce.cli.server, in a session of its own, under a lock so that one
 * starts) and waits until it listens.  Whenever nothing has been sent yet and the server cannot be
 * had, the front runs the Python CLI itself ("cold": `python3 -m xce.cli.programs NAME ...`, the interpreter
 * beside this binary), which is also what the server asks for commands that run for long
 * (daemons) and what XCE_NATIVE=0 forces.  Once a call is sent it is never sent again: a server
 * that fails after that is reported, exit 1.
 *
 * What it reads back is the server's: "pid N", then "exit N" or "signal N"; or "cold"; or "stale"
 * (the server's code changed: it starts a new one and asks once more).  Lines are read into a
 * fixed buffer and anything else is refused (tests/cli/test_native.py runs this under ASan and
 * UBSan against a server that answers garbage).  Signals it receives while the call runs (INT,
 * TERM, HUP, QUIT, USR1, USR2, WINCH) are passed on to the child that runs it.
 *
 * It is also LSF's commands (`make dev` links bsub, bjobs... to it): it sends the name it was run by
 * (the basename of argv[0]) before the arguments, and xce/cli/programs.py says which program a name is.
 *
 * Build: `make dev` compiles it over the entry-point script pip writes (.venv/bin/xce).  -DXCE_PYTHON
 * names the interpreter; -DXCE_NO_COLD makes a front that never runs the Python CLI itself (the
 * tests' proof that a call was served warm).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_REFUSED 1
#define START_TIMEOUT_MS 60000 /* a server's start (Python and the CLI's imports) on a loaded box */
#define LINE_MAX_BYTES 64      /* the longest answer line: "signal 64", "exit -2147483648" */

extern char **environ;
static char **g_argv;
static char g_python[PATH_MAX];
static volatile sig_atomic_t g_child; /* the pid running the call: where signals are passed on */

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("xce: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    return EXIT_REFUSED;
}

/* ------------------------------------------------------------------ the interpreter, and cold */

static void find_python(void) {
#ifdef XCE_PYTHON
    snprintf(g_python, sizeof g_python, "%s", XCE_PYTHON);
#else
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("xce: cannot find its own path (/proc/self/exe)");
        exit(EXIT_REFUSED);
    }
    self[n] = '\0';
    /* the venv's python3 beside this binary (by that path, so Python finds the venv) */
    snprintf(g_python, sizeof g_python, "%s/python3", dirname(self));
#endif
}

/* The name this front was run by (xce, bsub...): which program that is, is xce/cli/programs.py's. */
static const char *program(void) {
    const char *slash = strrchr(g_argv[0], '/');
    return slash ? slash + 1 : g_argv[0];
}

/* Run the Python CLI in this process: nothing has been sent to a server. */
static void cold(void) __attribute__((noreturn));
static void cold(void) {
#ifdef XCE_NO_COLD
    fprintf(stderr, "xce: cannot run the Python CLI (this front was built with XCE_NO_COLD)\n");
    exit(EXIT_REFUSED);
#else
    int argc = 0;
    while (g_argv[argc]) argc++;
    char **args = calloc((size_t)argc + 5, sizeof *args);
    if (!args) exit(EXIT_REFUSED);
    args[0] = g_python;
    args[1] = "-m";
    args[2] = "xce.cli.programs";
    args[3] = (char *)program();
    for (int i = 1; i < argc; i++) args[i + 3] = g_argv[i];
    execv(g_python, args);
    fprintf(stderr, "xce: cannot run the Python CLI %s: %s\n", g_python, strerror(errno));
    exit(EXIT_REFUSED);
#endif
}

/* ------------------------------------------------------------------ where the server listens */

static uint64_t fnv(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* Whether an environment entry shapes an interpreter at start-up (then it is part of the name). */
static int shapes_python(const char *entry) {
    return !strncmp(entry, "PYTHON", 6) || !strncmp(entry, "LC_", 3) || !strncmp(entry, "LANG=", 5);
}

/* The directory of this user's servers, made if missing; 0 if it is not one only this user may use. */
static int runtime_dir(char *out, size_t cap) {
    const char *own = getenv("XCE_RUNTIME_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
    int n = own && *own ? snprintf(out, cap, "%s", own)
            : xdg && *xdg ? snprintf(out, cap, "%s/xce", xdg)
                          : snprintf(out, cap, "/tmp/xce-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= cap) return 0;
    if (mkdir(out, 0700) && errno != EEXIST) return 0;
    struct stat st;
    return !lstat(out, &st) && S_ISDIR(st.st_mode) && st.st_uid == getuid() && !(st.st_mode & 077);
}

/* dir/cli-HASH: the socket is BASE.sock, the start lock BASE.lock, the server's log BASE.log */
static int server_base(char *out, size_t cap) {
    char dir[PATH_MAX];
    if (!runtime_dir(dir, sizeof dir)) return 0;
    uint64_t h = fnv(0xcbf29ce484222325ULL, g_python), sum = 0;
    for (char **e = environ; *e; e++)
        if (shapes_python(*e)) sum += fnv(0xcbf29ce484222325ULL, *e); /* in any order */
    h = fnv(h ^ sum, "xce-cli-2");
    int n = snprintf(out, cap, "%s/cli-%016llx", dir, (unsigned long long)h);
    return n > 0 && (size_t)n < cap;
}

static int connect_to(const char *path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) return -1;
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
        cred.uid != getuid()) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Start a server on sock and wait until it listens; 0 if it did not. */
static int start_server(const char *base, const char *sock) {
    char log[PATH_MAX + 8];
    snprintf(log, sizeof log, "%s.log", base);
    int ready[2];
    if (pipe2(ready, O_CLOEXEC)) return 0;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, ready[1], 3);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    char *args[] = {g_python, "-m", "xce.cli.server", "--socket", (char *)sock, "--ready-fd", "3", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, g_python, &fa, &attr, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(ready[1]);
    char said[8] = {0};
    size_t got = 0;
    while (!rc && got < sizeof said - 1) {
        struct pollfd p = {.fd = ready[0], .events = POLLIN};
        int n = poll(&p, 1, START_TIMEOUT_MS);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        ssize_t r = read(ready[0], said + got, sizeof said - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(ready[0]);
    if (!rc) waitpid(pid, NULL, 0); /* the server detaches: this first process of it exits at once */
    return !rc && !strcmp(said, "ready\n");
}

/* A connection to this user's server, started if need be; -1: none to be had (go cold). */
static int server(int restart) {
    char base[PATH_MAX], sock[PATH_MAX + 8], lock[PATH_MAX + 8];
    if (!server_base(base, sizeof base)) return -1;
    snprintf(sock, sizeof sock, "%s.sock", base);
    snprintf(lock, sizeof lock, "%s.lock", base);
    int fd = restart ? -1 : connect_to(sock);
    if (fd >= 0) return fd;
    int lk = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lk < 0 || flock(lk, LOCK_EX)) return -1;
    fd = connect_to(sock); /* another front may have started one meanwhile */
    if (fd < 0 && start_server(base, sock)) fd = connect_to(sock);
    close(lk);
    return fd;
}

/* ------------------------------------------------------------------ the call */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) exit(EXIT_REFUSED);
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

/* A descriptor to pass for fd (itself if open, else /dev/null: the command sees it closed-ish). */
static int pass_fd(int fd, int flags) {
    if (fcntl(fd, F_GETFD) >= 0) return fd;
    return open("/dev/null", flags | O_CLOEXEC);
}

/* Send the call: 1 if it was sent whole, 0 if nothing was (go cold), -1 if part was. */
static int send_call(int fd) {
    Buf body = {0}, msg = {0};
    int argc = 1, envc = 0;
    buf_add(&body, program(), strlen(program()) + 1);
    for (char **a = g_argv + 1; *a; a++, argc++) buf_add(&body, *a, strlen(*a) + 1);
    for (char **e = environ; *e; e++, envc++) buf_add(&body, *e, strlen(*e) + 1);
    mode_t mask = umask(0);
    umask(mask);
    char head[128];
    int n = snprintf(head, sizeof head, "XCE2 %d %d %o %zu\n", argc, envc, (unsigned)mask, body.len);
    buf_add(&msg, head, (size_t)n);
    if (body.len) buf_add(&msg, body.data, body.len);
    free(body.data);
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cwd < 0) cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int fds[4] = {pass_fd(0, O_RDONLY), pass_fd(1, O_WRONLY), pass_fd(2, O_WRONLY), cwd};
    for (int i = 0; i < 4; i++)
        if (fds[i] < 0) return 0;
    char control[CMSG_SPACE(sizeof fds)] = {0};
    struct iovec iov = {.iov_base = msg.data, .iov_len = msg.len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    ssize_t sent;
    do sent = sendmsg(fd, &mh, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    close(cwd);
    if (sent <= 0) return 0;
    for (size_t off = (size_t)sent; off < msg.len;) {
        ssize_t w = send(fd, msg.data + off, msg.len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    free(msg.data);
    return 1;
}

/* One answer line into line (without its newline): 1, or 0 at the end, or -1 for one too long,
 * unfinished or holding a byte no answer has. */
static int read_line(int fd, char *line) {
    size_t n = 0;
    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return n ? -1 : 0;
        if (c == '\n') break;
        if (n == LINE_MAX_BYTES - 1 || c < ' ' || c > '~') return -1;
        line[n++] = c;
    }
    line[n] = '\0';
    return 1;
}

/* "WORD N" with N a decimal int in [lo, hi]: 1 and *out, else 0. */
static int word_number(const char *line, const char *word, long lo, long hi, long *out) {
    size_t w = strlen(word);
    if (strncmp(line, word, w) || line[w] != ' ') return 0;
    const char *p = line + w + 1;
    char *end;
    if (!*p || (*p != '-' && (*p < '0' || *p > '9'))) return 0;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static void pass_on(int sig) {
    if (g_child > 0) kill((pid_t)g_child, sig);
}

static const int FORWARDED[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

/* Wait for the call's end and end as it did. */
static int finish(int fd, long pid) {
    g_child = (sig_atomic_t)pid;
    struct sigaction sa = {.sa_handler = pass_on, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof FORWARDED / sizeof *FORWARDED; i++) sigaction(FORWARDED[i], &sa, NULL);
    char line[LINE_MAX_BYTES];
    long v;
    int r = read_line(fd, line);
    if (r == 1 && word_number(line, "exit", 0, 255, &v)) return (int)v;
    if (r == 1 && word_number(line, "signal", 1, 64, &v)) {
        signal((int)v, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, (int)v);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise((int)v); /* end as the command did: the shell sees the same signal */
        return 128 + (int)v;
    }
    if (r == 0) return fail("the CLI server ended before the command did");
    return fail("the CLI server sent an answer xce cannot read");
}

int main(int argc, char **argv) {
    (void)argc;
    g_argv = argv;
    find_python();
    const char *native = getenv("XCE_NATIVE");
    if (native && !strcmp(native, "0")) cold(); /* to compare, or to bypass */
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = server(attempt > 0);
        if (fd < 0) cold();
        int sent = send_call(fd);
        if (sent == 0) cold();
        if (sent < 0) return fail("the CLI server closed the connection while the call was sent");
        char line[LINE_MAX_BYTES];
        long pid;
        int r = read_line(fd, line);
        if (r == 1 && word_number(line, "pid", 1, INT32_MAX, &pid)) return finish(fd, pid);
        if (r == 1 && !strcmp(line, "cold")) cold();
        if (r == 0) cold(); /* it read the call and ran nothing: it did not fork (server.py) */
        if (r == 1 && !strcmp(line, "stale")) {
            close(fd);
            continue;
        }
        return fail("the CLI server sent an answer xce cannot read");
    }
    cold(); /* stale twice: its code is changing under it */
}
