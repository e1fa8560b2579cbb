/*
 * NVRTC's entry points that kcache loads at run time, named once: an X-macro
 * list that cuda/toolkit.h and nvrtc-shim/shim.h expand into their tables
 * of pointers, and toolkit.c and real.c into the dlsym() calls that fill
 * them. A name spelled in one place cannot be loaded under another.
 *
 * Also the toolkit kcache is built against (meson passes both; the defaults
 * are for a compiler run by hand). The drop-in may include this header and no
 * other of compile/ (lib/README.md): it holds no code and no state.
 */
#ifndef KC_NVRTC_POINTS_H
#define KC_NVRTC_POINTS_H

#ifndef KC_TOOLKIT_DIR
#define KC_TOOLKIT_DIR "/usr/local/cuda"
#endif
#ifndef KC_CUDA_MAJOR
#define KC_CUDA_MAJOR 13
#endif

/* X(Name) for each nvrtcName that a compile on a miss calls, or its error message. */
#define KC_NVRTC_POINTS(X)                                                                         \
    X(Version)                                                                                     \
    X(GetErrorString)                                                                              \
    X(CreateProgram)                                                                               \
    X(DestroyProgram)                                                                              \
    X(CompileProgram)                                                                              \
    X(GetProgramLogSize)                                                                           \
    X(GetProgramLog)                                                                               \
    X(GetPTXSize)                                                                                  \
    X(GetPTX)                                                                                      \
    X(GetCUBINSize)                                                                                \
    X(GetCUBIN)                                                                                    \
    X(GetLTOIRSize)                                                                                \
    X(GetLTOIR)                                                                                    \
    X(AddNameExpression)                                                                           \
    X(GetLoweredName)                                                                              \
    X(GetNumSupportedArchs)                                                                        \
    X(GetSupportedArchs)

/* The field of a table of pointers for nvrtcName: typed from nvrtc.h's own declaration. */
#define KC_NVRTC_FIELD(Name) __typeof__(&nvrtc##Name) Name;

#endif
