/*
 * xce: the native front of the xce command.
 *
 * A Python start-up with the CLI's imports costs ~40 ms, so a loop of `xce submit` processes (what
 * a loop of `sbatch` calls is compared to) spends nearly all of its time starting Python.  This
 * front runs the commonest one-shot command itself: `xce submit` with the options listed in
 * parse_submit.  It builds the request body the Python CLI builds (xce/cli/commands_jobs.py,
 * cmd_submit), POSTs it to /v1/jobs and prints the same line, or the same error.
 *
 * Anything else it hands over untouched, by exec'ing the Python CLI (`python3 -m xce.cli.main`,
 * the interpreter beside this binary) with the same arguments: another command, an option it does
 * not know or an abbreviation of one, a value it would have to interpret (-R, --stage-*, an
 * array of digits argparse would read differently), --json, help, a config file that is not plain
 * `key = "value"` lines (`urls = [...]` included), an https or IPv6 URL, several controllers
 * (a comma in the URL), a controller it cannot connect to, a standby's 503 naming the leader.  So the Python
 * CLI stays the one definition of what `xce` means; this is a fast path, never a second dialect.
 * tests/cli/test_native.py runs both on the same argument lists and compares what reaches the
 * controller and what the user sees.
 *
 * Build: `make dev` compiles it over the entry-point script pip writes (.venv/bin/xce).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define TIMEOUT_S 30 /* xce.client's DEFAULT_TIMEOUT */
#define EXIT_REFUSED 1

static char **g_argv; /* for the hand-over */

/* ------------------------------------------------------------------ hand-over */

/* Run the Python CLI with our arguments: the answer for everything this front does not do itself. */
static void hand_over(void) __attribute__((noreturn));
static void hand_over(void) {
    char python[PATH_MAX + 16];
#ifdef XCE_PYTHON
    snprintf(python, sizeof python, "%s", XCE_PYTHON);
#else
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("xce: cannot find its own path (/proc/self/exe)");
        exit(EXIT_REFUSED);
    }
    self[n] = '\0';
    /* the venv's python3 beside this binary (by that path, so Python finds the venv) */
    snprintf(python, sizeof python, "%s/python3", dirname(self));
#endif
    int argc = 0;
    while (g_argv[argc]) argc++;
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) exit(EXIT_REFUSED);
    args[0] = python; /* Python finds its venv from the path it was started by */
    args[1] = "-m";
    args[2] = "xce.cli.main";
    for (int i = 1; i < argc; i++) args[i + 2] = g_argv[i];
    execv(python, args);
    fprintf(stderr, "xce: cannot run the Python CLI %s: %s\n", python, strerror(errno));
    exit(EXIT_REFUSED);
}

/* ------------------------------------------------------------------ growing buffers */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->len + n + 1 > cap) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) exit(EXIT_REFUSED);
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_fmt(Buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) hand_over();
    buf_add(b, tmp, (size_t)n);
}

/* ------------------------------------------------------------------ JSON out */

/* Whether s is valid UTF-8 (Python would carry other bytes as surrogate escapes: not ours to mimic). */
static int utf8_ok(const unsigned char *s) {
    while (*s) {
        int extra;
        unsigned cp;
        if (*s < 0x80) { s++; continue; }
        if ((*s & 0xE0) == 0xC0) { extra = 1; cp = *s & 0x1F; }
        else if ((*s & 0xF0) == 0xE0) { extra = 2; cp = *s & 0x0F; }
        else if ((*s & 0xF8) == 0xF0) { extra = 3; cp = *s & 0x07; }
        else return 0;
        s++;
        for (int i = 0; i < extra; i++, s++) {
            if ((*s & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (*s & 0x3F);
        }
        if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    return 1;
}

static void json_string(Buf *b, const char *s) {
    if (!utf8_ok((const unsigned char *)s)) hand_over();
    buf_str(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"') buf_str(b, "\\\"");
        else if (*p == '\\') buf_str(b, "\\\\");
        else if (*p < 0x20) buf_fmt(b, "\\u%04x", *p);
        else buf_add(b, (const char *)p, 1);
    }
    buf_str(b, "\"");
}

static void json_strings(Buf *b, char **items, int n) {
    buf_str(b, "[");
    for (int i = 0; i < n; i++) {
        if (i) buf_str(b, ",");
        json_string(b, items[i]);
    }
    buf_str(b, "]");
}

/* ------------------------------------------------------------------ JSON in */

/* Just enough to read the controller's answer: skip any value, decode a string, find a key. */

static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static void put_utf8(Buf *b, unsigned cp) {
    char out[4];
    size_t n;
    if (cp < 0x80) { out[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    buf_add(b, out, n);
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* A string at p (at its opening quote): decoded into out (if not NULL); returns the end, or NULL. */
static const char *json_read_string(const char *p, Buf *out) {
    if (*p != '"') return NULL;
    for (p++; *p != '"'; p++) {
        if (!*p) return NULL;
        if (*p != '\\') {
            if (out) buf_add(out, p, 1);
            continue;
        }
        p++;
        const char *simple = strchr("\"\\/bfnrt", *p);
        if (*p && simple) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            if (out) buf_add(out, &to[simple - "\"\\/bfnrt"], 1);
        } else if (*p == 'u') {
            unsigned cp, lo;
            if (!hex4(p + 1, &cp)) return NULL;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[1] == '\\' && p[2] == 'u' && hex4(p + 3, &lo) &&
                lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            if (out) put_utf8(out, cp);
        } else {
            return NULL;
        }
    }
    return p + 1;
}

static const char *json_skip(const char *p) {
    p = ws(p);
    if (*p == '"') return json_read_string(p, NULL);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = json_read_string(ws(p), NULL);
                if (!p || *(p = ws(p)) != ':') return NULL;
                p++;
            }
            if (!(p = json_skip(p))) return NULL;
            p = ws(p);
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    }
    const char *start = p; /* number, true, false, null */
    while (*p && strchr("+-0123456789.eEtrufalsn", *p)) p++;
    return p > start ? p : NULL;
}

/* The value of a top-level key of the object at doc (NULL: absent or not an object). */
static const char *json_get(const char *doc, const char *key) {
    const char *p = ws(doc);
    if (*p != '{') return NULL;
    p = ws(p + 1);
    if (*p == '}') return NULL;
    for (;;) {
        Buf k = {0};
        p = json_read_string(ws(p), &k);
        int match = p && k.data && strcmp(k.data, key) == 0;
        free(k.data);
        if (!p || *(p = ws(p)) != ':') return NULL;
        p = ws(p + 1);
        if (match) return p;
        if (!(p = json_skip(p))) return NULL;
        p = ws(p);
        if (*p != ',') return NULL;
        p++;
    }
}

/* ------------------------------------------------------------------ settings (xce/cli/config.py) */

/* ASCII whitespace off both ends; NULL when what is left starts or ends with a byte Python's
 * str.strip() might also strip (other control or non-ASCII whitespace): the Python CLI decides. */
static char *strip(const char *s) {
    while (*s && strchr(" \t\n\r\v\f", *s)) s++;
    size_t n = strlen(s);
    while (n && strchr(" \t\n\r\v\f", s[n - 1])) n--;
    if (n && ((unsigned char)s[0] < 0x20 || (unsigned char)s[0] >= 0x80 || (unsigned char)s[n - 1] < 0x20 ||
              (unsigned char)s[n - 1] >= 0x80))
        return NULL;
    return strndup(s, n);
}

/* Whether a setting may go into an HTTP header as it is: UTF-8, no control characters. */
static int clean(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    return utf8_ok((const unsigned char *)s);
}

/* url and token from a config file of plain `key = "value"` (or 'value') lines, comments and blank
 * lines; 0 if the file is missing, -1 for anything else the Python CLI should judge. */
static int load_config(const char *path, char **url, char **token) {
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : -1;
    char line[4096];
    int rc = 1;
    while (rc == 1 && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') { rc = -1; break; }
        const char *p = ws(line);
        if (!*p || *p == '#') continue;
        const char *key = p;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
               *p == '-')
            p++;
        size_t klen = (size_t)(p - key);
        p = ws(p);
        if (!klen || *p != '=') { rc = -1; break; }
        p = ws(p + 1);
        char quote = *p;
        if (quote != '"' && quote != '\'') { rc = -1; break; }
        const char *end = strchr(p + 1, quote);
        if (!end || memchr(p + 1, '\\', (size_t)(end - p - 1)) || (quote == '"' && p[1] == '"')) { rc = -1; break; }
        const char *rest = ws(end + 1);
        if (*rest && *rest != '#') { rc = -1; break; }
        /* only the two keys `xce up` writes, once each: other keys, repeats, bytes TOML or HTTP would
         * refuse are the Python CLI's to judge */
        char **slot = klen == 3 && !strncmp(key, "url", 3) ? url : klen == 5 && !strncmp(key, "token", 5) ? token
                                                                                                           : NULL;
        if (!slot || *slot) { rc = -1; break; }
        char *raw = strndup(p + 1, (size_t)(end - p - 1));
        *slot = clean(raw) ? strip(raw) : NULL;
        free(raw);
        if (!*slot) rc = -1;
    }
    if (ferror(f)) rc = -1;
    fclose(f);
    return rc;
}

/* resolve() of xce/cli/config.py: flag, then environment, then the config file. */
static void resolve(const char *flag_url, const char *flag_token, const char *flag_config, char **url,
                    char **token) {
    const char *flags[2] = {flag_url, flag_token}, *envs[2] = {"XCE_URL", "XCE_TOKEN"};
    char **out[2] = {url, token};
    for (int i = 0; i < 2; i++) {
        *out[i] = NULL;
        const char *env = getenv(envs[i]);
        if (flags[i] && *flags[i]) *out[i] = strip(flags[i]);
        else if (env && *env) {
            char *v = strip(env);
            if (v && *v) *out[i] = v;
            else if (!v) hand_over();
            else free(v);
        }
        if ((flags[i] && *flags[i] && !*out[i])) hand_over();
    }
    const char *explicit = flag_config ? flag_config : getenv("XCE_CONFIG");
    if (explicit && !*explicit) explicit = NULL;
    if (explicit || !*url || !*token) {
        char path[PATH_MAX];
        if (explicit) {
            if (explicit[0] == '~') hand_over();
            snprintf(path, sizeof path, "%s", explicit);
        } else {
            const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
            if (xdg && *xdg) snprintf(path, sizeof path, "%s/xce/config.toml", xdg);
            else if (home && *home) snprintf(path, sizeof path, "%s/.config/xce/config.toml", home);
            else hand_over();
        }
        char *furl = NULL, *ftoken = NULL;
        int rc = load_config(path, &furl, &ftoken);
        if (rc < 0 || (rc == 0 && explicit)) hand_over();
        if (!*url && furl && *furl) *url = furl;
        else free(furl);
        if (!*token && ftoken && *ftoken) *token = ftoken;
        else free(ftoken);
    }
    if (!*url || !*token || !**url || !**token || !clean(*url) || !clean(*token)) hand_over();
}

/* ------------------------------------------------------------------ the request */

typedef struct {
    char *url, *token, *config;
    char *queue, *name, *out, *err, *project, *cwd, *scratch, *app;
    long slots;
    int rerunnable, hold;
    char **claims;
    int nclaims;
    char **command;
    int ncommand;
} Submit;

/* Value options: short letter (0: none), long name, where the value goes. */
typedef struct {
    char letter;
    const char *name;
    size_t field; /* offsetof in Submit */
} ValueOpt;

#define F(x) __builtin_offsetof(Submit, x)
static const ValueOpt VALUE_OPTS[] = {
    {'q', "queue", F(queue)},     {'J', "name", F(name)},       {'o', "stdout", F(out)},
    {'e', "stderr", F(err)},      {'P', "project", F(project)}, {0, "cwd", F(cwd)},
    {0, "scratch", F(scratch)},   {0, "app", F(app)},           {0, "url", F(url)},
    {0, "token", F(token)},       {0, "config", F(config)},
};

static int positive(const char *s, long *out) {
    if (!*s || strlen(s) > 9) return 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    *out = strtol(s, NULL, 10);
    return *out >= 1;
}

/* `xce [global options] submit [options] [--] CMD [ARGS...]`, in the forms argparse reads the same
 * way for certain; anything else goes to the Python CLI. */
static void parse_submit(int argc, char **argv, Submit *s) {
    memset(s, 0, sizeof *s);
    s->slots = 1;
    s->claims = calloc((size_t)argc, sizeof *s->claims);
    if (!s->claims) exit(EXIT_REFUSED);
    int seen_submit = 0, i = 1;
    for (; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--")) {
            if (!seen_submit) hand_over();
            i++;
            break;
        }
        if (a[0] != '-' || !a[1]) {
            if (!seen_submit) {
                if (strcmp(a, "submit")) hand_over();
                seen_submit = 1;
                continue;
            }
            /* the command without `--`: only if nothing after it looks like an option */
            for (int j = i + 1; j < argc; j++)
                if (argv[j][0] == '-') hand_over();
            break;
        }
        const char *value = NULL;
        const ValueOpt *opt = NULL;
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (!seen_submit && !(n == 3 && !strncmp(a + 2, "url", 3)) && !(n == 5 && !strncmp(a + 2, "token", 5)) &&
                !(n == 6 && !strncmp(a + 2, "config", 6)))
                hand_over(); /* before the command only the connection options are ours */
            if (!eq && !strcmp(a + 2, "rerunnable")) { s->rerunnable = 1; continue; }
            if (!eq && !strcmp(a + 2, "hold")) { s->hold = 1; continue; }
            if (!strncmp(a + 2, "slots", n) && n == 5) {
                const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
                if (!v || !positive(v, &s->slots)) hand_over();
                continue;
            }
            if (!strncmp(a + 2, "claim", n) && n == 5) {
                const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
                if (!v || (!eq && v[0] == '-')) hand_over();
                s->claims[s->nclaims++] = (char *)v;
                continue;
            }
            for (size_t k = 0; k < sizeof VALUE_OPTS / sizeof *VALUE_OPTS; k++)
                if (strlen(VALUE_OPTS[k].name) == n && !strncmp(a + 2, VALUE_OPTS[k].name, n)) opt = &VALUE_OPTS[k];
            if (!opt) hand_over();
            value = eq ? eq + 1 : NULL;
        } else {
            if (!seen_submit || a[2] == '=') hand_over(); /* argparse reads -q=X as -q X */
            if (!strcmp(a, "-r")) { s->rerunnable = 1; continue; }
            if (!strcmp(a, "-H")) { s->hold = 1; continue; }
            if (a[1] == 'n') {
                const char *v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
                if (!v || !positive(v, &s->slots)) hand_over();
                continue;
            }
            for (size_t k = 0; k < sizeof VALUE_OPTS / sizeof *VALUE_OPTS; k++)
                if (VALUE_OPTS[k].letter == a[1]) opt = &VALUE_OPTS[k];
            if (!opt) hand_over();
            value = a[2] ? a + 2 : NULL;
        }
        if (!value) {
            if (i + 1 >= argc || argv[i + 1][0] == '-') hand_over(); /* argparse's rules on '-' values */
            value = argv[++i];
        }
        *(const char **)((char *)s + opt->field) = value;
    }
    if (!seen_submit || i >= argc) hand_over(); /* no command: the Python CLI says what is missing */
    s->command = argv + i;
    s->ncommand = argc - i;
    /* what cmd_submit refuses before sending: let it say so */
    if ((s->cwd && !*s->cwd) || (s->out && !*s->out) || (s->err && !*s->err)) hand_over();
}

/* os.path.join(base, value) */
static char *path_join(const char *base, const char *value) {
    if (value[0] == '/') return strdup(value);
    Buf b = {0};
    buf_str(&b, base);
    if (!b.len || b.data[b.len - 1] != '/') buf_str(&b, "/");
    buf_str(&b, value);
    return b.data;
}

static void body_of(const Submit *s, Buf *b) {
    char here[PATH_MAX];
    if (!getcwd(here, sizeof here)) hand_over();
    buf_str(b, "{\"command\":");
    json_strings(b, s->command, s->ncommand);
    buf_fmt(b, ",\"slots\":%ld,\"resreq\":\"\",\"rerunnable\":%s,\"hold\":%s", s->slots,
            s->rerunnable ? "true" : "false", s->hold ? "true" : "false");
    const char *keys[] = {"name", "queue", "project"};
    const char *vals[] = {s->name, s->queue, s->project};
    for (int k = 0; k < 3; k++)
        if (vals[k]) {
            buf_fmt(b, ",\"%s\":", keys[k]);
            json_string(b, vals[k]);
        }
    char *cwd = s->cwd ? path_join(here, s->cwd) : NULL;
    const char *base = cwd ? cwd : here;
    if (cwd) { buf_str(b, ",\"cwd\":"); json_string(b, cwd); }
    if (s->out) { char *p = path_join(base, s->out); buf_str(b, ",\"stdout\":"); json_string(b, p); free(p); }
    if (s->err) { char *p = path_join(base, s->err); buf_str(b, ",\"stderr\":"); json_string(b, p); free(p); }
    free(cwd);
    buf_str(b, ",\"claims\":");
    json_strings(b, s->claims, s->nclaims);
    if (s->scratch && *s->scratch) { buf_str(b, ",\"scratch\":"); json_string(b, s->scratch); }
    if (s->app && *s->app) { buf_str(b, ",\"app\":"); json_string(b, s->app); }
    buf_str(b, ",\"stage_in\":[],\"stage_out\":[]}");
}

/* ------------------------------------------------------------------ HTTP (xce/client/_http.py) */

typedef struct {
    char host[256], port[8], prefix[1024];
} Target;

/* http://HOST[:PORT][/PREFIX] or HOST[:PORT]; 0 for anything the Python client should judge. */
static int parse_url(const char *url, Target *t) {
    const char *p = url;
    if (strstr(p, "://")) {
        if (strncmp(p, "http://", 7)) return 0;
        p += 7;
    }
    size_t hlen = strcspn(p, ":/?#@[]");
    if (!hlen || hlen >= sizeof t->host) return 0;
    memcpy(t->host, p, hlen);
    t->host[hlen] = '\0';
    p += hlen;
    snprintf(t->port, sizeof t->port, "80");
    if (*p == ':') {
        size_t plen = strspn(p + 1, "0123456789");
        if (!plen || plen > 5 || (p[1 + plen] && p[1 + plen] != '/')) return 0;
        memcpy(t->port, p + 1, plen);
        t->port[plen] = '\0';
        if (atoi(t->port) > 65535) return 0;
        p += 1 + plen;
    }
    if (*p && *p != '/') return 0;
    if (strpbrk(p, "?#%") || strlen(p) >= sizeof t->prefix) return 0;
    snprintf(t->prefix, sizeof t->prefix, "%s", p);
    size_t n = strlen(t->prefix);
    while (n && t->prefix[n - 1] == '/') t->prefix[--n] = '\0';
    return 1;
}

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("xce: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    return EXIT_REFUSED;
}

/* a connected socket, or -1 (then nothing was sent: the Python CLI may try and say why) */
static int connect_to(const Target *t) {
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(t->host, t->port, &hints, &res)) return -1;
    int fd = -1;
    struct timeval tv = {TIMEOUT_S, 0};
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (!connect(fd, ai->ai_addr, ai->ai_addrlen)) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* the whole response, read until the server closes (we ask it to) */
static int read_all(int fd, Buf *resp) {
    char chunk[16384];
    for (;;) {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n == 0) return 0;
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? -2 : -1;
        }
        buf_add(resp, chunk, (size_t)n);
    }
}

/* the body of a complete response (de-chunked if needed); NULL if it is incomplete */
static char *body_from(Buf *resp, int *status, char *reason, size_t reason_cap) {
    char *head_end = resp->data ? strstr(resp->data, "\r\n\r\n") : NULL;
    if (!head_end) return NULL;
    *head_end = '\0';
    char *body = head_end + 4;
    size_t have = resp->len - (size_t)(body - resp->data);
    if (sscanf(resp->data, "HTTP/%*s %d", status) != 1) return NULL;
    const char *r = strchr(resp->data, ' ');
    r = r ? strchr(r + 1, ' ') : NULL;
    snprintf(reason, reason_cap, "%.*s", r ? (int)strcspn(r + 1, "\r\n") : 0, r ? r + 1 : "");
    int chunked = 0;
    long length = -1;
    for (char *line = strstr(resp->data, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        if (!strncasecmp(line + 2, "content-length:", 15)) length = strtol(line + 17, NULL, 10);
        if (!strncasecmp(line + 2, "transfer-encoding:", 18) && strcasestr(line + 20, "chunked")) chunked = 1;
    }
    if (!chunked) {
        if (length >= 0 && (size_t)length > have) return NULL;
        if (length >= 0) body[length] = '\0';
        return body;
    }
    char *in = body, *out = body; /* in place: the decoded body is never longer */
    for (;;) {
        char *end;
        long size = strtol(in, &end, 16);
        char *eol = strstr(in, "\r\n");
        if (!eol || end == in || size < 0) return NULL;
        in = eol + 2;
        if (size == 0) break;
        if ((size_t)(resp->data + resp->len - in) < (size_t)size + 2) return NULL;
        memmove(out, in, (size_t)size);
        out += size;
        in += size + 2;
    }
    *out = '\0';
    return body;
}

static int submit(const Submit *s, const char *url, const char *token) {
    Target t;
    /* several controllers (URL1,URL2): following the leader is the Python client's, never ours */
    if (strchr(url, ',') || !parse_url(url, &t)) hand_over();
    Buf body = {0}, req = {0}, resp = {0};
    body_of(s, &body);
    int fd = connect_to(&t);
    if (fd < 0) hand_over(); /* nothing sent: the Python CLI says why, in its words */
    buf_fmt(&req, "POST %s/v1/jobs HTTP/1.1\r\nHost: %s:%s\r\n", t.prefix, t.host, t.port);
    buf_str(&req, "Authorization: Bearer ");
    buf_str(&req, token);
    buf_fmt(&req, "\r\nAccept: application/json\r\nUser-Agent: xce/native\r\nConnection: close\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", body.len);
    buf_add(&req, body.data, body.len);
    char shown[2048]; /* the URL as xce.client names it: stripped, no trailing slash */
    snprintf(shown, sizeof shown, "%s", url);
    for (size_t n = strlen(shown); n && shown[n - 1] == '/';) shown[--n] = '\0';
    for (size_t off = 0; off < req.len;) {
        ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return fail("cannot reach the controller at %s: %s", shown, strerror(errno));
        off += (size_t)n;
    }
    int rc = read_all(fd, &resp);
    close(fd);
    if (rc == -2) return fail("no answer from the controller at %s within %ds", shown, TIMEOUT_S);
    int status = 0;
    char reason[256];
    char *doc = rc == 0 ? body_from(&resp, &status, reason, sizeof reason) : NULL;
    if (!doc) return fail("the controller at %s closed the connection", shown);
    if (status < 200 || status >= 300) {
        const char *err = json_get(doc, "error"), *msg = err ? json_get(err, "message") : NULL;
        /* a standby: it did nothing and names the leader, which the Python CLI goes to */
        if (status == 503 && err && json_get(err, "leader")) hand_over();
        Buf m = {0};
        if (msg && json_read_string(msg, &m) && m.data) return fail("%s", m.data);
        return reason[0] ? fail("HTTP %d %s", status, reason) : fail("HTTP %d", status);
    }
    const char *id = json_get(doc, "id"), *queue = json_get(doc, "queue"), *parent = json_get(doc, "array_parent");
    Buf q = {0};
    long job_id;
    char *end;
    if (!id || !queue || !parent || !json_read_string(queue, &q) || !q.data || (job_id = strtol(id, &end, 10)) <= 0 ||
        !strchr(",} \r\n\t", *end))
        return fail("the controller sent a response that is not JSON (HTTP %d)", status);
    signal(SIGPIPE, SIG_IGN); /* `xce submit ... | head -0`: a closed pipe is not a failure (as in Python) */
    printf("Job <%ld> is submitted to queue <%s>%s.\n", job_id, q.data,
           strncmp(parent, "null", 4) ? " (job array)" : "");
    return fflush(stdout) && errno != EPIPE ? EXIT_REFUSED : 0;
}

int main(int argc, char **argv) {
    g_argv = argv;
    if (getenv("XCE_NATIVE") && !strcmp(getenv("XCE_NATIVE"), "0")) hand_over(); /* to compare, or to bypass */
    Submit s;
    parse_submit(argc, argv, &s);
    char *url, *token;
    resolve(s.url, s.token, s.config, &url, &token);
    return submit(&s, url, token);
}
