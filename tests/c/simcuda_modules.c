/*
 * simcuda_modules.c — simcuda's modules and libraries behave like the real
 * driver's: kernels from an image with the layout it states, handles dead
 * after unload, the next load handed the same addresses with another layout.
 * Prints "ok" or the first check that failed (exit 1).
 */
#include <stdio.h>
#include <string.h>

#include "pi_cuda.h"

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleLoad(CUmodule *, const char *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuModuleUnload(CUmodule);
CUresult cuLibraryLoadData(CUlibrary *, const void *, int *, void **, unsigned, int *, void **, unsigned);
CUresult cuLibraryGetKernel(CUkernel *, CUlibrary, const char *);
CUresult cuLibraryUnload(CUlibrary);
CUresult cuKernelGetFunction(CUfunction *, CUkernel);
CUresult cuFuncGetParamInfo(CUfunction, size_t, size_t *, size_t *);
CUresult cuFuncGetName(const char **, CUfunction);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

#define EXPECT(c) do { if (!(c)) { printf("FAILED line %d: %s\n", __LINE__, #c); return 1; } } while (0)

static int nparams(CUfunction f) {
    size_t o, s;
    int n = 0;
    while (cuFuncGetParamInfo(f, (size_t)n, &o, &s) == 0) n++;
    return n;
}

int main(int argc, char **argv) {
    CUcontext ctx;
    EXPECT(cuInit(0) == 0);
    EXPECT(cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0);
    CUmodule m;
    CUfunction a, b, c;
    EXPECT(cuModuleLoadData(&m, "simcuda-module\nka 8 4 8\nkb 24\n") == 0);
    EXPECT(cuModuleGetFunction(&a, m, "ka") == 0 && cuModuleGetFunction(&b, m, "kb") == 0);
    EXPECT(cuModuleGetFunction(&c, m, "nope") == CUDA_ERROR_NOT_FOUND);
    size_t off, size;
    EXPECT(nparams(a) == 3 && nparams(b) == 1);
    EXPECT(cuFuncGetParamInfo(a, 1, &off, &size) == 0 && off == 8 && size == 4);
    EXPECT(cuFuncGetParamInfo(a, 2, &off, &size) == 0 && off == 16 && size == 8); /* aligned to 8 */
    const char *name;
    EXPECT(cuFuncGetName(&name, b) == 0 && strcmp(name, "kb") == 0);
    long x = 1;
    int i = 2;
    void *args[] = {&x, &i, &x};
    EXPECT(cuLaunchKernel(a, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) == 0);
    EXPECT(cuModuleUnload(m) == 0);
    EXPECT(cuModuleUnload(m) == CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuLaunchKernel(a, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) == CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuFuncGetParamInfo(a, 0, &off, &size) == CUDA_ERROR_INVALID_HANDLE);
    /* the next load gets the freed addresses back, with its own layouts */
    CUlibrary lib;
    CUkernel k1, k2;
    EXPECT(cuLibraryLoadData(&lib, "simcuda-module\nk1 8\nk2 8 8 8 8 8\n", NULL, NULL, 0, NULL, NULL, 0) == 0);
    EXPECT(cuLibraryGetKernel(&k1, lib, "k1") == 0 && cuLibraryGetKernel(&k2, lib, "k2") == 0);
    CUfunction f1, f2;
    EXPECT(cuKernelGetFunction(&f1, k1) == 0 && cuKernelGetFunction(&f2, k2) == 0);
    EXPECT((f1 == a || f1 == b) && (f2 == a || f2 == b)); /* reused */
    EXPECT(nparams(f1) == 1 && nparams(f2) == 5);
    EXPECT(cuLibraryUnload(lib) == 0);
    /* not an image; a file image */
    EXPECT(cuModuleLoadData(&m, "\x7f" "ELF") != 0);
    if (argc > 1) {
        FILE *fp = fopen(argv[1], "w");
        fputs("simcuda-module\nkf 8 8\n", fp);
        fclose(fp);
        EXPECT(cuModuleLoad(&m, argv[1]) == 0 && cuModuleGetFunction(&c, m, "kf") == 0 && nparams(c) == 2);
        EXPECT(cuModuleUnload(m) == 0);
    }
    puts("ok");
    return 0;
}
