/* The request options shared by 'kcache compile' and 'kcache explain'. */
#ifndef KCACHE_CLI_COMPILE_ARGS_H
#define KCACHE_CLI_COMPILE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include <kcache/compile.h>

struct compile_args {
    const char **files;
    size_t n_files;
    const char **archs;
    size_t n_archs;
    const char **nvrtc;     /* NVRTC options: -I, -D, --std, and what follows "--" */
    size_t n_nvrtc;
    const char **exprs;
    size_t n_exprs;
    uint8_t *extra;
    size_t extra_size;
    kcache_kind kind;
    unsigned flags;
    const char *output;
    const char *remote;     /* --remote URL: the shared tier */
    long jobs;
    int json, quiet;
    char *arch_list;        /* owned storage behind the arrays */
    char **owned;
    size_t n_owned;
};

/*
 * Parses argv. Returns -1 when the command should go on, else the exit code
 * (0 after --help, 2 for a usage error, already reported).
 */
int compile_args_parse(struct compile_args *a, const char *verb, const char *usage, int argc,
                       char **argv);
void compile_args_free(struct compile_args *a);

/* Fills a request for one file and architecture. */
void compile_args_request(const struct compile_args *a, kcache_request *req, const char *file,
                          const char *arch);

/* A compiler on the store the global options name; 0 or the exit code. */
int compile_args_compiler(const struct compile_args *a, kcache_compiler **compiler);

#endif
