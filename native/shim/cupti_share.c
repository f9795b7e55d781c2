/*
 * cupti_share.c — sharing CUPTI with the program's own profiler (torch.profiler / Kineto, any CUPTI client).
 *
 * CUPTI keeps one set of activity-buffer callbacks per process: cuptiActivityRegisterCallbacks replaces the
 * ones registered before, and the records then go to the buffers of whoever registered last.  There is no
 * call to ask whether another client registered or enabled activity kinds (cuptiGetCallbackState needs the
 * caller's own subscriber handle), and only the callback API's cuptiSubscribe says that a subscriber exists
 * (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, on CUDA <= 13.2 or drivers before r610).  So the shim
 * watches the entry points a client starts with, as an LD_PRELOAD library can:
 *
 *   cuptiActivityRegisterCallbacks, cuptiActivityEnable, cuptiActivityEnableContext, cuptiSubscribe
 *
 * are exported by libpyinterpose.so (and returned by its dlsym for a client that looks them up), so a
 * client's calls come here first; the shim's own CUPTI calls go to libcupti through its own handle
 * (cupti.c) and never pass here.  The first activity call of a client (registering callbacks, or
 * enabling a kind) before the shim set CUPTI up keeps the device clock off for good: the shim never takes
 * CUPTI from a client that holds it.  One after it makes the shim hand CUPTI back first (pi_gpu_yield:
 * everything CUPTI holds for it is flushed into the trace, the kinds it enabled are disabled, no further
 * CUPTI call, no more correlation ids pushed), then the client's call goes on: the client's profile is
 * whole, and the trace keeps the device times up to that moment with a note saying where they end and why.
 * A subscription alone (cuptiSubscribe: callbacks, no activity buffers) does not conflict with the shim's
 * activity records and is only remembered: the setup's own probe (cupti.c) then knows whose it is.
 * The real functions: the definition after the shim (RTLD_NEXT: the client's libcupti), the one its dlsym
 * found, or, where libcupti came with a library loaded RTLD_LOCAL (torch._C and its Kineto), the one the
 * calling object's own scope resolves.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cupti.h"
#include "pi_cupti.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))
#define CALLER __builtin_return_address(0) /* in an exported entry point: the client's code */

typedef pi_CUptiResult (*enable_ctx_fn)(void *context, uint32_t kind);

enum { W_REGISTER, W_ENABLE, W_ENABLE_CTX, W_SUBSCRIBE, W_COUNT };
static const char *const W_NAMES[W_COUNT] = {"cuptiActivityRegisterCallbacks", "cuptiActivityEnable",
                                             "cuptiActivityEnableContext", "cuptiSubscribe"};
static void *_Atomic g_real[W_COUNT];
static _Atomic int g_client_subscribed;

static int ours(const void *p);

/* `name` as the object that called (at `ret`) resolves it: that object and its dependencies (dlsym on its own
 * handle), where a libcupti that came with a library loaded RTLD_LOCAL is; never one of our entry points */
static void *in_callers_scope(void *ret, const char *name) {
    Dl_info info;
    if (!ret || !dladdr(ret, &info) || !info.dli_fname || !info.dli_fname[0]) return NULL;
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return NULL;
    void *p = pi_real_dlsym(h, name);
    dlclose(h);
    return p && !ours(p) ? p : NULL;
}

/* `name` in a libcupti already loaded, found by its soname in whatever scope it was loaded */
static void *in_loaded_libcupti(const char *name) {
    static const char *const sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so", NULL};
    for (int i = 0; sonames[i]; i++) {
        void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *p = pi_real_dlsym(h, name);
        dlclose(h);
        if (p && !ours(p)) return p;
    }
    return NULL;
}

/* The real function for a client's call from `ret`: the definition after the shim (RTLD_NEXT: a libcupti in
 * the global scope); else the caller's own scope, where torch's Kineto has it (torch._C is loaded RTLD_LOCAL,
 * and with it libcupti: RTLD_NEXT finds none, as an H100 run showed); else a libcupti loaded anywhere. */
static void *real(int w, void *ret) {
    void *p = atomic_load(&g_real[w]);
    if (p) return p;
    p = pi_real_dlsym(RTLD_NEXT, W_NAMES[w]);
    if (p && ours(p)) p = NULL;
    if (!p) p = in_callers_scope(ret, W_NAMES[w]);
    if (!p) p = in_loaded_libcupti(W_NAMES[w]);
    if (p) {
        void *none = NULL;
        if (!atomic_compare_exchange_strong(&g_real[w], &none, p)) p = none;
    }
    return p;
}

/* "NAME from OBJECT" of the caller at `ret` */
static void who(const char *call, void *ret, char *out, size_t n) {
    Dl_info info;
    const char *obj = "?";
    if (ret && dladdr(ret, &info) && info.dli_fname) {
        const char *s = strrchr(info.dli_fname, '/');
        obj = s ? s + 1 : info.dli_fname;
    }
    snprintf(out, n, "%s from %s", call, obj);
}

int pi_gpu_client_subscribed(void) { return atomic_load(&g_client_subscribed); }

EXPORT pi_CUptiResult cuptiActivityRegisterCallbacks(pi_cupti_buffer_requested_fn req,
                                                     pi_cupti_buffer_completed_fn comp) {
    char w[300];
    who(W_NAMES[W_REGISTER], __builtin_return_address(0), w, sizeof w);
    pi_gpu_yield(w);
    pi_cuptiActivityRegisterCallbacks_fn f = (pi_cuptiActivityRegisterCallbacks_fn)real(W_REGISTER, CALLER);
    return f ? f(req, comp) : PI_CUPTI_ERROR_NOT_INITIALIZED;
}

EXPORT pi_CUptiResult cuptiActivityEnable(uint32_t kind) {
    char w[300];
    who(W_NAMES[W_ENABLE], __builtin_return_address(0), w, sizeof w);
    pi_gpu_yield(w);
    pi_cuptiActivityEnable_fn f = (pi_cuptiActivityEnable_fn)real(W_ENABLE, CALLER);
    return f ? f(kind) : PI_CUPTI_ERROR_NOT_INITIALIZED;
}

EXPORT pi_CUptiResult cuptiActivityEnableContext(void *context, uint32_t kind) {
    char w[300];
    who(W_NAMES[W_ENABLE_CTX], __builtin_return_address(0), w, sizeof w);
    pi_gpu_yield(w);
    enable_ctx_fn f = (enable_ctx_fn)real(W_ENABLE_CTX, CALLER);
    return f ? f(context, kind) : PI_CUPTI_ERROR_NOT_INITIALIZED;
}

EXPORT pi_CUptiResult cuptiSubscribe(pi_cupti_subscriber *subscriber, pi_cupti_callback_fn callback,
                                     void *userdata) {
    pi_cuptiSubscribe_fn f = (pi_cuptiSubscribe_fn)real(W_SUBSCRIBE, CALLER);
    pi_CUptiResult r = f ? f(subscriber, callback, userdata) : PI_CUPTI_ERROR_NOT_INITIALIZED;
    if (r == PI_CUPTI_SUCCESS) atomic_store(&g_client_subscribed, 1);
    return r;
}

static int ours(const void *p) {
    return p == (void *)cuptiActivityRegisterCallbacks || p == (void *)cuptiActivityEnable ||
           p == (void *)cuptiActivityEnableContext || p == (void *)cuptiSubscribe;
}

/* dlsym(handle, name) found `p` for a cupti* name: our entry point instead (its real one remembered) */
void *pi_cupti_dlsym(const char *name, void *p) {
    for (int w = 0; w < W_COUNT; w++)
        if (strcmp(name, W_NAMES[w]) == 0) {
            void *none = NULL;
            atomic_compare_exchange_strong(&g_real[w], &none, p);
            switch (w) {
            case W_REGISTER: return (void *)cuptiActivityRegisterCallbacks;
            case W_ENABLE: return (void *)cuptiActivityEnable;
            case W_ENABLE_CTX: return (void *)cuptiActivityEnableContext;
            default: return (void *)cuptiSubscribe;
            }
        }
    return p;
}
