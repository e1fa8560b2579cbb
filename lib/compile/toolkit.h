/*
 * The CUDA toolkit seen from kcache: where it is, what identifies it, and
 * NVRTC and nvJitLink loaded on first use.
 *
 * Neither library is linked: loading NVRTC costs a process about 9 ms of
 * relocations (measured: 50 runs of a program that only calls nvrtcVersion
 * take 0.47 s, against 0.04 s without it), more than a whole cache hit. So a
 * hit identifies the compiler by the ELF build-id read from the library file
 * (exact to the build), and only a miss loads it.
 */
#ifndef KC_TOOLKIT_H
#define KC_TOOLKIT_H

#include <nvJitLink.h>
#include <nvrtc.h>

#include "util/common.h"

typedef struct kc_nvrtc {
    __typeof__(&nvrtcVersion) Version;
    __typeof__(&nvrtcGetErrorString) GetErrorString;
    __typeof__(&nvrtcCreateProgram) CreateProgram;
    __typeof__(&nvrtcDestroyProgram) DestroyProgram;
    __typeof__(&nvrtcCompileProgram) CompileProgram;
    __typeof__(&nvrtcGetProgramLogSize) GetProgramLogSize;
    __typeof__(&nvrtcGetProgramLog) GetProgramLog;
    __typeof__(&nvrtcGetPTXSize) GetPTXSize;
    __typeof__(&nvrtcGetPTX) GetPTX;
    __typeof__(&nvrtcGetCUBINSize) GetCUBINSize;
    __typeof__(&nvrtcGetCUBIN) GetCUBIN;
    __typeof__(&nvrtcGetLTOIRSize) GetLTOIRSize;
    __typeof__(&nvrtcGetLTOIR) GetLTOIR;
    __typeof__(&nvrtcAddNameExpression) AddNameExpression;
    __typeof__(&nvrtcGetLoweredName) GetLoweredName;
    int major, minor;
} kc_nvrtc;

typedef struct kc_nvjitlink {
    __typeof__(&__nvJitLinkCreate_13_0) Create;
    __typeof__(&__nvJitLinkDestroy_13_0) Destroy;
    __typeof__(&__nvJitLinkAddData_13_0) AddData;
    __typeof__(&__nvJitLinkComplete_13_0) Complete;
    __typeof__(&__nvJitLinkGetLinkedCubinSize_13_0) GetLinkedCubinSize;
    __typeof__(&__nvJitLinkGetLinkedCubin_13_0) GetLinkedCubin;
    __typeof__(&__nvJitLinkGetErrorLogSize_13_0) GetErrorLogSize;
    __typeof__(&__nvJitLinkGetErrorLog_13_0) GetErrorLog;
    __typeof__(&__nvJitLinkGetInfoLogSize_13_0) GetInfoLogSize;
    __typeof__(&__nvJitLinkGetInfoLog_13_0) GetInfoLog;
    unsigned major, minor;
} kc_nvjitlink;

typedef struct kc_toolkit {
    char *root;          /* realpath of the toolkit root */
    char *nvrtc_path;    /* the library file */
    char *nvjitlink_path;
    char *identity;      /* what identifies its headers (versions, packages) */
    char nvrtc_id[96];   /* "libnvrtc.so.13 build-id 65be..." */
    char nvjitlink_id[96];
} kc_toolkit;

/* Finds the toolkit. Returns 0 or an error with a message. */
int kc_toolkit_find(kc_toolkit *tk, const char *explicit_root, char *msg, size_t msg_size);
void kc_toolkit_free(kc_toolkit *tk);
/* Uses this NVRTC library file instead of the toolkit's. Returns 0 or an error with a message. */
int kc_toolkit_use_nvrtc(kc_toolkit *tk, const char *path, char *msg, size_t msg_size);

/* Loads NVRTC (once per process). Returns 0 or an error with a message. */
int kc_nvrtc_get(const kc_toolkit *tk, const kc_nvrtc **out, char *msg, size_t msg_size);
int kc_nvjitlink_get(const kc_toolkit *tk, const kc_nvjitlink **out, char *msg, size_t msg_size);

/* The GNU build-id of an ELF file as hex into out. Returns 0 or KCACHE_EIO. */
int kc_elf_build_id(const char *path, char *out, size_t out_size);

#endif
