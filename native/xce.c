/*
 * xce: the native front of the xce command.
 *
 * A Python start-up with the CLI's imports costs ~40-100 ms, so a loop of `xce submit` processes
 * (what a loop of `sbatch` calls is compared to) spends nearly all of its time starting Python, and
 * `xce jobs` cannot answer in under 100 ms.  This front runs the two commonest one-shot commands
 * itself:
 *
 *   - `xce submit` with the options listed in parse_submit: it builds the request body the Python
 *     CLI builds (xce/cli/commands_jobs.py, cmd_submit), POSTs it to /v1/jobs and prints the same
 *     line, or the same error;
 *   - `xce jobs` with -a/--all, -u/--user, -q/--queue and --limit (parse_jobs): it sends cmd_jobs's
 *     GET /v1/jobs?...&view=brief, reads the whole answer, and prints what _show_jobs prints (the
 *     table of output.table, the --limit note, "No jobs found"), or the controller's refusal.
 *
 * Anything else it hands over untouched, by exec'ing the Python CLI (`python3 -m xce.cli.main`,
 * the interpreter beside this binary) with the same arguments: another command, an option it does
 * not know or an abbreviation of one, a value it would have to interpret (-R, --stage-*, an
 * array of digits argparse would read differently, a --limit above 10,000), --json, --state,
 * --done, --all-pages, help, a config file that is not plain `key = "value"` lines (`urls = [...]`
 * included), an https or IPv6 URL, several controllers (a comma in the URL), a controller it cannot
 * connect to, a standby's 503 naming the leader.  A listing is a read, so `xce jobs` also hands
 * over whatever answer it does not fully understand (not JSON as json.loads reads it, a field
 * missing or of another type, a status other than 200 or a 4xx with the controller's message, a
 * connection closed early, a non-ASCII byte to print): nothing is printed until the whole answer
 * is read, and asking again in Python is safe.  So the Python CLI stays the one definition of what
 * `xce` means; this is a fast path, never a second dialect.  tests/cli/test_native.py runs both on
 * the same argument lists and compares what reaches the controller and what the user sees.
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
#include <time.h>
#include <unistd.h>

#define TIMEOUT_S 30 /* xce.client's DEFAULT_TIMEOUT */
#define MAX_HEAD 65536 /* xce.client's MAX_HEAD: an answer whose status line and headers are longer is refused */
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

/* Enough to read the controller's answers as Python's json.loads reads them: a value is accepted only
 * if json.loads would accept it and decode it to the same thing, else the caller gives up (and hands
 * over where it still can).  Strings decode to UTF-8; a raw control character, a lone surrogate or a
 * \u0000 (which a C string cannot carry) is refused.  NaN and Infinity (Python's extensions) are too. */

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

/* A string at p (at its opening quote): decoded into out (if not NULL); returns the end, or NULL.
 * (The caller checks that the document is UTF-8: raw bytes are copied as they are.) */
static const char *json_read_string(const char *p, Buf *out) {
    if (*p != '"') return NULL;
    if (out) buf_add(out, "", 0); /* an empty string is "", not NULL */
    for (p++; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20) return NULL; /* the end, or a control character json.loads refuses */
        if (*p != '\\') {
            const char *run = p; /* a run of plain bytes at once */
            while (p[1] && p[1] != '"' && p[1] != '\\' && (unsigned char)p[1] >= 0x20) p++;
            if (out) buf_add(out, run, (size_t)(p - run + 1));
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
            if (cp == 0 || (cp >= 0xD800 && cp < 0xE000)) return NULL; /* NUL, or a lone surrogate */
            if (out) put_utf8(out, cp);
        } else {
            return NULL;
        }
    }
    return p + 1;
}

/* A number at p, as JSON spells one (json.loads's NUMBER_RE); its end, or NULL.  *integer: no
 * fraction, no exponent (json.loads makes it an int). */
static const char *json_number(const char *p, int *integer) {
    const char *d;
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return NULL;
    *integer = 1;
    if (*p == '.') {
        for (d = ++p; *p >= '0' && *p <= '9';) p++;
        if (p == d) return NULL;
        *integer = 0;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        for (d = p; *p >= '0' && *p <= '9';) p++;
        if (p == d) return NULL;
        *integer = 0;
    }
    return p;
}

static const char *json_skip_in(const char *p, int depth) {
    p = ws(p);
    if (*p == '"') return json_read_string(p, NULL);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        if (depth > 64) return NULL; /* deeper than any answer of ours (and than the C stack likes) */
        p = ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = json_read_string(ws(p), NULL);
                if (!p || *(p = ws(p)) != ':') return NULL;
                p++;
            }
            if (!(p = json_skip_in(p, depth + 1))) return NULL;
            p = ws(p);
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (!strncmp(p, words[i], strlen(words[i]))) return p + strlen(words[i]);
    int integer;
    return json_number(p, &integer);
}

static const char *json_skip(const char *p) { return json_skip_in(p, 0); }

/* Whether doc (len bytes) is one JSON document and nothing else, in UTF-8, as json.loads takes it. */
static int json_whole(const char *doc, size_t len) {
    if (strlen(doc) != len || !utf8_ok((const unsigned char *)doc)) return 0;
    const char *end = json_skip(doc);
    return end && !*ws(end);
}

/* The value of a top-level key of the object at doc (NULL: absent or not an object); of a key
 * given twice, the last, as json.loads keeps. */
static const char *json_get(const char *doc, const char *key) {
    const char *p = ws(doc), *found = NULL;
    if (*p != '{') return NULL;
    p = ws(p + 1);
    if (*p == '}') return NULL;
    for (;;) {
        Buf k = {0};
        p = json_read_string(ws(p), &k);
        int match = p && strcmp(k.data, key) == 0;
        free(k.data);
        if (!p || *(p = ws(p)) != ':') return NULL;
        p = ws(p + 1);
        if (match) found = p;
        if (!(p = json_skip(p))) return NULL;
        p = ws(p);
        if (*p == '}') return found;
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
static char *body_from(Buf *resp, int *status, char *reason, size_t reason_cap, size_t *len) {
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
        *len = length >= 0 ? (size_t)length : have;
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
    *len = (size_t)(out - body);
    return body;
}

/* One exchange with the controller: the request (method, target below the URL's prefix, a JSON body
 * or none), the answer's status, reason and body. */
typedef struct {
    int status;
    char reason[256];
    char *doc; /* the body, NUL-terminated */
    size_t len; /* its length (more than strlen(doc) if it holds a NUL) */
} Answer;

enum { ANSWERED, NOT_SENT, SEND_FAILED, NO_ANSWER, CLOSED, HEAD_TOO_LARGE };

static char g_shown[2048]; /* the URL as xce.client names it: stripped, no trailing slash */
static int g_errno;        /* why a send failed */

static int call(const char *url, const char *token, const char *method, const char *target, const Buf *body,
                Answer *ans) {
    Target t;
    /* several controllers (URL1,URL2): following the leader is the Python client's, never ours */
    if (strchr(url, ',') || !parse_url(url, &t)) hand_over();
    snprintf(g_shown, sizeof g_shown, "%s", url);
    for (size_t n = strlen(g_shown); n && g_shown[n - 1] == '/';) g_shown[--n] = '\0';
    int fd = connect_to(&t);
    if (fd < 0) return NOT_SENT;
    Buf req = {0}, resp = {0};
    buf_str(&req, method);
    buf_str(&req, " ");
    buf_str(&req, t.prefix);
    buf_str(&req, target);
    buf_fmt(&req, " HTTP/1.1\r\nHost: %s:%s\r\n", t.host, t.port);
    buf_str(&req, "Authorization: Bearer ");
    buf_str(&req, token);
    buf_str(&req, "\r\nAccept: application/json\r\nUser-Agent: xce/native\r\nConnection: close\r\n");
    if (body) buf_fmt(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", body->len);
    else buf_str(&req, "Content-Length: 0\r\n\r\n");
    if (body) buf_add(&req, body->data, body->len);
    for (size_t off = 0; off < req.len;) {
        ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            g_errno = errno;
            close(fd);
            return SEND_FAILED;
        }
        off += (size_t)n;
    }
    free(req.data);
    int rc = read_all(fd, &resp);
    close(fd);
    if (rc == -2) return NO_ANSWER;
    /* no end of the headers within MAX_HEAD bytes: refused, as the Python client refuses it */
    if (rc == 0 && resp.len >= MAX_HEAD + 4 && !memmem(resp.data, MAX_HEAD + 4, "\r\n\r\n", 4)) return HEAD_TOO_LARGE;
    ans->doc = rc == 0 ? body_from(&resp, &ans->status, ans->reason, sizeof ans->reason, &ans->len) : NULL;
    return ans->doc ? ANSWERED : CLOSED;
}

static int submit(const Submit *s, const char *url, const char *token) {
    Buf body = {0};
    Answer ans;
    body_of(s, &body);
    switch (call(url, token, "POST", "/v1/jobs", &body, &ans)) {
    case NOT_SENT: hand_over(); /* nothing sent: the Python CLI says why, in its words */
    case SEND_FAILED: return fail("cannot reach the controller at %s: %s", g_shown, strerror(g_errno));
    case NO_ANSWER: return fail("no answer from the controller at %s within %ds", g_shown, TIMEOUT_S);
    case CLOSED: return fail("the controller at %s closed the connection", g_shown);
    case HEAD_TOO_LARGE: return fail("the controller sent a response header larger than %d bytes", MAX_HEAD);
    }
    int status = ans.status;
    const char *doc = ans.doc;
    if (status < 200 || status >= 300) {
        const char *err = json_get(doc, "error"), *msg = err ? json_get(err, "message") : NULL;
        /* a standby: it did nothing and names the leader, which the Python CLI goes to */
        if (status == 503 && err && json_get(err, "leader")) hand_over();
        Buf m = {0};
        if (msg && json_read_string(msg, &m)) return fail("%s", m.data);
        return ans.reason[0] ? fail("HTTP %d %s", status, ans.reason) : fail("HTTP %d", status);
    }
    const char *id = json_get(doc, "id"), *queue = json_get(doc, "queue"), *parent = json_get(doc, "array_parent");
    Buf q = {0};
    long job_id;
    char *end;
    if (!id || !queue || !parent || !json_read_string(queue, &q) || (job_id = strtol(id, &end, 10)) <= 0 ||
        !strchr(",} \r\n\t", *end))
        return fail("the controller sent a response that is not JSON (HTTP %d)", status);
    signal(SIGPIPE, SIG_IGN); /* `xce submit ... | head -0`: a closed pipe is not a failure (as in Python) */
    printf("Job <%ld> is submitted to queue <%s>%s.\n", job_id, q.data,
           strncmp(parent, "null", 4) ? " (job array)" : "");
    return fflush(stdout) && errno != EPIPE ? EXIT_REFUSED : 0;
}

/* ------------------------------------------------------------------ xce jobs (cmd_jobs, _show_jobs) */

#define LIST_LIMIT 1000      /* commands_jobs.LIST_LIMIT */
#define MAX_LIST_LIMIT 10000 /* commands_jobs.MAX_LIST_LIMIT: above it the Python CLI says no */

typedef struct {
    char *url, *token, *config;
    int all;
    char *user, *queue, *limit_text;
    long limit;
} Jobs;

/* `xce [global options] jobs [-a] [-u USER] [-q QUEUE] [--limit N]` in the forms argparse reads the
 * same way for certain (as parse_submit); anything else (--json, --state, --done, --all-pages, the
 * history options, help, an abbreviation...) goes to the Python CLI. */
static void parse_jobs(int argc, char **argv, Jobs *j) {
    memset(j, 0, sizeof *j);
    int seen_jobs = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            if (seen_jobs || strcmp(a, "jobs")) hand_over(); /* another command, or a stray argument */
            seen_jobs = 1;
            continue;
        }
        char **slot = NULL;
        const char *value = NULL;
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t n = eq ? (size_t)(eq - name) : strlen(name);
#define IS(word) (n == strlen(word) && !strncmp(name, word, n))
            if (!eq && seen_jobs && IS("all")) { j->all = 1; continue; }
            if (IS("url")) slot = &j->url;
            else if (IS("token")) slot = &j->token;
            else if (IS("config")) slot = &j->config;
            else if (seen_jobs && IS("user")) slot = &j->user;
            else if (seen_jobs && IS("queue")) slot = &j->queue;
            else if (seen_jobs && IS("limit")) slot = &j->limit_text;
            else hand_over(); /* "--" too */
#undef IS
            value = eq ? eq + 1 : NULL;
        } else {
            if (!seen_jobs || a[2] == '=') hand_over(); /* argparse reads -q=X as -q X */
            if (!strcmp(a, "-a")) { j->all = 1; continue; }
            if (a[1] == 'u') slot = &j->user;
            else if (a[1] == 'q') slot = &j->queue;
            else hand_over(); /* -aq..., -s, -h, ... */
            value = a[2] ? a + 2 : NULL;
        }
        if (!value) {
            if (i + 1 >= argc || argv[i + 1][0] == '-') hand_over(); /* argparse's rules on '-' values */
            value = argv[++i];
        }
        *slot = (char *)value;
    }
    if (!seen_jobs) hand_over();
    j->limit = LIST_LIMIT;
    /* --limit above the largest page is a usage error: the Python CLI's to say */
    if (j->limit_text && (!positive(j->limit_text, &j->limit) || j->limit > MAX_LIST_LIMIT)) hand_over();
    /* values go into the URL as UTF-8: other bytes are Python's to judge */
    if ((j->user && !utf8_ok((unsigned char *)j->user)) || (j->queue && !utf8_ok((unsigned char *)j->queue)))
        hand_over();
}

/* urllib.parse.quote(value, safe="") */
static void quote(Buf *b, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("_.-~", *p))
            buf_add(b, (const char *)p, 1);
        else
            buf_fmt(b, "%%%02X", *p);
    }
}

/* Whether s is ASCII: what this front prints.  Names the controller sends are [a-z0-9-_.] (check_name)
 * and its messages are English; anything else would be printed in the encoding of Python's stdio,
 * which the locale and PYTHON* settings decide: the Python CLI's to print. */
static int ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 0;
    return 1;
}

/* One row of the listing: the job's id (the sort key) and the table's cells, as _show_jobs has them. */
#define NCOLS 8
static const char *const HEADERS[NCOLS] = {"JOBID", "USER", "STAT", "QUEUE", "NAME", "SLOTS", "EXEC_HOST",
                                            "SUBMIT_TIME"};
typedef struct {
    long long id;
    size_t index; /* its place in the answer: sorted() is stable */
    char *cells[NCOLS];
} Row;

/* output.when(): time.strftime("%b %d %H:%M:%S", time.localtime(ts)); 0 for a time it would not
 * take calmly (the Python CLI then says what it says) */
static int when(const char *num, char *out, size_t cap) {
    char *end;
    errno = 0;
    double ts = strtod(num, &end); /* correctly rounded, as float() */
    if (errno || !(ts >= 0 && ts < 1e11)) return 0;
    time_t t = (time_t)ts; /* localtime() floors a float: truncation, as ts >= 0 */
    struct tm tm;
    return localtime_r(&t, &tm) && strftime(out, cap, "%b %d %H:%M:%S", &tm) > 0;
}

/* A cell as table() prints it: "-" for None or "". */
static char *cell(const char *s) { return strdup(s && *s ? s : "-"); }

/* One object of the answer's list into row; NULL if it is not one json.loads and _show_jobs would
 * read the same way (a field missing or of another type: the Python CLI says what happens then). */
static const char *parse_row(const char *p, Row *row) {
    enum { ID = NCOLS, FIELDS };
    /* the fields' cell, in HEADERS' order; ID only sorts */
    static const char *const keys[FIELDS] = {"display_id", "user", "state", "queue", "name", "slots", "hosts",
                                             "submit_time", "id"};
    int have[FIELDS] = {0};
    if (*(p = ws(p)) != '{') return NULL;
    p = ws(p + 1);
    if (*p == '}') return NULL; /* no fields at all */
    for (;;) {
        Buf key = {0};
        p = json_read_string(ws(p), &key);
        if (!p || *(p = ws(p)) != ':') { free(key.data); return NULL; }
        p = ws(p + 1);
        int k = 0;
        while (k < FIELDS && strcmp(keys[k], key.data)) k++;
        free(key.data);
        const char *end = NULL;
        char *value = NULL;
        int integer = 0;
        if (k == FIELDS) {
            end = json_skip(p); /* another field: not shown */
        } else if (!strncmp(p, "null", 4) && k != ID) {
            end = p + 4; /* None: "-" (hosts: "" and so "-" too) */
            value = cell(NULL);
        } else if (k <= 4) { /* display_id, user, state, queue, name: strings */
            Buf b = {0};
            if ((end = json_read_string(p, &b))) value = cell(b.data);
            free(b.data);
        } else if (k == 5 || k == ID) { /* slots, id: non-negative ints (str() of one is its digits) */
            end = json_number(p, &integer);
            if (end && integer && *p != '-' && end - p <= 18) value = strndup(p, (size_t)(end - p));
            if (value && k == ID) {
                row->id = atoll(value);
                free(value);
                value = strdup("");
            }
        } else if (k == 6) { /* hosts: a list of strings, joined by "," */
            Buf b = {0};
            buf_add(&b, "", 0);
            if (*p == '[') {
                const char *q = ws(p + 1);
                if (*q == ']') end = q + 1;
                else
                    for (int first = 1;; first = 0) {
                        if (!first) buf_str(&b, ",");
                        if (!(q = json_read_string(q, &b))) break;
                        q = ws(q);
                        if (*q == ']') { end = q + 1; break; }
                        if (*q != ',') break;
                        q = ws(q + 1);
                    }
                if (end) value = cell(b.data);
            }
            free(b.data);
        } else { /* submit_time: a number */
            char text[64];
            end = json_number(p, &integer);
            if (end && end - p < 40) {
                char shown[64];
                snprintf(text, sizeof text, "%.*s", (int)(end - p), p);
                if (when(text, shown, sizeof shown)) value = strdup(shown);
            }
        }
        if (!end || (k < FIELDS && !value)) { free(value); return NULL; }
        if (k < FIELDS) {
            if (k < NCOLS) {
                free(row->cells[k]); /* a key given twice: the last, as json.loads keeps */
                row->cells[k] = value;
            } else {
                free(value);
            }
            have[k] = 1;
        }
        p = ws(end);
        if (*p == '}') break;
        if (*p != ',') return NULL;
        p++;
    }
    for (int k = 0; k < FIELDS; k++)
        if (!have[k]) return NULL;
    return p + 1;
}

/* The answer's list of rows; 0 if it is not a list of such rows. */
static int parse_rows(const char *doc, Row **rows, size_t *n) {
    size_t cap = 64;
    *n = 0;
    *rows = calloc(cap, sizeof **rows);
    if (!*rows) exit(EXIT_REFUSED);
    const char *p = ws(doc);
    if (*p != '[') return 0;
    p = ws(p + 1);
    if (*p == ']') return !*ws(p + 1);
    for (;;) {
        if (*n == cap) {
            Row *r = realloc(*rows, (cap *= 2) * sizeof **rows);
            if (!r) exit(EXIT_REFUSED);
            memset(r + *n, 0, (cap - *n) * sizeof *r);
            *rows = r;
        }
        Row *row = &(*rows)[*n];
        row->index = (*n)++;
        if (!(p = parse_row(p, row))) return 0;
        p = ws(p);
        if (*p == ']') return !*ws(p + 1);
        if (*p != ',') return 0;
        p++;
    }
}

static int by_id(const void *a, const void *b) {
    const Row *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* output.table(): left-aligned columns, two spaces apart, each line rstrip()ed.  The last column is a
 * time, "-" or its header, none of which ends in whitespace: rstrip() takes exactly its padding, so
 * the last column is not padded.  (Widths in bytes: the caller prints only ASCII.) */
static void table(Buf *out, Row *rows, size_t n) {
    size_t widths[NCOLS];
    for (int c = 0; c < NCOLS; c++) {
        widths[c] = strlen(HEADERS[c]);
        for (size_t r = 0; r < n; r++)
            if (strlen(rows[r].cells[c]) > widths[c]) widths[c] = strlen(rows[r].cells[c]);
    }
    for (size_t r = 0; r <= n; r++) {
        for (int c = 0; c < NCOLS; c++) {
            const char *s = r == 0 ? HEADERS[c] : rows[r - 1].cells[c];
            buf_str(out, s);
            if (c < NCOLS - 1)
                for (size_t pad = widths[c] - strlen(s) + 2; pad--;) buf_add(out, " ", 1);
        }
        buf_str(out, "\n");
    }
}

static int jobs(const Jobs *j, const char *url, const char *token) {
    Buf target = {0};
    /* cmd_jobs's parameters in its order; None ones left out */
    buf_str(&target, "/v1/jobs?");
    if (j->all) buf_str(&target, "all=true&");
    if (j->user) { buf_str(&target, "user="); quote(&target, j->user); buf_str(&target, "&"); }
    if (j->queue) { buf_str(&target, "queue="); quote(&target, j->queue); buf_str(&target, "&"); }
    buf_fmt(&target, "view=brief&limit=%ld", j->limit);
    Answer ans;
    switch (call(url, token, "GET", target.data, NULL, &ans)) {
    case ANSWERED: break;
    /* (waiting as long again in Python would only say the same) */
    case NO_ANSWER: return fail("no answer from the controller at %s within %ds", g_shown, TIMEOUT_S);
    default: hand_over(); /* a read: asking again in Python is safe, and it says why, in its words */
    }
    /* nothing is printed before the whole answer is read: until then the Python CLI may still answer */
    if (!json_whole(ans.doc, ans.len)) hand_over();
    if (ans.status >= 400 && ans.status < 500) { /* refused: the controller's message, exit 1 */
        const char *err = json_get(ans.doc, "error"), *msg = err ? json_get(err, "message") : NULL;
        Buf m = {0};
        if (!msg || !json_read_string(msg, &m) || !ascii(m.data)) hand_over();
        return fail("%s", m.data);
    }
    if (ans.status != 200) hand_over(); /* a standby naming the leader, a store that is down... */
    Row *rows;
    size_t n;
    if (!parse_rows(ans.doc, &rows, &n)) hand_over();
    if (n == 0) {
        fputs("No jobs found\n", stderr);
        return 0;
    }
    qsort(rows, n, sizeof *rows, by_id);
    Buf out = {0};
    table(&out, rows, n);
    if (!ascii(out.data)) hand_over();
    if (n == (size_t)j->limit)
        fprintf(stderr, "(the newest %ld jobs that match: --limit N or --all-pages for more)\n", j->limit);
    signal(SIGPIPE, SIG_IGN); /* `xce jobs | head`: a closed pipe is not a failure (as in Python) */
    size_t done = fwrite(out.data, 1, out.len, stdout);
    return (done < out.len || fflush(stdout)) && errno != EPIPE ? EXIT_REFUSED : 0;
}

/* The command word: the first argument that is not an option or a connection option's value. */
static const char *command_of(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) return NULL;
        if (!strcmp(a, "--url") || !strcmp(a, "--token") || !strcmp(a, "--config")) i++;
        else if (a[0] != '-' || !a[1]) return a;
    }
    return NULL;
}

int main(int argc, char **argv) {
    g_argv = argv;
    if (getenv("XCE_NATIVE") && !strcmp(getenv("XCE_NATIVE"), "0")) hand_over(); /* to compare, or to bypass */
    const char *command = command_of(argc, argv);
    char *url, *token;
    if (command && !strcmp(command, "jobs")) {
        Jobs j;
        parse_jobs(argc, argv, &j);
        resolve(j.url, j.token, j.config, &url, &token);
        return jobs(&j, url, token);
    }
    Submit s;
    parse_submit(argc, argv, &s); /* (hands over anything but submit) */
    resolve(s.url, s.token, s.config, &url, &token);
    return submit(&s, url, token);
}
