/*
 * kcache run: runs a program with the drop-in NVRTC (lib/nvrtc-shim), so that
 * every NVRTC compile it makes goes through the cache, without changing it.
 *
 * The drop-in goes in by LD_PRELOAD. It finds the real NVRTC itself, in the
 * program: the path the program dlopen()s after its own search, else as the
 * program's loader would (its RUNPATH, which cannot be seen from here:
 * lib/nvrtc-shim/real.c). Without -v the program replaces kcache (exec): same
 * pid, same signals, same exit status.
 */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kcache/config.h>

#include "cli.h"

#ifndef KC_CUDA_MAJOR
#define KC_CUDA_MAJOR 13
#endif
#define KC_STR2(x) #x
#define KC_STR(x) KC_STR2(x)
#define SHIM_NAME "libnvrtc.so." KC_STR(KC_CUDA_MAJOR)

static const char usage_text[] =
    "usage: kcache run [-v] [--] COMMAND [ARGS...]\n"
    "\n"
    "Runs COMMAND with kcache's drop-in NVRTC: every nvrtcCompileProgram it makes\n"
    "(CuPy, cuda.core, numba-cuda, PyTorch, a C program) is served from the cache\n"
    "when it can be, and compiled by NVIDIA's NVRTC and stored when not. What the\n"
    "program sees is what NVRTC gives. KCACHE_DISABLE=1 turns the cache off.\n"
    "\n"
    "  -v, --verbose  at exit, one line per process on stderr: hits, misses, the\n"
    "                 compiles not cached by reason, and the NVIDIA NVRTC it forwarded\n"
    "                 to (nvrtc-path)\n"
    "      --print-shim  print the drop-in's path and exit, for setting LD_PRELOAD by\n"
    "                 hand: LD_PRELOAD=$(kcache run --print-shim) COMMAND\n"
    "  -h, --help     this text\n";

/* The drop-in: beside this executable in the build tree, else where it is installed. */
static int find_shim(char *out, size_t size)
{
    const char *env = getenv("KCACHE_NVRTC_SHIM");
    struct stat st;
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return stat(out, &st) == 0 ? 0 : -1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    const char *const rel[] = {
        "../lib/nvrtc-shim/" SHIM_NAME,       /* build tree: build/cli/kcache */
        "../" KC_LIBDIR "/kcache/" SHIM_NAME, /* installed: PREFIX/bin/kcache */
    };
    for (size_t i = 0; i < sizeof(rel) / sizeof(*rel); i++) {
        char cand[PATH_MAX * 2];
        snprintf(cand, sizeof(cand), "%s/%s", exe, rel[i]);
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && realpath(cand, out))
            return 0;
    }
    /*
     * Installed by pip (pyproject.toml): the drop-in sits beside the kcache
     * module, in the environment's site-packages, whose name holds Python's
     * version: PREFIX/bin/kcache and PREFIX/lib/python3.N/site-packages
     * (a venv, --user, /usr/local with Debian's dist-packages).
     */
    static const char *const py_rel[] = {
        "../lib/python3*/site-packages/kcache/" SHIM_NAME,
        "../lib/python3*/dist-packages/kcache/" SHIM_NAME,
    };
    for (size_t i = 0; i < sizeof(py_rel) / sizeof(*py_rel); i++) {
        char pattern[PATH_MAX * 2];
        snprintf(pattern, sizeof(pattern), "%s/%s", exe, py_rel[i]);
        glob_t g;
        int found = 0;
        if (glob(pattern, 0, NULL, &g) == 0)
            for (size_t j = 0; j < g.gl_pathc && !found; j++)
                found = stat(g.gl_pathv[j], &st) == 0 && S_ISREG(st.st_mode) &&
                        realpath(g.gl_pathv[j], out) != NULL;
        globfree(&g);
        if (found)
            return 0;
    }
    snprintf(out, size, "%s", KC_SHIM_DIR "/" SHIM_NAME); /* installed elsewhere, moved */
    return stat(out, &st) == 0 ? 0 : -1;
}

static int prepend_env(const char *name, const char *value)
{
    const char *old = getenv(name);
    if (old && strstr(old, value))
        return 0;
    size_t n = strlen(value) + (old ? strlen(old) + 1 : 0) + 1;
    char *v = malloc(n);
    if (!v)
        return -1;
    snprintf(v, n, "%s%s%s", value, old && *old ? ":" : "", old ? old : "");
    int rc = setenv(name, v, 1);
    free(v);
    return rc;
}

/* The lines the drop-in wrote at each process's exit, on stderr. */
static void print_report(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof(line), f))
        fprintf(stderr, "kcache: nvrtc %s", line);
    fclose(f);
}

/* Whether a file of that name is in a directory of PATH. */
static int on_path(const char *name)
{
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX];
        struct stat st;
        snprintf(cand, sizeof(cand), "%.*s/%s", (int)n, n ? p : ".", name);
        if (stat(cand, &st) == 0 && !S_ISDIR(st.st_mode))
            return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

/*
 * A shell's statuses for a program that did not start: 127 not found, 126
 * not runnable. execvp says EACCES when a directory of PATH cannot be
 * searched, even if the name is nowhere: that is "not found" too.
 */
static int exec_status(int err, const char *name)
{
    if (err == ENOENT || err == ENOTDIR)
        return 127;
    return err == EACCES && !strchr(name, '/') && !on_path(name) ? 127 : 126;
}

/*
 * With -v, a cache that is off says so once: otherwise the missing report
 * lines are the only sign, and they look like a program that never compiled.
 */
static void say_if_disabled(void)
{
    kcache_config *cfg = NULL;
    if (cli_config_load(&cfg))
        return;
    const kcache_setting *s = kcache_config_find(cfg, "disable");
    static const char *const yes[] = {"1", "true", "yes", "on"};
    for (size_t i = 0; s && i < sizeof(yes) / sizeof(yes[0]); i++)
        if (!strcasecmp(s->value, yes[i]))
            fprintf(stderr, "kcache: the cache is off (disable = %s, from %s): the program's "
                    "compiles go straight to NVRTC, unrecorded\n", s->value,
                    s->origin[0] ? s->origin : kcache_config_source_name(s->source));
    kcache_config_free(cfg);
}

int cmd_run(int argc, char **argv)
{
    static const struct option options[] = {
        {"verbose", no_argument, NULL, 'v'},
        {"print-shim", no_argument, NULL, 'P'},
        CLI_OPTIONS_END,
    };
    int verbose = 0, print_shim = 0, c;
    /* "+": options stop at the command, whose own options are its own. */
    cli_options opts = CLI_OPTIONS(argc, argv, "run", usage_text, "+:vh", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'v': verbose = 1; break;
        case 'P': print_shim = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    char shim[PATH_MAX];
    if (find_shim(shim, sizeof(shim)) != 0)
        return cli_error("the drop-in NVRTC (%s) is not installed beside kcache: reinstall "
                         "kcache, or set KCACHE_NVRTC_SHIM to its path", SHIM_NAME);
    if (print_shim) {
        printf("%s\n", shim);
        return CLI_OK;
    }
    if (optind >= argc)
        return cli_usage_error("run", "no command to run (kcache run -- COMMAND ARGS)");
    /*
     * LD_PRELOAD separates its entries by spaces and colons, with no escape:
     * a drop-in under a path holding either (a checkout in "My Projects") goes
     * in by its file name, found through LD_LIBRARY_PATH (which splits on
     * colons only). A colon in the path is refused: neither variable holds it.
     */
    if (strchr(shim, ':'))
        return cli_error("the drop-in's path %s holds a ':', which LD_PRELOAD and "
                         "LD_LIBRARY_PATH cannot carry: install kcache elsewhere", shim);
    int rc_env;
    if (strchr(shim, ' ')) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", shim);
        *strrchr(dir, '/') = '\0';
        rc_env = prepend_env("LD_LIBRARY_PATH", dir);
        if (!rc_env)
            rc_env = prepend_env("LD_PRELOAD", strrchr(shim, '/') + 1);
    } else {
        rc_env = prepend_env("LD_PRELOAD", shim);
    }
    if (rc_env != 0)
        return cli_error("cannot set the environment: %s", strerror(errno));
    /* The global options reach the program's cache through the environment. */
    if (cli_globals.path && setenv("KCACHE_PATH", cli_globals.path, 1) != 0)
        return cli_error("cannot set the environment: %s", strerror(errno));
    char max[32];
    snprintf(max, sizeof(max), "%llu", (unsigned long long)cli_globals.max_size);
    if (cli_globals.max_size && setenv("KCACHE_MAX_SIZE", max, 1) != 0)
        return cli_error("cannot set the environment: %s", strerror(errno));
    if (verbose)
        say_if_disabled();
    if (!verbose) {
        execvp(argv[optind], argv + optind);
        int saved = errno;
        cli_error("cannot run %s: %s", argv[optind], strerror(saved));
        return exec_status(saved, argv[optind]);
    }
    char report[] = "/tmp/kcache-run-XXXXXX";
    int fd = mkstemp(report);
    if (fd < 0)
        return cli_error("cannot create a temporary file: %s", strerror(errno));
    close(fd);
    setenv("KCACHE_NVRTC_REPORT", report, 1);
    pid_t pid = fork();
    if (pid < 0) {
        unlink(report);
        return cli_error("cannot start %s: %s", argv[optind], strerror(errno));
    }
    if (pid == 0) {
        execvp(argv[optind], argv + optind);
        int saved = errno;
        fprintf(stderr, "kcache: cannot run %s: %s\n", argv[optind], strerror(saved));
        _exit(exec_status(saved, argv[optind]));
    }
    /* The program takes ^C itself; kcache waits to report. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    print_report(report);
    unlink(report);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
