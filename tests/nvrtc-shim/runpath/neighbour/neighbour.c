/* Found only through libkcopener's RUNPATH (tests/nvrtc-shim/runpath). */
int kc_neighbour(void);
int kc_neighbour(void)
{
    return 42;
}
