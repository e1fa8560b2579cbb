/* The request options shared by 'kcache compile' and 'kcache explain'. */
#ifndef KCACHE_CLI_COMPILE_ARGS_H
#define KCACHE_CLI_COMPILE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include <kcache/compile.h>

/*
 * One source and what belongs to it alone: a file on the command line (with
 * its FILE=EXPR name expressions) or one request of a --from file. The
 * arrays hold the command's values followed by the unit's own.
 */
struct compile_unit {
    const char *source;
    const char **archs;     /* the request's, else the command's --arch */
    size_t n_archs;
    const char **options;   /* NVRTC options: the command's, then the request's */
    size_t n_options;
    const char **exprs;     /* name expressions: the command's, then the unit's */
    size_t n_exprs;
    kcache_kind kind;       /* the request's, else the command's (0: by architecture) */
};

struct compile_args {
    const char **files;
    size_t n_files;
    const char **archs;
    size_t n_archs;
    const char **nvrtc;     /* NVRTC options: -I, -D, --std, and what follows "--" */
    size_t n_nvrtc;
    const char **exprs;     /* name expressions for every file */
    size_t n_exprs;
    struct compile_unit *units; /* the files, then the requests of --from */
    size_t n_units;
    const char *from;       /* --from FILE */
    uint8_t *extra;
    size_t extra_size;
    kcache_kind kind;
    unsigned flags;
    const char *output;
    const char *remote;     /* --remote URL: the shared tier */
    long jobs;
    int json, quiet;
    int cache_key;          /* --cache-key: print CI's cache key, compile nothing */
    char *arch_list;        /* owned storage behind the arrays */
    char **owned;
    size_t n_owned;
    void *request_doc;      /* the parsed --from file (json_value) */
};

/*
 * Parses argv. Returns -1 when the command should go on, else the exit code
 * (0 after --help, 2 for a usage error, already reported).
 */
int compile_args_parse(struct compile_args *a, const char *verb, const char *usage, int argc,
                       char **argv);
void compile_args_free(struct compile_args *a);

/* Fills a request for one unit and architecture. */
void compile_args_request(const struct compile_args *a, kcache_request *req,
                          const struct compile_unit *unit, const char *arch);

/* Checks an architecture as typed: -1 when it is one, else CLI_USAGE (reported). */
int compile_args_check_arch(const char *verb, const char *arch, const char *where);

/* Appends s to a growing array; keeps s alive as long as the arguments. */
int compile_args_push(const char ***v, size_t *n, const char *s);
const char *compile_args_own(struct compile_args *a, char *s);

/*
 * Reads the request list of --from into units (compile_from.c). Returns -1
 * to go on, else the exit code (reported).
 */
int compile_from_read(struct compile_args *a, const char *verb);
void compile_from_free(struct compile_args *a);

/* A compiler on the store the global options name; 0 or the exit code. */
int compile_args_compiler(const struct compile_args *a, kcache_compiler **compiler);

#endif
