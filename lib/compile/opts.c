/* NVRTC's options as NVRTC 13 reads them, canonicalised for the key (opts.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcache/compile.h"
#include "compile/opts.h"

enum opt_type {
    FLAG,      /* no value */
    VALUE,     /* one value: --long=v, --long v, -short=v, -short v */
    ARCH,      /* -arch */
    DEFINE,    /* -D: may be glued (-DNAME) */
    UNDEFINE,  /* -U: may be glued */
    INCLUDE,   /* -I: may be glued */
    PREINCLUDE,
    NOSRC,
};

struct opt {
    const char *lng, *shrt;
    int type;
    /*
     * Not keyed: automatic PCH (--pch) only saves parsing for later compiles
     * of the same process, but NVRTC 13 reuses a PCH without looking at the
     * headers again, so every compile kcache runs leaves it out (compile/nvrtc.c)
     * and its bytes are NVRTC's without --pch (tests/compile/test_trees.c).
     * Those are not always NVRTC's with it: with --pch NVRTC 13 may emit
     * module-scope variables in another order (seen with CCCL: two
     * is_same_v instantiations moved in the PTX, and so another .nv.global
     * layout and symbol order; every other section, .text included, the
     * same; benchmarks/realtrees/run checks it on real trees);
     * the others steer messages, timing files and NVRTC's own cache. An
     * explicit --create-pch/--use-pch file makes the compile uncached: it is
     * an input kcache cannot see.
     */
    int unkeyed;
    unsigned how; /* NOSEP, TRAILING */
};

/* NVRTC 13 takes the value only after '=' (--std c++17 is rejected). */
#define NOSEP 1u
/* Given last, with no value, NVRTC 13 ignores it (the others it rejects). */
#define TRAILING 2u

/*
 * NVRTC 13's options (nvrtc.h), spelled as NVRTC 13 takes them, measured
 * (tests/nvrtc-shim/test_opts_walk.py walks every spelling): the long name
 * with two dashes, the short name with one, either where the two are one
 * name; a value after '=' or, unless NOSEP, as the next argument, taken
 * whatever it is; a flag never with '='. A spelling outside this is passed on
 * as written, for NVRTC to judge (it rejects every one measured).
 */
static const struct opt table[] = {
    {"gpu-architecture", "arch", ARCH},
    {"device-c", "dc", FLAG},
    {"device-w", "dw", FLAG},
    {"relocatable-device-code", "rdc", VALUE},
    {"extensible-whole-program", "ewp", FLAG},
    {"device-debug", "G", FLAG},
    {"generate-line-info", "lineinfo", FLAG},
    {"dopt", "dopt", VALUE, 0, TRAILING},
    {"Ofast-compile", "Ofc", VALUE, 0, TRAILING},
    {"ptxas-options", "Xptxas", VALUE, 0, TRAILING},
    {"maxrregcount", "maxrregcount", VALUE, 0, TRAILING},
    {"ftz", "ftz", VALUE},
    {"prec-sqrt", "prec-sqrt", VALUE},
    {"prec-div", "prec-div", VALUE},
    {"fmad", "fmad", VALUE},
    {"use_fast_math", "use_fast_math", FLAG},
    {"extra-device-vectorization", "extra-device-vectorization", FLAG},
    {"modify-stack-limit", "modify-stack-limit", VALUE},
    {"dlink-time-opt", "dlto", FLAG},
    {"gen-opt-lto", "gen-opt-lto", FLAG},
    {"optix-ir", "optix-ir", FLAG},
    {"jump-table-density", "jtd", VALUE, 0, TRAILING},
    {"device-stack-protector", "device-stack-protector", VALUE},
    {"no-cache", "no-cache", FLAG, 1},
    {"frandom-seed", "frandom-seed", VALUE, 0, NOSEP},
    {"define-macro", "D", DEFINE},
    {"undefine-macro", "U", UNDEFINE},
    {"include-path", "I", INCLUDE, 0, TRAILING},
    {"pre-include", "include", PREINCLUDE},
    {"no-source-include", "no-source-include", NOSRC},
    {"std", "std", VALUE, 0, NOSEP},
    {"builtin-move-forward", "builtin-move-forward", VALUE},
    {"builtin-initializer-list", "builtin-initializer-list", VALUE},
    {"pch", "pch", FLAG, 1},
    {"create-pch", "create-pch", VALUE, 0, NOSEP},
    {"use-pch", "use-pch", VALUE, 0, NOSEP},
    {"pch-dir", "pch-dir", VALUE, 1, NOSEP},
    {"pch-verbose", "pch-verbose", VALUE, 1},
    {"pch-messages", "pch-messages", VALUE, 1},
    {"instantiate-templates-in-pch", "instantiate-templates-in-pch", VALUE},
    {"disable-warnings", "w", FLAG},
    {"restrict", "restrict", FLAG},
    {"device-as-default-execution-space", "default-device", FLAG},
    {"device-int128", "device-int128", FLAG},
    {"device-float128", "device-float128", FLAG},
    {"optimization-info", "opt-info", VALUE, 0, NOSEP},
    {"display-error-number", "err-no", FLAG},
    {"no-display-error-number", "no-err-no", FLAG},
    {"diag-error", "diag-error", VALUE},
    {"diag-suppress", "diag-suppress", VALUE},
    {"diag-warn", "diag-warn", VALUE},
    {"brief-diagnostics", "brief-diag", VALUE},
    {"time", "time", VALUE, 1, NOSEP},
    {"fdevice-time-trace", "fdevice-time-trace", VALUE, 0, NOSEP},
    {"split-compile", "split-compile", VALUE, 0, TRAILING},
    {"fdevice-syntax-only", "fdevice-syntax-only", FLAG},
    {"minimal", "minimal", FLAG},
};

void kc_opts_free(kc_opts *o)
{
    kc_strv_free(o->canonical, o->n_canonical);
    kc_strv_free(o->unkeyed, o->n_unkeyed);
    kc_strv_free(o->include_dirs, o->n_include_dirs);
    kc_strv_free(o->pre_includes, o->n_pre_includes);
    kc_strv_free(o->defines, o->n_defines);
    kc_strv_free(o->archs, o->n_archs);
    memset(o, 0, sizeof(*o));
}

KCACHE_API int kcache_arch_normalize(char *out, size_t out_size, const char *arch)
{
    if (!out || out_size < 16 || !arch)
        return KCACHE_EINVAL;
    char low[32];
    size_t n = strlen(arch);
    if (n == 0 || n >= sizeof(low))
        return KCACHE_EINVAL;
    for (size_t i = 0; i <= n; i++)
        low[i] = (char)tolower((unsigned char)arch[i]);
    const char *prefix = "sm_", *p = low;
    if (!strncmp(p, "compute_", 8)) {
        prefix = "compute_";
        p += 8;
    } else if (!strncmp(p, "compute", 7)) {
        prefix = "compute_";
        p += 7;
    } else if (!strncmp(p, "sm_", 3)) {
        p += 3;
    } else if (!strncmp(p, "sm", 2)) {
        p += 2;
    } else if (!strncmp(p, "lto_", 4)) {
        prefix = "lto_";
        p += 4;
    }
    size_t digits = strspn(p, "0123456789");
    if (digits < 2 || digits > 3 || p[0] == '0')
        return KCACHE_EINVAL;
    const char *suffix = p + digits;
    if (*suffix && strcmp(suffix, "a") != 0 && strcmp(suffix, "f") != 0)
        return KCACHE_EINVAL;
    snprintf(out, out_size, "%s%.*s%s", prefix, (int)digits, p, suffix);
    return 0;
}

static const struct opt *lookup(const char *name, size_t len, int is_long)
{
    for (size_t i = 0; i < KC_ARRAY_SIZE(table); i++) {
        const char *want = is_long ? table[i].lng : table[i].shrt;
        if (strlen(want) == len && strncmp(want, name, len) == 0)
            return &table[i];
    }
    return NULL;
}

/* Single-letter options whose value may be glued on: -DNAME, -UNAME, -Idir. */
static const struct opt *glued(const char *arg, const char **value)
{
    static const char letters[] = "DUI";
    if (arg[0] == '-' && arg[1] && strchr(letters, arg[1]) && arg[2] && arg[2] != '=') {
        *value = arg + 2;
        return lookup(arg + 1, 1, 0);
    }
    return NULL;
}

/* Appends "--lng=value" (or "--lng") to *v: no limit on the value's length. */
static int add_to(char ***v, size_t *n_v, const char *lng, const char *value)
{
    size_t n = 2 + strlen(lng) + (value ? 1 + strlen(value) : 0) + 1;
    char *buf = malloc(n);
    if (!buf)
        return KCACHE_ENOMEM;
    snprintf(buf, n, value ? "--%s=%s" : "--%s", lng, value ? value : "");
    int rc = kc_strv_push(v, n_v, buf);
    free(buf);
    return rc;
}

static int add(kc_opts *o, const char *lng, const char *value)
{
    return add_to(&o->canonical, &o->n_canonical, lng, value);
}

/* 1 if v is an architecture as NVRTC 13 spells it: sm_90, sm_90a, compute_100f, ... */
static int nvrtc_arch_name(const char *v)
{
    const char *p = !strncmp(v, "sm_", 3) ? v + 3 : !strncmp(v, "compute_", 8) ? v + 8 : NULL;
    size_t digits = p ? strspn(p, "0123456789") : 0;
    if (digits < 2 || digits > 3 || p[0] == '0' || strlen(v) >= sizeof(((kc_opts *)0)->arch))
        return 0;
    return p[digits] == '\0' || ((p[digits] == 'a' || p[digits] == 'f') && !p[digits + 1]);
}

/*
 * Several -arch: NVRTC 13 warns and compiles for the last one's number, a
 * CUBIN if any of them is real, and keeps an 'a' seen before (measured:
 * -arch=sm_90 -arch=compute_90 is sm_90's CUBIN, -arch=sm_90a -arch=sm_90
 * sm_90a's). Rather than model that, two different values leave the options
 * to NVRTC, uncached (compile/compiler.c, compile/nvrtc.c).
 */
static int add_arch(kc_opts *o, const char *value)
{
    if (o->n_archs && strcmp(o->arch, value) != 0)
        o->several_archs = 1;
    o->real_arch |= !strncmp(value, "sm_", 3);
    snprintf(o->arch, sizeof(o->arch), "%s", value);
    return add_to(&o->archs, &o->n_archs, "gpu-architecture", value);
}

/*
 * NVRTC strips white space around each option and around a glued value (" -G"
 * is -G, "-I dir" is -Idir; NVRTC 13.0), so the table sees what NVRTC sees:
 * " -G" passed on verbatim would have kept the working directory out of the
 * key, and " -Idir" a header directory out of the resolver. A value after
 * '=' keeps its spaces, as NVRTC does ("--include-path= dir" finds nothing).
 * s itself, or a trimmed copy in *own (caller frees). NULL: out of memory.
 */
static const char *trim(const char *s, char **own)
{
    size_t n = strlen(s);
    const char *b = s;
    while (n && isspace((unsigned char)*b))
        b++, n--;
    while (n && isspace((unsigned char)b[n - 1]))
        n--;
    if (b == s && n == strlen(s))
        return s;
    *own = malloc(n + 1);
    if (!*own)
        return NULL;
    memcpy(*own, b, n);
    (*own)[n] = '\0';
    return *own;
}

/* An option NVRTC must read itself: passed on as written, and the compile uncached. */
static int verbatim_uncached(kc_opts *o, const char *arg, const char *reason, const char *problem)
{
    if (!o->uncached_reason) {
        o->uncached_reason = reason;
        o->uncached_problem = problem;
    }
    return kc_strv_push(&o->canonical, &o->n_canonical, arg);
}

/* What one option of the table means, its value found. */
static int take(kc_opts *o, const struct opt *opt, const char *value)
{
    int rc = 0;
    switch (opt->type) {
    case ARCH:
        /* NVRTC takes no other spelling (SM_90, sm90, native): it rejects them. */
        if (!nvrtc_arch_name(value))
            return add(o, opt->lng, value);
        return add_arch(o, value);
    case INCLUDE:
        return kc_strv_push(&o->include_dirs, &o->n_include_dirs, value);
    case NOSRC:
        o->no_source_include = 1;
        return 0;
    case PREINCLUDE:
    case DEFINE:
        /* Listed for the include resolver, and keyed as written. */
        rc = opt->type == DEFINE ? kc_strv_push(&o->defines, &o->n_defines, value)
                                 : kc_strv_push(&o->pre_includes, &o->n_pre_includes, value);
        return rc ? rc : add(o, opt->lng, value);
    default:
        break;
    }
    if (!strcmp(opt->lng, "frandom-seed"))
        o->has_seed = 1;
    if (!strcmp(opt->lng, "dlink-time-opt"))
        o->dlto = 1;
    if (!strcmp(opt->lng, "pch-dir") && !o->uncached_reason) {
        o->uncached_reason = "explicit_pch";
        o->uncached_problem = "--pch-dir names a precompiled header folder, which the key "
                              "cannot cover";
    }
    /* NVRTC reads the trace file it is to write when one is there already. */
    if (!strcmp(opt->lng, "fdevice-time-trace") && !o->uncached_reason) {
        o->uncached_reason = "time_trace_file";
        o->uncached_problem = "--fdevice-time-trace names a file NVRTC reads, which the key "
                              "cannot cover";
    }
    if (opt->unkeyed)
        return add_to(&o->unkeyed, &o->n_unkeyed, opt->lng, opt->type == FLAG ? NULL : value);
    return add(o, opt->lng, opt->type == FLAG ? NULL : value);
}

int kc_opts_parse(kc_opts *o, const char *const *argv, size_t argc, char *msg, size_t msg_size)
{
    memset(o, 0, sizeof(*o));
    int rc = 0;
    char *own_arg = NULL, *own_value = NULL;
    for (size_t i = 0; i < argc && !rc; i++) {
        free(own_arg);
        free(own_value);
        own_arg = own_value = NULL;
        if (!argv[i])
            continue;
        const char *arg = trim(argv[i], &own_arg);
        if (!arg) {
            rc = KCACHE_ENOMEM;
            break;
        }
        const char *value = NULL;
        int separate = 0; /* the value is the next argument */
        const struct opt *opt = glued(arg, &value);
        if (opt && !(value = trim(value, &own_value))) {
            rc = KCACHE_ENOMEM;
            break;
        }
        if (!opt && arg[0] == '-') {
            int is_long = arg[1] == '-';
            const char *name = arg + 1 + is_long;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            opt = lookup(name, len, is_long);
            int takes_value = opt && opt->type != FLAG && opt->type != NOSRC;
            if (opt && eq && !takes_value)
                opt = NULL; /* NVRTC rejects a flag with a value ("-G=1") */
            else if (opt && eq)
                value = eq + 1;
            else if (opt && takes_value && (opt->how & NOSEP))
                opt = NULL; /* and "--std c++17": the value only after '=' */
            else if (opt && takes_value && (i + 1 >= argc || !argv[i + 1])) {
                if (opt->how & TRAILING)
                    continue; /* last, with no value: NVRTC ignores it */
                rc = kc_fmt(msg, msg_size, KCACHE_EINVAL, "NVRTC option %s needs a value",
                            arg);
                break;
            } else if (opt && takes_value) {
                separate = 1;
                if (!(value = trim(argv[++i], &own_value))) {
                    rc = KCACHE_ENOMEM;
                    break;
                }
            }
        }
        if (!opt) {
            /* Unknown to this table: keyed and passed on exactly as written. */
            rc = kc_strv_push(&o->canonical, &o->n_canonical, arg);
            continue;
        }
        if (opt->type != FLAG && opt->type != NOSRC && !*value) {
            /* NVRTC takes some ("-I=") and rejects others ("-D="): it judges. */
            rc = verbatim_uncached(o, arg, "option_without_value",
                                   "an NVRTC option has an empty value, which NVRTC judges");
            if (!rc && separate)
                rc = kc_strv_push(&o->canonical, &o->n_canonical, value);
            continue;
        }
        rc = take(o, opt, value);
    }
    free(own_arg);
    free(own_value);
    if (rc) {
        if (rc == KCACHE_ENOMEM)
            kc_fmt(msg, msg_size, rc, "out of memory");
        kc_opts_free(o);
    }
    return rc;
}
