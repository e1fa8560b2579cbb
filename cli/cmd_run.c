/*
 * kcache run: runs a program with the drop-in NVRTC (lib/nvrtc-shim), so that
 * every NVRTC compile it makes goes through the cache, without changing it.
 *
 * The drop-in goes in by LD_PRELOAD; the real NVRTC's location goes in
 * KCACHE_NVRTC_REAL, found here the way the loader would find it (see
 * find_real), so the drop-in never has to guess. Without -v the program replaces kcache (exec):
 * same pid, same signals, same exit status.
 */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
    "  -v, --verbose  at exit, one line per process on stderr: hits, misses and the\n"
    "                 compiles not cached, by reason\n"
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

/* Whether path is an NVRTC file other than the drop-in shim itself. */
static int other_than(const char *path, const char *shim, char *out, size_t size)
{
    char real[PATH_MAX], self[PATH_MAX];
    if (!realpath(path, real) || (realpath(shim, self) && !strcmp(real, self)))
        return 0;
    snprintf(out, size, "%s", real);
    return 1;
}

/*
 * The NVRTC the loader gives a program started from here, or "" if none, found
 * the way the loader looks (LD_LIBRARY_PATH, then its cache) without loading
 * it: loading NVIDIA's library only to learn its path cost each `kcache run`
 * about 38 ms (H100 host), and the program loads it again anyway. A program's
 * own RUNPATH cannot be seen from here; the drop-in honours a full path the
 * program dlopens, and with "" falls back to its own search (the toolkit).
 */
static void find_real(char *out, size_t size, const char *shim)
{
    out[0] = '\0';
    const char *env = getenv("KCACHE_NVRTC_REAL");
    if (env && *env) {
        snprintf(out, size, "%s", env); /* a kcache run inside a kcache run */
        return;
    }
    const char *llp = getenv("LD_LIBRARY_PATH");
    char *dirs = llp ? strdup(llp) : NULL, *save = NULL;
    for (char *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save)) {
        char cand[PATH_MAX];
        snprintf(cand, sizeof(cand), "%s/%s", *d ? d : ".", SHIM_NAME);
        if (other_than(cand, shim, out, size))
            break;
    }
    free(dirs);
    if (out[0])
        return;
    /* The loader's cache: "\tlibnvrtc.so.13 (libc6,x86-64) => /path". */
    FILE *p = popen("/sbin/ldconfig -p 2>/dev/null", "r");
    if (!p)
        return;
    char line[PATH_MAX + 128];
    while (!out[0] && fgets(line, sizeof(line), p)) {
        const char *name = line + strspn(line, " \t");
        const char *arrow = strstr(line, " => ");
        size_t n = strlen(SHIM_NAME);
        if (!arrow || strncmp(name, SHIM_NAME, n) != 0 || name[n] != ' ')
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s", arrow + 4);
        path[strcspn(path, "\n")] = '\0';
        other_than(path, shim, out, size);
    }
    pclose(p);
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

int cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"verbose", no_argument, NULL, 'v'},
        {"print-shim", no_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int verbose = 0, print_shim = 0, c;
    opterr = 0;
    optind = 1;
    /* "+": options stop at the command, whose own options are its own. */
    while ((c = getopt_long(argc, argv, "+:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'v':
            verbose = 1;
            break;
        case 'P':
            print_shim = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return CLI_OK;
        default:
            return cli_usage_error("run", "unknown option '%s'", argv[optind - 1]);
        }
    }
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
    char real[PATH_MAX];
    find_real(real, sizeof(real), shim);
    if (real[0] && setenv("KCACHE_NVRTC_REAL", real, 1) != 0)
        return cli_error("cannot set the environment: %s", strerror(errno));
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
    if (!verbose) {
        execvp(argv[optind], argv + optind);
        return cli_error("cannot run %s: %s", argv[optind], strerror(errno));
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
        fprintf(stderr, "kcache: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
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
