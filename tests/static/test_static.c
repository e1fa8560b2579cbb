/*
 * A program linked with -static: glibc's static dlopen would load NVRTC with
 * a second C library and crash inside it on the first miss. kcache must
 * refuse instead, with a message that says what to do (link dynamically).
 * Skips (77) when the toolkit has no NVRTC to try.
 */
#include <stdio.h>
#include <string.h>

#include <kcache/compile.h>

int main(void)
{
    static const char source[] = "extern \"C\" __global__ void k(float *x) { x[0] = 1.0f; }\n";
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    kcache_compiler *c = NULL;
    char err[512];
    co.no_store = 1;
    if (kcache_compiler_new(&c, &co, err, sizeof(err)) != 0) {
        printf("skipped: no compiler here: %s\n", err);
        return 77;
    }
    kcache_request req = KCACHE_REQUEST_INIT;
    req.source = source;
    req.arch = "sm_90";
    kcache_result *r = NULL;
    int rc = kcache_compiler_compile(&r, c, &req);
    int ok = rc == KCACHE_ENOTSUP && r && strstr(r->message, "linked statically") &&
             strstr(r->message, "dynamically");
    printf("%s: kcache_compiler_compile in a static program: %d (%s)\n", ok ? "ok" : "FAIL", rc,
           r ? r->message : "no result");
    kcache_result_free(r);
    kcache_compiler_free(c);
    return ok ? 0 : 1;
}
