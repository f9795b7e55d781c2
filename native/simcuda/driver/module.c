/* module.c — simcuda driver: modules and libraries, loaded from a text image.
 *
 * An image is text (a test double's "cubin"):
 *
 *     simcuda-module
 *     NAME SIZE SIZE ...      one line per kernel: its name and parameter sizes
 *
 * Each parameter is placed at the next offset aligned to min(size, 8), as
 * nvcc packs scalars and pointers.  A loaded kernel reads every byte of every
 * parameter when launched (so a launch with too few params fails loudly).
 *
 * Like the real driver, unloading a module or library frees its functions and
 * the next load hands the same addresses out again (a LIFO free list): a new
 * kernel with another parameter layout may get an old kernel's CUfunction /
 * CUkernel address.  Function objects are never returned to malloc, so a stale
 * handle reads a dead object (CUDA_ERROR_INVALID_HANDLE), never freed memory.
 * A library's CUkernel is the same object as its CUfunction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../sim_driver.h"

#define IMAGE_MAGIC "simcuda-module"
#define MAX_IMAGE_KERNELS 4096
#define MAX_KERNEL_PARAMS 256

struct CUmod_st {
    uint32_t magic;
    unsigned n;
    struct CUfunc_st **funcs;
    struct CUmod_st *next_free;
};
struct CUlib_st { struct CUmod_st m; }; /* a library is a module with CUkernel handles */

static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t m_once = PTHREAD_ONCE_INIT;
static struct CUfunc_st *g_free_funcs;
static struct CUmod_st *g_free_mods;

static void m_prepare(void) { pthread_mutex_lock(&m_lock); }
static void m_parent(void) { pthread_mutex_unlock(&m_lock); }
static void m_child(void) { pthread_mutex_init(&m_lock, NULL); }
static void m_init(void) { pthread_atfork(m_prepare, m_parent, m_child); }
static void mlock(void) { pthread_once(&m_once, m_init); pthread_mutex_lock(&m_lock); }

/* a function object: from the free list (same address again) or new; m_lock held */
static struct CUfunc_st *func_get(void)
{
    struct CUfunc_st *f = g_free_funcs;
    if (f) {
        g_free_funcs = f->next_free;
        /* the old name/layout arrays are left to a racing reader of the dead handle */
        memset(f, 0, sizeof *f);
        return f;
    }
    return calloc(1, sizeof *f);
}

static void funcs_put(struct CUfunc_st **fs, unsigned n) /* m_lock held */
{
    for (unsigned i = 0; i < n; i++) {
        fs[i]->magic = MAGIC_DEAD;
        fs[i]->next_free = g_free_funcs;
        g_free_funcs = fs[i];
    }
}

/* parse one kernel line into f (name, layout); 0 or a CUresult */
static CUresult parse_kernel(const char *line, size_t len, struct CUfunc_st *f)
{
    char buf[1024];
    if (len >= sizeof buf) return CUDA_ERROR_INVALID_VALUE;
    memcpy(buf, line, len);
    buf[len] = 0;
    char *save = NULL, *tok = strtok_r(buf, " \t", &save);
    if (!tok) return CUDA_ERROR_INVALID_VALUE;
    size_t sizes[MAX_KERNEL_PARAMS], offsets[MAX_KERNEL_PARAMS], off = 0;
    unsigned n = 0;
    char *name = strdup(tok);
    for (tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *end;
        unsigned long sz = strtoul(tok, &end, 10);
        if (*end || sz == 0 || sz > 4096 || n == MAX_KERNEL_PARAMS) {
            free(name);
            return CUDA_ERROR_INVALID_VALUE;
        }
        size_t align = sz >= 8 ? 8 : sz >= 4 ? 4 : sz >= 2 ? 2 : 1;
        off = (off + align - 1) & ~(align - 1);
        offsets[n] = off;
        sizes[n] = sz;
        off += sz;
        n++;
    }
    f->name = name;
    f->offsets = malloc((n ? n : 1) * sizeof(size_t));
    f->sizes = malloc((n ? n : 1) * sizeof(size_t));
    if (!f->name || !f->offsets || !f->sizes) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(f->offsets, offsets, n * sizeof(size_t));
    memcpy(f->sizes, sizes, n * sizeof(size_t));
    f->nparams = n;
    f->argsize = off;
    f->fn = NULL; /* launch.c runs sim_image_kernel */
    return CUDA_SUCCESS;
}

/* modules belong to the current context; libraries need none */
static CUresult load(struct CUmod_st **out, const char *image, int need_ctx)
{
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    int dev;
    CUresult r = need_ctx ? sim_current_device(&dev) : CUDA_SUCCESS;
    if (r) return r;
    size_t ml = strlen(IMAGE_MAGIC);
    if (strncmp(image, IMAGE_MAGIC, ml) != 0 || (image[ml] != '\n' && image[ml] != 0))
        return 218; /* CUDA_ERROR_INVALID_PTX: not an image */
    struct CUfunc_st *fs[MAX_IMAGE_KERNELS];
    unsigned n = 0;
    mlock();
    for (const char *p = image + ml; *p;) {
        if (*p == '\n') { p++; continue; }
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        struct CUfunc_st *f = n < MAX_IMAGE_KERNELS ? func_get() : NULL;
        r = f ? parse_kernel(p, len, f) : CUDA_ERROR_INVALID_VALUE;
        if (r) {
            if (f) fs[n++] = f;
            funcs_put(fs, n);
            pthread_mutex_unlock(&m_lock);
            return r;
        }
        f->magic = MAGIC_FUNC;
        fs[n++] = f;
        p += len;
    }
    struct CUmod_st *m = g_free_mods;
    if (m) g_free_mods = m->next_free;
    else m = calloc(1, sizeof(struct CUlib_st));
    struct CUfunc_st **arr = m ? malloc((n ? n : 1) * sizeof *arr) : NULL;
    if (!arr) {
        funcs_put(fs, n);
        pthread_mutex_unlock(&m_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(arr, fs, n * sizeof *arr);
    m->funcs = arr;
    m->n = n;
    m->next_free = NULL;
    m->magic = MAGIC_MODULE;
    pthread_mutex_unlock(&m_lock);
    *out = m;
    return CUDA_SUCCESS;
}

static CUresult unload(struct CUmod_st *m)
{
    mlock();
    if (!m || m->magic != MAGIC_MODULE) {
        pthread_mutex_unlock(&m_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    funcs_put(m->funcs, m->n);
    free(m->funcs);
    m->funcs = NULL;
    m->n = 0;
    m->magic = MAGIC_DEAD;
    m->next_free = g_free_mods;
    g_free_mods = m;
    pthread_mutex_unlock(&m_lock);
    return CUDA_SUCCESS;
}

static CUresult get(struct CUfunc_st **out, struct CUmod_st *m, const char *name)
{
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    mlock();
    if (!m || m->magic != MAGIC_MODULE) r = CUDA_ERROR_INVALID_HANDLE;
    else
        for (unsigned i = 0; i < m->n; i++)
            if (strcmp(m->funcs[i]->name, name) == 0) {
                *out = m->funcs[i];
                r = CUDA_SUCCESS;
                break;
            }
    pthread_mutex_unlock(&m_lock);
    return r;
}

/* the body of every image kernel: read each parameter's bytes */
HIDDEN void sim_image_kernel(CUfunction f, void **params)
{
    volatile unsigned char sink = 0;
    for (unsigned i = 0; i < f->nparams; i++) {
        const unsigned char *p = params[i];
        for (size_t b = 0; b < f->sizes[i]; b++) sink ^= p[b];
    }
    (void)sink;
}

static char *read_file(const char *fname)
{
    FILE *fp = fname ? fopen(fname, "rb") : NULL;
    if (!fp) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, k;
    char chunk[4096];
    while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0) {
        if (n + k + 1 > cap) {
            cap = (n + k + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(fp); return NULL; }
            buf = nb;
        }
        memcpy(buf + n, chunk, k);
        n += k;
    }
    fclose(fp);
    if (buf) buf[n] = 0;
    return buf;
}

SIM_API(CUresult, cuModuleLoadData, (CUmodule *module, const void *image))
{
    return load((struct CUmod_st **)module, image, 1);
}

SIM_API(CUresult, cuModuleLoadDataEx, (CUmodule *module, const void *image, unsigned int numOptions, int *options,
                                      void **optionValues))
{
    (void)numOptions, (void)options, (void)optionValues;
    return load((struct CUmod_st **)module, image, 1);
}

SIM_API(CUresult, cuModuleLoad, (CUmodule *module, const char *fname))
{
    if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
    char *image = read_file(fname);
    if (!image) return 301; /* CUDA_ERROR_FILE_NOT_FOUND */
    CUresult r = load((struct CUmod_st **)module, image, 1);
    free(image);
    return r;
}

SIM_API(CUresult, cuModuleGetFunction, (CUfunction *hfunc, CUmodule hmod, const char *name))
{
    return get(hfunc, hmod, name);
}

SIM_API(CUresult, cuModuleUnload, (CUmodule hmod)) { return unload(hmod); }

SIM_API(CUresult, cuLibraryLoadData, (CUlibrary *library, const void *code, int *jitOptions,
                                     void **jitOptionsValues, unsigned int numJitOptions, int *libraryOptions,
                                     void **libraryOptionValues, unsigned int numLibraryOptions))
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    return load((struct CUmod_st **)library, code, 0);
}

SIM_API(CUresult, cuLibraryGetKernel, (CUkernel *pKernel, CUlibrary library, const char *name))
{
    return get((struct CUfunc_st **)pKernel, library ? &library->m : NULL, name);
}

SIM_API(CUresult, cuLibraryUnload, (CUlibrary library)) { return unload(library ? &library->m : NULL); }
