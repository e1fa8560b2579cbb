/*
 * kcache against what users would pick instead: the C half.
 *
 *   bench_compare store --workdir DIR --cubin FILE... --json FILE [--quick]
 *                       [--sizes-out FILE] [--samples-out FILE]
 *   bench_compare compile --workdir DIR --corpus DIR --cuda DIR --json FILE [--quick]
 *
 * benchmarks/compare/run drives this, the Python and ccache runs, and
 * gen_results.py. See benchmarks/README.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kcache/core.h>

#include "cmp_store.h"
#include "cmp_util.h"

static void usage(void)
{
    fputs("usage: bench_compare store --workdir DIR --cubin FILE... --json FILE [--quick]\n"
          "                     [--entries N] [--sizes-out FILE] [--samples-out FILE]\n"
          "       bench_compare compile --workdir DIR --corpus DIR --cuda DIR --json FILE "
          "[--quick]\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *mode = argv[1];
    const char *workdir = NULL, *json = NULL, *corpus = NULL, *cuda = "/usr/local/cuda";
    const char *sizes_out = NULL, *samples_out = NULL;
    const char **cubins = calloc((size_t)argc, sizeof(*cubins));
    size_t n_cubins = 0;
    long entries = 10000;
    int quick = 0, ratio_only = 0;
    if (!cubins)
        cmp_fail("out of memory");
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--quick")) {
            quick = 1;
            continue;
        }
        if (!strcmp(o, "--ratio-only")) {
            ratio_only = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(o, "--workdir"))
            workdir = v;
        else if (!strcmp(o, "--json"))
            json = v;
        else if (!strcmp(o, "--corpus"))
            corpus = v;
        else if (!strcmp(o, "--cuda"))
            cuda = v;
        else if (!strcmp(o, "--cubin"))
            cubins[n_cubins++] = v;
        else if (!strcmp(o, "--sizes-out"))
            sizes_out = v;
        else if (!strcmp(o, "--samples-out"))
            samples_out = v;
        else if (!strcmp(o, "--entries"))
            entries = atol(v);
        else
            usage();
    }
    if (!workdir || !json || entries < 100)
        usage();
    int rc;
    if (!strcmp(mode, "store")) {
        if (!n_cubins)
            usage();
        cmp_json_open(json, "store", quick);
        cmp_rec("meta", "kcache", "version", kcache_version(), 0, "");
        struct cmp_store_args a = {
            .workdir = workdir,
            .cubins = cubins,
            .n_cubins = n_cubins,
            .entries = (uint64_t)entries,
            .per_bin = 16,
            .hit_iters = quick ? 600 : 4000,
            .cold_iters = quick ? 60 : 200,
            .seconds = quick ? 1.0 : 3.0,
            .cap = quick ? 8 * MIB : 64 * MIB,
            .cap_factor = quick ? 2 : 3,
            .sizes_out = sizes_out,
            .samples_out = samples_out,
            .ratio_only = ratio_only,
        };
        rc = cmp_store_main(&a);
    } else if (!strcmp(mode, "compile")) {
        if (!corpus)
            usage();
        cmp_json_open(json, "compile", quick);
        struct cmp_compile_args a = {
            .workdir = workdir,
            .corpus = corpus,
            .cuda = cuda,
            .runs = quick ? 3 : 7,
            .hit_runs = quick ? 200 : 2000,
        };
        rc = cmp_compile_main(&a);
    } else {
        usage();
    }
    cmp_json_close();
    free(cubins);
    return rc;
}
