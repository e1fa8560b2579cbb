/*
 * Which target a request means: its arch or -arch, "native" through the
 * driver, and which output kind goes with a real or a virtual architecture.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compileint.h"
#include "cuda/driver.h"

int kc_resolve_arch(kcache_compiler *c, const kcache_request *req, struct work *w,
                        struct kc_result *r)
{
    char msg[512];
    char from_req[32] = "";
    int native = 0;
    if (req->arch && !strcmp(req->arch, "native")) {
        native = 1;
    } else if (req->arch && kcache_arch_normalize(from_req, sizeof(from_req), req->arch) != 0) {
        return kc_result_fail(r, KCACHE_EINVAL,
                              "'%s' is not a GPU architecture (use e.g. sm_90, sm_90a, compute_90)",
                              req->arch);
    }
    if (native) {
        char found[32];
        int rc = kc_driver_native_arch(found, sizeof(found), 0, 0, msg, sizeof(msg));
        if (rc)
            return kc_result_fail(r, rc, "%s", msg);
        snprintf(from_req, sizeof(from_req), "%s", found);
    }
    (void)c;
    if (from_req[0] && w->opts.arch[0] &&
        (strcmp(from_req, w->opts.arch) != 0 || w->opts.several_archs))
        return kc_result_fail(r, KCACHE_EINVAL,
                              "two architectures given (%s and %s): give one per request",
                              from_req, w->opts.arch);
    const char *arch = from_req[0] ? from_req : w->opts.arch;
    if (!arch[0])
        return kc_result_fail(r, KCACHE_EINVAL, "no GPU architecture: pass one (e.g. sm_90)");
    /* NVRTC's kind: LTO-IR with -dlto; a CUBIN when some -arch is real (several: any). */
    int several = w->opts.several_archs;
    int is_virtual = several ? !w->opts.real_arch : !strncmp(arch, "compute_", 8);
    w->kind = req->output  ? req->output
              : w->opts.dlto ? KCACHE_KIND_LTOIR
              : is_virtual   ? KCACHE_KIND_PTX
                             : KCACHE_KIND_CUBIN;
    if (w->kind < KCACHE_KIND_CUBIN || w->kind > KCACHE_KIND_LTOIR)
        return kc_result_fail(r, KCACHE_EINVAL, "output kind %d is not cubin, ptx or ltoir",
                              (int)w->kind);
    if (!strncmp(arch, "lto_", 4))
        return kc_result_fail(r, KCACHE_EINVAL, "%s: give the real architecture (sm_%s) with "
                              "LTO-IR output", arch, arch + 4);
    if (w->kind == KCACHE_KIND_CUBIN && is_virtual)
        return kc_result_fail(r, KCACHE_EINVAL,
                              "%s is a virtual architecture: it gives PTX; use sm_%s for a CUBIN",
                              arch, several ? "XX" : arch + 8);
    if (w->kind == KCACHE_KIND_PTX && !is_virtual && !several)
        /* PTX for sm_90 is PTX for compute_90: one target, one entry. */
        snprintf(w->nvrtc_arch, sizeof(w->nvrtc_arch), "compute_%s", arch + 3);
    else
        snprintf(w->nvrtc_arch, sizeof(w->nvrtc_arch), "%s", arch);
    snprintf(r->arch, sizeof(r->arch), "%s", w->nvrtc_arch);
    r->pub.kind = w->kind;
    return 0;
}
