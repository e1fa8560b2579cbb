/* Status strings, version, kinds, keys, units, time and allocation. */
#include <ctype.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util/common.h"

KCACHE_API const char *kcache_strerror(int status)
{
    switch (status) {
    case KCACHE_OK: return "success";
    case KCACHE_ENOTFOUND: return "not found";
    case KCACHE_EINVAL: return "invalid argument";
    case KCACHE_ENOMEM: return "out of memory";
    case KCACHE_EIO: return "file system error";
    case KCACHE_EBUSY: return "database locked by another process";
    case KCACHE_ECORRUPT: return "damaged data found";
    case KCACHE_EFOREIGN: return "not a kcache database";
    case KCACHE_EVERSION: return "written by a newer kcache";
    case KCACHE_EREADONLY: return "store is read-only";
    case KCACHE_EFULL: return "disk full";
    case KCACHE_ECOMPILE: return "compile error";
    case KCACHE_ENOTSUP: return "not supported here";
    case KCACHE_EAMBIGUOUS: return "ambiguous key prefix";
    case KCACHE_EDISABLED: return "cache disabled";
    }
    return "unknown error";
}

#define KC_STR2(x) #x
#define KC_STR(x) KC_STR2(x)

KCACHE_API const char *kcache_version(void)
{
    return KC_STR(KCACHE_VERSION_MAJOR) "." KC_STR(KCACHE_VERSION_MINOR) "." KC_STR(
        KCACHE_VERSION_PATCH);
}

static const char *const kind_names[] = {NULL, "cubin", "ptx", "ltoir", "data"};

KCACHE_API const char *kcache_kind_name(kcache_kind kind)
{
    if ((int)kind < 1 || (size_t)kind >= KC_ARRAY_SIZE(kind_names))
        return NULL;
    return kind_names[kind];
}

KCACHE_API int kcache_kind_parse(kcache_kind *out, const char *name)
{
    if (!out || !name)
        return KCACHE_EINVAL;
    for (size_t i = 1; i < KC_ARRAY_SIZE(kind_names); i++) {
        if (strcmp(name, kind_names[i]) == 0) {
            *out = (kcache_kind)i;
            return 0;
        }
    }
    return KCACHE_EINVAL;
}

KCACHE_API void kcache_key_hex(char out[KCACHE_KEY_HEX_SIZE], const kcache_key *key)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < KCACHE_KEY_SIZE; i++) {
        out[2 * i] = digits[key->bytes[i] >> 4];
        out[2 * i + 1] = digits[key->bytes[i] & 15];
    }
    out[2 * KCACHE_KEY_SIZE] = '\0';
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

KCACHE_API int kcache_key_parse(kcache_key *out, const char *hex)
{
    if (!out || !hex || strlen(hex) != 2 * KCACHE_KEY_SIZE)
        return KCACHE_EINVAL;
    for (size_t i = 0; i < KCACHE_KEY_SIZE; i++) {
        int hi = hex_value((unsigned char)hex[2 * i]);
        int lo = hex_value((unsigned char)hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return KCACHE_EINVAL;
        out->bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/*
 * Parses a non-negative decimal number with an optional fraction, then a
 * unit from the table. Shared by sizes and ages so that both accept the same
 * shapes ("1.5G", "2 GiB", "30d").
 */
struct unit {
    const char *name;
    uint64_t scale;
};

static int parse_scaled(uint64_t *out, const char *text, const struct unit *units, size_t n_units)
{
    if (!out || !text)
        return KCACHE_EINVAL;
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    /* Digits first: no sign, no "0x", no "nan" or "inf", whatever strtod would take. */
    if (!isdigit((unsigned char)*p) && *p != '.')
        return KCACHE_EINVAL;
    uint64_t whole = 0;
    while (isdigit((unsigned char)*p)) {
        uint64_t digit = (uint64_t)(*p++ - '0');
        if (whole > (UINT64_MAX - digit) / 10)
            return KCACHE_EINVAL;
        whole = whole * 10 + digit;
    }
    double frac = 0.0, place = 0.1;
    int has_frac_digits = 0;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            frac += place * (*p++ - '0');
            place /= 10;
            has_frac_digits = 1;
        }
        if (!has_frac_digits)
            return KCACHE_EINVAL;
    }
    while (isspace((unsigned char)*p))
        p++;
    const char *u = p;
    size_t ulen = strlen(u);
    while (ulen > 0 && isspace((unsigned char)u[ulen - 1]))
        ulen--;
    for (size_t i = 0; i < n_units; i++) {
        if (strlen(units[i].name) != ulen || strncasecmp(u, units[i].name, ulen) != 0)
            continue;
        uint64_t scale = units[i].scale;
        if (whole != 0 && scale > UINT64_MAX / whole)
            return KCACHE_EINVAL;
        double extra = frac * (double)scale;
        uint64_t total = whole * scale;
        if (extra > 0 && extra >= (double)(UINT64_MAX - total))
            return KCACHE_EINVAL;
        *out = total + (uint64_t)llround(extra);
        return 0;
    }
    return KCACHE_EINVAL;
}

KCACHE_API int kcache_parse_size(uint64_t *out, const char *text)
{
    /* A unit is binary in each of its three spellings: 1K, 1KB and 1KiB are 1024 bytes.
     * A bare number is GiB, as ccache reads one: "-M 5" is 5 GiB, never 5 bytes. */
#define KC_BINARY_UNIT(p, shift)                                                                   \
    {p, UINT64_C(1) << (shift)}, {p "B", UINT64_C(1) << (shift)}, {p "iB", UINT64_C(1) << (shift)}
    static const struct unit units[] = {
        {"", UINT64_C(1) << 30},
        {"B", 1},
        KC_BINARY_UNIT("K", 10),
        KC_BINARY_UNIT("M", 20),
        KC_BINARY_UNIT("G", 30),
        KC_BINARY_UNIT("T", 40),
    };
#undef KC_BINARY_UNIT
    int rc = parse_scaled(out, text, units, KC_ARRAY_SIZE(units));
    /* A bare number past a PiB was meant as bytes (kcache read them so once):
     * refused, so that 10000000000 is not taken as a cap of 9.31 EiB. */
    if (!rc && strspn(text, "0123456789.") == strlen(text) && *out > (UINT64_C(1) << 50))
        return KCACHE_EINVAL;
    return rc;
}

KCACHE_API int kcache_parse_max_size(uint64_t *out, const char *text)
{
    /* As ccache's -M 0: a cap of nothing would evict everything, so 0 is
     * taken to mean what a user typing it means, no cap at all. */
    static const char *const none[] = {"0", "none", "unlimited"};
    for (size_t i = 0; text && i < KC_ARRAY_SIZE(none); i++)
        if (!strcasecmp(text, none[i])) {
            *out = UINT64_MAX;
            return 0;
        }
    uint64_t n;
    if (kcache_parse_size(&n, text) != 0 || n == 0)
        return KCACHE_EINVAL;
    *out = n;
    return 0;
}

KCACHE_API int kcache_parse_age(uint64_t *out, const char *text)
{
    static const struct unit units[] = {
        {"s", 1},     {"sec", 1},     {"m", 60},        {"min", 60},
        {"h", 3600},  {"hour", 3600}, {"d", 86400},     {"day", 86400},
        {"w", 604800}, {"week", 604800},
    };
    /* An age becomes milliseconds before now: past KCACHE_AGE_MAX that would overflow. */
    uint64_t n;
    if (!out || parse_scaled(&n, text, units, KC_ARRAY_SIZE(units)) || n > KCACHE_AGE_MAX)
        return KCACHE_EINVAL;
    *out = n;
    return 0;
}

KCACHE_API int kcache_parse_count(uint64_t *out, const char *text, uint64_t min, uint64_t max)
{
    static const struct unit units[] = {{"", 1}};
    uint64_t n;
    /* The grammar of sizes without a unit or a fraction: a count is whole. */
    if (!out || !text || strchr(text, '.') || parse_scaled(&n, text, units, KC_ARRAY_SIZE(units)) || n < min ||
        n > max)
        return KCACHE_EINVAL;
    *out = n;
    return 0;
}

KCACHE_API char *kcache_format_size(char *buf, size_t size, uint64_t bytes)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (!buf || size == 0)
        return buf;
    if (bytes < 1024) {
        snprintf(buf, size, "%u B", (unsigned)bytes);
        return buf;
    }
    double v = (double)bytes;
    size_t i = 0;
    /* 1023.5 and up would print as "1024" of this unit: that is the next unit. */
    while (v >= 1023.5 && i + 1 < KC_ARRAY_SIZE(names)) {
        v /= 1024.0;
        i++;
    }
    snprintf(buf, size, v < 10.0 ? "%.2f %s" : v < 100.0 ? "%.1f %s" : "%.0f %s", v, names[i]);
    return buf;
}

void *kc_malloc(size_t size)
{
    return malloc(size ? size : 1);
}

void *kc_calloc(size_t n, size_t size)
{
    return calloc(n ? n : 1, size ? size : 1);
}

void *kc_realloc(void *p, size_t size)
{
    return realloc(p, size ? size : 1);
}

char *kc_memdup(const void *p, size_t size)
{
    char *copy = kc_malloc(size + 1);
    if (!copy)
        return NULL;
    if (size)
        memcpy(copy, p, size);
    copy[size] = '\0';
    return copy;
}

void *kc_grow(void *p, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return p;
    size_t c = *cap ? 2 * *cap : first;
    if (c <= n)
        c = n + 1;
    if (c > SIZE_MAX / elem)
        return NULL;
    void *q = kc_realloc(p, c * elem);
    if (q)
        *cap = c;
    return q;
}

int kc_strv_push(char ***v, size_t *n, const char *s)
{
    char **grown = kc_realloc(*v, (*n + 1) * sizeof(char *));
    if (!grown)
        return KCACHE_ENOMEM;
    *v = grown;
    if (!(grown[*n] = kc_strdup(s)))
        return KCACHE_ENOMEM;
    (*n)++;
    return 0;
}

int kc_strv_push_owned(char ***v, size_t *n, char *s)
{
    char **grown = kc_realloc(*v, (*n + 1) * sizeof(char *));
    if (!grown)
        return KCACHE_ENOMEM;
    *v = grown;
    grown[(*n)++] = s;
    return 0;
}

void kc_strv_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

char *kc_strdup(const char *s)
{
    return kc_memdup(s ? s : "", s ? strlen(s) : 0);
}

char *kc_path_dir(const char *path)
{
    char *dir = kc_strdup(path);
    if (!dir)
        return NULL;
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    return dir;
}

const char *kc_errmsg_of(const char *errmsg, const char *absent)
{
    if (!errmsg)
        return absent;
    return errmsg[0] ? errmsg : "no error";
}

int kc_fmt(char *buf, size_t size, int code, const char *fmt, ...)
{
    if (buf && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, size, fmt, ap);
        va_end(ap);
        /* Messages are one line: a path or a compiler string must not break that. */
        for (char *p = buf; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    }
    return code;
}

int64_t kc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t kc_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int kc_buf_reserve(kc_buf *b, size_t extra)
{
    if (b->cap - b->size >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->size < extra) {
        if (cap > SIZE_MAX / 2)
            return KCACHE_ENOMEM;
        cap *= 2;
    }
    uint8_t *p = kc_realloc(b->data, cap);
    if (!p)
        return KCACHE_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int kc_buf_append(kc_buf *b, const void *p, size_t n)
{
    int rc = kc_buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->size, p, n);
    b->size += n;
    return 0;
}

int kc_buf_append_u32(kc_buf *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return kc_buf_append(b, le, 4);
}

uint32_t kc_read_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void kc_buf_free(kc_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->size = b->cap = 0;
}

int kc_read_file_stat(const char *path, uint64_t max, char **out, size_t *size,
                       struct stat *st_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return KCACHE_EIO;
    struct stat st;
    char *buf = NULL;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = KCACHE_EIO;
        goto out;
    }
    if (st_out)
        *st_out = st;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        rc = KCACHE_EINVAL;
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (!(buf = kc_malloc(n + 1))) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = KCACHE_EIO;
            goto out;
        }
        if (k == 0)
            break; /* the file shrank meanwhile: what was read is what there is */
        got += (size_t)k;
    }
    buf[got] = '\0';
    *out = buf;
    *size = got;
    buf = NULL;
out:
    {
        int saved = errno;
        free(buf);
        close(fd);
        errno = saved;
    }
    return rc;
}

int kc_read_file(const char *path, uint64_t max, char **out, size_t *size)
{
    return kc_read_file_stat(path, max, out, size, NULL);
}

int kc_version_check(char *msg, size_t size, const char *type, unsigned version, unsigned max)
{
    if (version >= 1 && version <= max)
        return 0;
    char init[64], known[32];
    size_t i = 0;
    for (; type[i] && i + 1 < sizeof(init); i++)
        init[i] = (char)toupper((unsigned char)type[i]);
    init[i] = '\0';
    if (max == 1)
        snprintf(known, sizeof(known), "1");
    else
        snprintf(known, sizeof(known), "1..%u", max);
    return kc_fmt(msg, size, KCACHE_EINVAL,
                  "%s version %u is not one this library knows (%s): initialise it with %s_INIT "
                  "or %s_init()",
                  type, version, known, init, type);
}

int kc_init_versioned(void *out, unsigned version, const size_t *sizes, size_t n)
{
    if (!out || version < 1 || version > n)
        return KCACHE_EINVAL;
    memset(out, 0, sizes[version - 1]);
    return 0;
}

/* This thread's last failure and the handle it was on (kc_errmsg_note()). */
static _Thread_local const void *errmsg_owner;
static _Thread_local char errmsg_text[KC_ERRMSG_SIZE];

void kc_errmsg_note(const void *owner, const char *msg)
{
    errmsg_owner = owner;
    snprintf(errmsg_text, sizeof(errmsg_text), "%s", msg);
}

const char *kc_errmsg_thread(const void *owner, const char *shared, pthread_mutex_t *lock,
                             const char *absent)
{
    if (!owner)
        return absent;
    if (errmsg_owner != owner) {
        if (lock)
            pthread_mutex_lock(lock);
        snprintf(errmsg_text, sizeof(errmsg_text), "%s", shared[0] ? shared : "no error");
        if (lock)
            pthread_mutex_unlock(lock);
        errmsg_owner = owner;
    }
    return errmsg_text;
}

void kc_errmsg_forget(const void *owner)
{
    if (errmsg_owner == owner)
        errmsg_owner = NULL;
}

void kc_logq_add(kc_logq *q, int level, const char *text)
{
    struct kc_logq_msg *grown = NULL;
    char *copy = NULL;
    if (q->n < KC_LOGQ_MAX && (grown = kc_grow(q->v, &q->cap, q->n, sizeof(*grown), 4)))
        q->v = grown;
    if (!grown || !(copy = kc_strdup(text))) {
        q->left_out++;
        return;
    }
    q->v[q->n].level = level;
    q->v[q->n].text = copy;
    q->n++;
}

kc_logq kc_logq_take(kc_logq *q)
{
    kc_logq taken = *q;
    memset(q, 0, sizeof(*q));
    return taken;
}

/* This thread's holds (kc_log_hold()) and what waits for the last to go. */
static _Thread_local unsigned log_holds;
static _Thread_local struct held_log {
    kc_logq q;
    kcache_log_fn log;
    void *userdata;
} *held;
static _Thread_local size_t n_held, cap_held;

static void deliver_now(kc_logq *q, kcache_log_fn log, void *userdata)
{
    const void *owner = errmsg_owner;
    char text[KC_ERRMSG_SIZE];
    memcpy(text, errmsg_text, sizeof(text));
    for (size_t i = 0; i < q->n; i++) {
        if (log)
            log(userdata, q->v[i].level, q->v[i].text);
        free(q->v[i].text);
    }
    if (log && q->left_out) {
        char msg[96];
        snprintf(msg, sizeof(msg), "%zu more messages of this call left out", q->left_out);
        log(userdata, KCACHE_LOG_WARNING, msg);
    }
    free(q->v);
    memset(q, 0, sizeof(*q));
    errmsg_owner = owner;
    memcpy(errmsg_text, text, sizeof(text));
}

void kc_logq_deliver(kc_logq *q, kcache_log_fn log, void *userdata)
{
    if (!q->n && !q->left_out) {
        free(q->v);
        memset(q, 0, sizeof(*q));
        return;
    }
    if (log_holds && log) {
        struct held_log *grown = kc_grow(held, &cap_held, n_held, sizeof(*held), 4);
        if (grown) {
            held = grown;
            held[n_held].q = kc_logq_take(q);
            held[n_held].log = log;
            held[n_held].userdata = userdata;
            n_held++;
            return;
        }
        /* No room to wait: these are left out rather than said under the lock. */
        log = NULL;
    }
    deliver_now(q, log, userdata);
}

void kc_log_hold(void)
{
    log_holds++;
}

void kc_log_release(void)
{
    if (--log_holds)
        return;
    /* Taken out first: a callback may hold and release again, with a list of its own. */
    struct held_log *list = held;
    size_t n = n_held;
    held = NULL;
    n_held = cap_held = 0;
    for (size_t i = 0; i < n; i++)
        deliver_now(&list[i].q, list[i].log, list[i].userdata);
    free(list);
}

void kc_nvrtc_workdir(char *out, size_t size)
{
    const char *pwd = getenv("PWD");
    struct stat a, b;
    if (pwd && pwd[0] == '/' && strlen(pwd) < size && stat(pwd, &a) == 0 && stat(".", &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        snprintf(out, size, "%s", pwd);
    else if (!getcwd(out, size))
        snprintf(out, size, "?"); /* unnamed: keyed apart from every named directory */
}
