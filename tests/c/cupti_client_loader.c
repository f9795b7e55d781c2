/*
 * cupti_client_loader.c — runs the Kineto-like client of cupti_client.c from a library loaded with
 * dlopen(RTLD_LOCAL), as Python loads torch._C: the library's libcupti.so.13 (a NEEDED entry of it) is then
 * in that local scope only.  This program links neither libcupti nor the CUDA runtime.
 *
 *   cupti_client_loader LIBRARY before|after N
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror()); return 3; }
    int (*client_main)(int, char **) = (int (*)(int, char **))dlsym(h, "client_main");
    if (!client_main) { fprintf(stderr, "dlsym client_main: %s\n", dlerror()); return 3; }
    return client_main(argc - 1, argv + 1);
}
