/*
 * shim_modules.c — THREADS threads each load, launch and unload N modules /
 * libraries on simcuda, the way XLA's autotuner does, and write what every
 * launch passed (ground truth for the trace's accesses).
 *
 *   shim_modules OUT.jsonl N THREADS
 *
 * Each iteration builds an image with one kernel of a random layout (0-5
 * pointers, an optional leading int, an optional 24-byte struct holding two
 * pointers), loads it through one of four paths, launches it twice through
 * one of the launch forms, and unloads it.  simcuda hands unloaded function
 * addresses out again, so a kernel often gets the address of an earlier
 * kernel with another layout.  The kernelParams array and the argument buffer
 * end at a guard page: a reader that believes a stale, longer layout faults.
 *
 * OUT.jsonl: one line per thread: {"tid": T, "launches": [[name, handle, [addr, ...]], ...]}
 * in launch order; handle = the CUfunction/cudaKernel_t address, addr = the
 * base of each block the launch passed.
 * stdout: {"launches": L, "accesses": A, "loads": M} (totals).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pi_cuda.h"

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, int *jo, void **jv, unsigned nj, int *lo,
                                void **lv, unsigned nl);
cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name);
cudaError_t cudaLibraryUnload(cudaLibrary_t lib);

typedef CUresult (*init_t)(unsigned);
typedef CUresult (*mod_load_t)(CUmodule *, const void *);
typedef CUresult (*mod_get_t)(CUfunction *, CUmodule, const char *);
typedef CUresult (*mod_unload_t)(CUmodule);
typedef CUresult (*lib_load_t)(CUlibrary *, const void *, int *, void **, unsigned, int *, void **, unsigned);
typedef CUresult (*lib_get_t)(CUkernel *, CUlibrary, const char *);
typedef CUresult (*lib_unload_t)(CUlibrary);
typedef CUresult (*kern_fn_t)(CUfunction *, CUkernel);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);

static mod_load_t p_mod_load;
static mod_get_t p_mod_get;
static mod_unload_t p_mod_unload;
static lib_load_t p_lib_load;
static lib_get_t p_lib_get;
static lib_unload_t p_lib_unload;
static kern_fn_t p_kern_fn;
static launch_t p_launch;
static launch_ex_t p_launch_ex;

static int g_iters;
static FILE *g_out;
static pthread_mutex_t g_out_lock = PTHREAD_MUTEX_INITIALIZER;
static long g_launches, g_accesses, g_loads;

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) { fprintf(stderr, "no %s\n", name); exit(2); }
    return p;
}

#define MAXP 8

typedef struct {
    int n;              /* parameters */
    size_t off[MAXP], size[MAXP];
    size_t total;
    char image[512];
    char name[64];
} kernel_desc;

/* random layout: [int] ptr* [struct{ptr, u64, ptr}] */
static void make_kernel(kernel_desc *k, unsigned *seed, int tid, int it) {
    int lead_int = rand_r(seed) & 1, nptr = rand_r(seed) % 6, strct = (rand_r(seed) % 3) == 0;
    k->n = 0;
    size_t off = 0;
    char sizes[128] = "";
    if (lead_int) { k->off[k->n] = off; k->size[k->n++] = 4; off = 4; strcat(sizes, " 4"); }
    for (int i = 0; i < nptr; i++) {
        off = (off + 7) & ~(size_t)7;
        k->off[k->n] = off; k->size[k->n++] = 8; off += 8;
        strcat(sizes, " 8");
    }
    if (strct) {
        off = (off + 7) & ~(size_t)7;
        k->off[k->n] = off; k->size[k->n++] = 24; off += 24;
        strcat(sizes, " 24");
    }
    k->total = off;
    snprintf(k->name, sizeof k->name, "k_t%d_i%d_n%d", tid, it, k->n);
    snprintf(k->image, sizeof k->image, "simcuda-module\n%s%s\n", k->name, sizes);
}

static void *worker(void *arg) {
    int tid = (int)(intptr_t)arg;
    unsigned seed = 12345u + 7919u * (unsigned)tid;
    long page = sysconf(_SC_PAGESIZE);
    /* [page: params array | page: argument buffer | guard page] each ends at a guard */
    char *area = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) exit(4);
    CHECK(mprotect(area + page, page, PROT_NONE));
    CHECK(mprotect(area + 3 * page, page, PROT_NONE));
    char *params_end = area + page, *buf_end = area + 3 * page;

    size_t cap = 1 << 16, len = 0;
    char *json = malloc(cap);
    len += (size_t)snprintf(json, cap, "{\"tid\": %ld, \"launches\": [", (long)syscall(SYS_gettid));
    long launches = 0, accesses = 0;
    int first = 1;
    void *warm;
    CHECK(cudaMalloc(&warm, 256)); /* this thread gets the primary context current */
    CHECK(cudaFree(warm));
    for (int it = 0; it < g_iters; it++) {
        kernel_desc k;
        make_kernel(&k, &seed, tid, it);
        int form = it % 4;
        CUmodule mod = NULL;
        CUlibrary lib = NULL;
        cudaLibrary_t rlib = NULL;
        CUfunction f = NULL;
        CUkernel kern = NULL;
        cudaKernel_t rk = NULL;
        if (form == 0 || form == 2) {
            CHECK(p_mod_load(&mod, k.image));
            CHECK(p_mod_get(&f, mod, k.name));
        } else if (form == 1) {
            CHECK(p_lib_load(&lib, k.image, NULL, NULL, 0, NULL, NULL, 0));
            CHECK(p_lib_get(&kern, lib, k.name));
            CHECK(p_kern_fn(&f, kern));
        } else {
            CHECK(cudaLibraryLoadData(&rlib, k.image, NULL, NULL, 0, NULL, NULL, 0));
            CHECK(cudaLibraryGetKernel(&rk, rlib, k.name));
        }
        /* blocks for the pointers */
        void *blocks[2 * MAXP];
        int nb = 0;
        char *buf = buf_end - ((k.total + 7) & ~(size_t)7);
        void **params = (void **)(params_end - (size_t)k.n * sizeof(void *));
        memset(buf, 0, (size_t)(buf_end - buf));
        for (int i = 0; i < k.n; i++) {
            char *slot = buf + k.off[i];
            params[i] = slot;
            if (k.size[i] == 4) {
                int v = 0x20;
                memcpy(slot, &v, 4);
            } else if (k.size[i] == 8) {
                CHECK(cudaMalloc(&blocks[nb], 256 + (size_t)(rand_r(&seed) % 65536)));
                memcpy(slot, &blocks[nb], 8);
                nb++;
            } else {
                uint64_t w[3];
                CHECK(cudaMalloc(&blocks[nb], 4096));
                CHECK(cudaMalloc(&blocks[nb + 1], 1 << 20));
                w[0] = (uint64_t)(uintptr_t)blocks[nb];
                w[1] = 0x20;
                w[2] = (uint64_t)(uintptr_t)blocks[nb + 1] + 100; /* interior pointer */
                memcpy(slot, w, 24);
                nb += 2;
            }
        }
        for (int rep = 0; rep < 2; rep++) {
            if (form == 0) {
                CHECK(p_launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, k.n ? params : NULL, NULL));
            } else if (form == 1) {
                CUlaunchConfig cfg;
                memset(&cfg, 0, sizeof cfg);
                cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
                cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
                CHECK(p_launch_ex(&cfg, rep ? (CUfunction)(void *)kern : f, k.n ? params : NULL, NULL));
            } else if (form == 2) {
                CUlaunchConfig cfg;
                memset(&cfg, 0, sizeof cfg);
                cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
                cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
                size_t bsz = k.total;
                void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bsz,
                                 CU_LAUNCH_PARAM_END};
                if (rep == 0) CHECK(p_launch_ex(&cfg, f, NULL, k.n ? extra : NULL));
                else CHECK(p_launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, k.n ? extra : NULL));
            } else {
                dim3 g = {1, 1, 1}, b = {32, 1, 1};
                CHECK(cudaLaunchKernel((const void *)rk, g, b, k.n ? params : NULL, 0, NULL));
            }
            launches++;
            accesses += nb;
            if (len + 64 + (size_t)nb * 24 + 256 > cap) {
                cap *= 2;
                json = realloc(json, cap);
            }
            const void *handle = form == 3 ? (const void *)rk : (const void *)f;
            len += (size_t)snprintf(json + len, cap - len, "%s[\"%s\", %llu, [", first ? "" : ", ", k.name,
                                    (unsigned long long)(uintptr_t)handle);
            first = 0;
            for (int i = 0; i < nb; i++)
                len += (size_t)snprintf(json + len, cap - len, "%s%llu", i ? ", " : "",
                                        (unsigned long long)(uintptr_t)blocks[i]);
            len += (size_t)snprintf(json + len, cap - len, "]]");
        }
        for (int i = 0; i < nb; i++) CHECK(cudaFree(blocks[i]));
        if (mod) CHECK(p_mod_unload(mod));
        if (lib) CHECK(p_lib_unload(lib));
        if (rlib) CHECK(cudaLibraryUnload(rlib));
    }
    len += (size_t)snprintf(json + len, cap - len, "]}\n");
    pthread_mutex_lock(&g_out_lock);
    fwrite(json, 1, len, g_out);
    g_launches += launches;
    g_accesses += accesses;
    g_loads += g_iters;
    pthread_mutex_unlock(&g_out_lock);
    free(json);
    munmap(area, 4 * page);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: shim_modules OUT.jsonl N THREADS\n");
        return 2;
    }
    g_out = fopen(argv[1], "w");
    if (!g_out) return 2;
    g_iters = atoi(argv[2]);
    int nthreads = atoi(argv[3]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) return 2;
    CHECK(((init_t)sym(h, "cuInit"))(0));
    p_mod_load = (mod_load_t)sym(h, "cuModuleLoadData");
    p_mod_get = (mod_get_t)sym(h, "cuModuleGetFunction");
    p_mod_unload = (mod_unload_t)sym(h, "cuModuleUnload");
    p_lib_load = (lib_load_t)sym(h, "cuLibraryLoadData");
    p_lib_get = (lib_get_t)sym(h, "cuLibraryGetKernel");
    p_lib_unload = (lib_unload_t)sym(h, "cuLibraryUnload");
    p_kern_fn = (kern_fn_t)sym(h, "cuKernelGetFunction");
    p_launch = (launch_t)sym(h, "cuLaunchKernel");
    p_launch_ex = (launch_ex_t)sym(h, "cuLaunchKernelEx");
    pthread_t th[64];
    if (nthreads < 1 || nthreads > 64) return 2;
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    fclose(g_out);
    printf("{\"launches\": %ld, \"accesses\": %ld, \"loads\": %ld}\n", g_launches, g_accesses, g_loads);
    return 0;
}
