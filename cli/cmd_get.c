/* kcache get: an artifact's bytes, to a file or down a pipe. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache get KEY-PREFIX [-o FILE]\n"
    "\n"
    "Writes the artifact of the entry whose key starts with KEY-PREFIX (at least 4\n"
    "hex digits) to FILE, or to standard output (a terminal only for PTX). The\n"
    "bytes are checked against their digest first. Does not count as a hit.\n"
    "\n"
    "  -o, --output FILE  write here (replaced whole, or not at all)\n"
    "  -h, --help         this text\n";

int cmd_get(int argc, char **argv)
{
    static const struct option options[] = {
        {"output", required_argument, NULL, 'o'},
        CLI_OPTIONS_END,
    };
    const char *output = NULL;
    int c;
    cli_options opts = CLI_OPTIONS(argc, argv, "get", usage_text, ":ho:", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'o': output = optarg; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (optind >= argc)
        return cli_usage_error("get", "which entry? give a key prefix (see 'kcache ls')");
    if (cli_extra_arg(&opts, 1))
        return CLI_USAGE;
    const char *prefix = argv[optind];
    kcache_store *store;
    kcache_entry *e;
    int found = cli_find_entry(&store, &e, "get", prefix, KCACHE_GET_NO_TOUCH);
    if (found >= 0)
        return found;
    int ret = CLI_OK;
    /* PTX is text, meant to be read: printed; a CUBIN or LTO-IR is not. */
    if (!output && isatty(fileno(stdout)) && e->kind != KCACHE_KIND_PTX) {
        ret = cli_usage_error("get", "refusing to write binary data (%s) to a terminal: use -o "
                              "FILE or a pipe", kcache_kind_name(e->kind));
        goto out;
    }
    if (output) {
        char err[4400];
        if (cli_write_output(output, e->data, e->size, err, sizeof(err)))
            ret = cli_error("%s", err);
    } else if (isatty(fileno(stdout))) {
        /* Bytes from the cache (or a bundle) reach a terminal only as safe text. */
        char *text = malloc(e->size + 1);
        if (!text) {
            ret = cli_error("out of memory");
            goto out;
        }
        memcpy(text, e->data, e->size);
        text[e->size] = '\0';
        cli_fputs_safe(stdout, text, 1);
        free(text);
    } else if (fwrite(e->data, 1, e->size, stdout) != e->size || fflush(stdout) != 0) {
        ret = cli_error("cannot write to standard output: %s", strerror(errno));
    }
out:
    kcache_entry_free(e);
    kcache_store_close(store);
    return ret;
}
