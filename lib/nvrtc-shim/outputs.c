/*
 * What a compile gives, and the calls about the library rather than a
 * program: served from a hit where the drop-in holds the answer, forwarded
 * to NVIDIA's library everywhere else.
 */
#include <stdio.h>
#include <string.h>

#include "nvrtc-shim/facts.h"
#include "nvrtc-shim/shim.h"

#define SHIM_API __attribute__((visibility("default")))

/* ---- what a compile gives ------------------------------------------------- */

/*
 * A hit answers for its own kind and for the outputs the compile did not
 * make (NVRTC: size 0, or an empty string for PTX); PTX of an sm_XX compile
 * is the one output it does not hold. Returns 1 with *data and *size (the
 * size NVRTC reports), 0 when the call must be forwarded.
 */
enum output { OUT_PTX, OUT_CUBIN, OUT_LTOIR, OUT_OPTIX };

static int hit_output(struct prog *p, enum output which, const char **data, size_t *size)
{
    if (which == OUT_PTX && p->miss)
        kc_prog_store_ptx(p);
    if (which == OUT_PTX && p->hit && !p->passthrough && p->hit->kind == KCACHE_KIND_CUBIN &&
        !p->hit_ptx)
        kc_prog_load_hit_ptx(p);
    const kcache_result *e = p->hit;
    if (!e || p->passthrough)
        return 0;
    kcache_kind k = which == OUT_PTX     ? KCACHE_KIND_PTX
                    : which == OUT_CUBIN ? KCACHE_KIND_CUBIN
                    : which == OUT_LTOIR ? KCACHE_KIND_LTOIR
                                         : 0;
    if (k && k == e->kind) {
        *data = (const char *)e->data;
        /* The stored PTX is text: NVRTC's size counts its NUL, which follows e->data. */
        *size = e->size + (k == KCACHE_KIND_PTX);
        return 1;
    }
    if (which == OUT_PTX && e->kind == KCACHE_KIND_CUBIN) {
        if (!p->hit_ptx)
            return 0;
        *data = (const char *)p->hit_ptx->data;
        *size = p->hit_ptx->size + 1;
        return 1;
    }
    *data = "";
    *size = which == OUT_PTX;
    return 1;
}

/*
 * Each output's pair of entry points: its size, then its bytes, from a hit
 * (hit_output) or else from NVIDIA's program.
 */
#define SHIM_OUTPUT(Name, which)                                                                   \
    SHIM_API nvrtcResult nvrtcGet##Name##Size(nvrtcProgram prog, size_t *size)                    \
    {                                                                                              \
        struct prog *p = (struct prog *)prog;                                                      \
        const char *data;                                                                          \
        if (p && size && hit_output(p, which, &data, size))                                        \
            return NVRTC_SUCCESS;                                                                  \
        FORWARD(p, Get##Name##Size(p ? p->real : NULL, size));                                     \
    }                                                                                              \
    SHIM_API nvrtcResult nvrtcGet##Name(nvrtcProgram prog, char *out)                              \
    {                                                                                              \
        struct prog *p = (struct prog *)prog;                                                      \
        const char *data;                                                                          \
        size_t size;                                                                               \
        if (p && out && hit_output(p, which, &data, &size)) {                                      \
            memcpy(out, data, size);                                                               \
            return NVRTC_SUCCESS;                                                                  \
        }                                                                                          \
        FORWARD(p, Get##Name(p ? p->real : NULL, out));                                            \
    }

SHIM_OUTPUT(PTX, OUT_PTX)
SHIM_OUTPUT(CUBIN, OUT_CUBIN)
SHIM_OUTPUT(LTOIR, OUT_LTOIR)
SHIM_OUTPUT(OptiXIR, OUT_OPTIX)

SHIM_API nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet)
{
    struct prog *p = (struct prog *)prog;
    if (p && logSizeRet && p->refusal) {
        *logSizeRet = strlen(p->refusal) + 1;
        return NVRTC_SUCCESS;
    }
    if (p && logSizeRet && p->hit && !p->passthrough) {
        *logSizeRet = strlen(p->hit->log ? p->hit->log : "") + 1;
        return NVRTC_SUCCESS;
    }
    FORWARD(p, GetProgramLogSize(p ? p->real : NULL, logSizeRet));
}

SHIM_API nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    struct prog *p = (struct prog *)prog;
    if (p && log && p->refusal) {
        memcpy(log, p->refusal, strlen(p->refusal) + 1);
        return NVRTC_SUCCESS;
    }
    if (p && log && p->hit && !p->passthrough) {
        const char *l = p->hit->log ? p->hit->log : "";
        memcpy(log, l, strlen(l) + 1);
        return NVRTC_SUCCESS;
    }
    FORWARD(p, GetProgramLog(p ? p->real : NULL, log));
}

SHIM_API nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *name_expression,
                                         const char **lowered_name)
{
    struct prog *p = (struct prog *)prog;
    if (p && name_expression && lowered_name && p->hit && !p->passthrough) {
        for (size_t i = 0; i < p->hit->n_names; i++)
            if (!strcmp(p->hit->name_exprs[i], name_expression)) {
                *lowered_name = p->hit->lowered_names[i];
                return NVRTC_SUCCESS;
            }
        /* NVRTC's answer for an expression that was not added before the compile. */
        return NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
    }
    FORWARD(p, GetLoweredName(p ? p->real : NULL, name_expression, lowered_name));
}

SHIM_API nvrtcResult nvrtcGetPCHCreateStatus(nvrtcProgram prog)
{
    struct prog *p = (struct prog *)prog;
    FORWARD(p, GetPCHCreateStatus(p ? p->real : NULL));
}

SHIM_API nvrtcResult nvrtcGetPCHHeapSizeRequired(nvrtcProgram prog, size_t *size)
{
    struct prog *p = (struct prog *)prog;
    FORWARD(p, GetPCHHeapSizeRequired(p ? p->real : NULL, size));
}

/* ---- calls about the library, not a program ------------------------------- */

#define FORWARD_GLOBAL(call)                                                                       \
    do {                                                                                           \
        const kc_real_nvrtc *api_ = kc_real();                                                     \
        if (!api_)                                                                                 \
            return NVRTC_ERROR_INTERNAL_ERROR;                                                     \
        return api_->call;                                                                         \
    } while (0)

SHIM_API const char *nvrtcGetErrorString(nvrtcResult result)
{
    const kc_real_nvrtc *api = kc_real();
    return api ? api->GetErrorString(result) : kc_real_error();
}

/*
 * The calls a program makes about the library before it compiles: answered
 * from what this build said when a process last loaded it (facts.c), until
 * this process has loaded it; else asked, and remembered for the next.
 */
#define FORWARD_NOTED(call)                                                                        \
    do {                                                                                           \
        const kc_real_nvrtc *api_ = kc_real();                                                     \
        if (!api_)                                                                                 \
            return NVRTC_ERROR_INTERNAL_ERROR;                                                     \
        nvrtcResult rc_ = api_->call;                                                              \
        kc_facts_note(kc_shim_compiler(), api_);                                                   \
        return rc_;                                                                                \
    } while (0)

SHIM_API nvrtcResult nvrtcVersion(int *major, int *minor)
{
    /* NVIDIA names the file libnvrtc.so.MAJOR.MINOR.PATCH: a program that asks
     * for the version before each compile (CuPy's cache key holds it) need not
     * load NVRTC for that. Any other name: what the build said, or NVRTC. */
    const char *path = kc_real_path();
    const char *base = path ? strrchr(path, '/') : NULL;
    int ma, mi, patch, end = 0;
    kc_facts f;
    if (major && minor && base &&
        sscanf(base, "/libnvrtc.so.%d.%d.%d%n", &ma, &mi, &patch, &end) == 3 &&
        base[end] == '\0') {
        *major = ma;
        *minor = mi;
        return NVRTC_SUCCESS;
    }
    if (major && minor && !kc_real_loaded() && kc_facts_get(&f, kc_shim_compiler()) == 0) {
        *major = f.major;
        *minor = f.minor;
        return NVRTC_SUCCESS;
    }
    if (major && minor && !kc_real_loaded() && kc_shim_hit_version(major, minor) == 0)
        return NVRTC_SUCCESS;
    FORWARD_NOTED(Version(major, minor));
}

SHIM_API nvrtcResult nvrtcGetNumSupportedArchs(int *numArchs)
{
    kc_facts f;
    if (numArchs && !kc_real_loaded() && kc_facts_get(&f, kc_shim_compiler()) == 0) {
        *numArchs = f.n_archs;
        return NVRTC_SUCCESS;
    }
    FORWARD_NOTED(GetNumSupportedArchs(numArchs));
}

SHIM_API nvrtcResult nvrtcGetSupportedArchs(int *supportedArchs)
{
    kc_facts f;
    if (supportedArchs && !kc_real_loaded() && kc_facts_get(&f, kc_shim_compiler()) == 0) {
        memcpy(supportedArchs, f.archs, (size_t)f.n_archs * sizeof(*f.archs));
        return NVRTC_SUCCESS;
    }
    FORWARD_NOTED(GetSupportedArchs(supportedArchs));
}

SHIM_API nvrtcResult nvrtcGetPCHHeapSize(size_t *ret)
{
    FORWARD_GLOBAL(GetPCHHeapSize(ret));
}

SHIM_API nvrtcResult nvrtcSetPCHHeapSize(size_t size)
{
    FORWARD_GLOBAL(SetPCHHeapSize(size));
}
