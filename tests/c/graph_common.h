/*
 * graph_common.h — what the graph-building workloads (graph_addnode.c, graph_execset.c) share: CHECK, the driver
 * entry points through cuGetProcAddress (as XLA finds them; `gpa` set by the workload), the two-pointer kernel.
 */
#ifndef GRAPH_COMMON_H
#define GRAPH_COMMON_H
#include <stdio.h>
#include <stdlib.h>

#include "pi_cuda.h"

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static gpa_fn gpa;

static void *proc(const char *name, int version) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(gpa(name, &p, version, 0, &st));
    if (!p) exit(4);
    return p;
}

/* k(x, y): y[1] = x[0] + 1 */
static void k2(void **params) {
    char *x = *(char **)params[0], *y = *(char **)params[1];
    y[1] = (char)(x[0] + 1);
}
static const size_t off2[] = {0, 8}, sz2[] = {8, 8};
#endif
