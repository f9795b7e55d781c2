/* cupti_layout.c — pi_cupti.h against the real CUPTI headers (compiled only where they are installed:
 * tests/unit/test_simcuda_clock.py passes -I<cuda>/include).  Prints "ok layout" when every offset,
 * size and constant the project declares equals CUPTI's. */
#include <stddef.h>
#include <stdio.h>
#include <cupti.h>
#include "pi_cupti.h"

static int bad;
#define SAME(a, b) do { if ((long)(a) != (long)(b)) { printf("mismatch %s = %ld, CUPTI %s = %ld\n", #a, (long)(a), #b, (long)(b)); bad = 1; } } while (0)
#define OFF(view, field, real) SAME(offsetof(view, field), offsetof(real, field))

int main(void)
{
    SAME(PI_CUPTI_SIZEOF_KERNEL10, sizeof(CUpti_ActivityKernel10));
    SAME(PI_CUPTI_SIZEOF_MEMCPY6, sizeof(CUpti_ActivityMemcpy6));
    SAME(PI_CUPTI_SIZEOF_MEMSET4, sizeof(CUpti_ActivityMemset4));
    SAME(PI_CUPTI_SIZEOF_EXTERNAL_CORRELATION, sizeof(CUpti_ActivityExternalCorrelation));
    SAME(PI_CUPTI_SIZEOF_API, sizeof(CUpti_ActivityAPI));
#define KERNEL(real) \
    OFF(pi_cupti_kernel, kind, real); OFF(pi_cupti_kernel, start, real); OFF(pi_cupti_kernel, end, real); \
    OFF(pi_cupti_kernel, completed, real); OFF(pi_cupti_kernel, deviceId, real); \
    OFF(pi_cupti_kernel, contextId, real); OFF(pi_cupti_kernel, streamId, real); \
    OFF(pi_cupti_kernel, correlationId, real); OFF(pi_cupti_kernel, gridId, real); \
    OFF(pi_cupti_kernel, name, real); OFF(pi_cupti_kernel, graphNodeId, real); OFF(pi_cupti_kernel, graphId, real)
    KERNEL(CUpti_ActivityKernel5);
    KERNEL(CUpti_ActivityKernel6);
    KERNEL(CUpti_ActivityKernel7);
    KERNEL(CUpti_ActivityKernel8);
    KERNEL(CUpti_ActivityKernel9);
    KERNEL(CUpti_ActivityKernel10);
    /* simcuda's libcupti writes grid/block at these offsets (cupti.c KERNEL_GRID_OFFSET) */
    SAME(52, offsetof(CUpti_ActivityKernel10, gridX));
    SAME(64, offsetof(CUpti_ActivityKernel10, blockX));
#define COPY(view, real) \
    OFF(view, kind, real); OFF(view, bytes, real); OFF(view, start, real); OFF(view, end, real); \
    OFF(view, deviceId, real); OFF(view, contextId, real); OFF(view, streamId, real); \
    OFF(view, correlationId, real); OFF(view, graphNodeId, real); OFF(view, graphId, real)
    COPY(pi_cupti_memcpy, CUpti_ActivityMemcpy5);
    COPY(pi_cupti_memcpy, CUpti_ActivityMemcpy6);
    OFF(pi_cupti_memcpy, copyKind, CUpti_ActivityMemcpy6);
    OFF(pi_cupti_memcpy, srcKind, CUpti_ActivityMemcpy6);
    OFF(pi_cupti_memcpy, dstKind, CUpti_ActivityMemcpy6);
    OFF(pi_cupti_memcpy, flags, CUpti_ActivityMemcpy6);
    COPY(pi_cupti_memset, CUpti_ActivityMemset4);
    OFF(pi_cupti_memset, value, CUpti_ActivityMemset4);
    OFF(pi_cupti_external_correlation, kind, CUpti_ActivityExternalCorrelation);
    OFF(pi_cupti_external_correlation, externalKind, CUpti_ActivityExternalCorrelation);
    OFF(pi_cupti_external_correlation, externalId, CUpti_ActivityExternalCorrelation);
    OFF(pi_cupti_external_correlation, correlationId, CUpti_ActivityExternalCorrelation);
    OFF(pi_cupti_api, kind, CUpti_ActivityAPI);
    OFF(pi_cupti_api, cbid, CUpti_ActivityAPI);
    OFF(pi_cupti_api, start, CUpti_ActivityAPI);
    OFF(pi_cupti_api, end, CUpti_ActivityAPI);
    OFF(pi_cupti_api, processId, CUpti_ActivityAPI);
    OFF(pi_cupti_api, threadId, CUpti_ActivityAPI);
    OFF(pi_cupti_api, correlationId, CUpti_ActivityAPI);
    OFF(pi_cupti_api, returnValue, CUpti_ActivityAPI);
    SAME(sizeof(pi_cupti_resource_data), sizeof(CUpti_ResourceData));
    OFF(pi_cupti_resource_data, context, CUpti_ResourceData);
    SAME(offsetof(pi_cupti_resource_data, stream), offsetof(CUpti_ResourceData, resourceHandle.stream));
    OFF(pi_cupti_resource_data, resourceDescriptor, CUpti_ResourceData);
    SAME(sizeof(pi_cupti_graph_data), sizeof(CUpti_GraphData));
    OFF(pi_cupti_graph_data, graph, CUpti_GraphData);
    OFF(pi_cupti_graph_data, originalGraph, CUpti_GraphData);
    OFF(pi_cupti_graph_data, node, CUpti_GraphData);
    OFF(pi_cupti_graph_data, originalNode, CUpti_GraphData);
    OFF(pi_cupti_graph_data, nodeType, CUpti_GraphData);
    OFF(pi_cupti_graph_data, dependency, CUpti_GraphData);
    OFF(pi_cupti_graph_data, graphExec, CUpti_GraphData);
    SAME(PI_CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CB_DOMAIN_RESOURCE);
    SAME(PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
    SAME(PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
    SAME(PI_CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL);
    SAME(PI_CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMCPY);
    SAME(PI_CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMSET);
    SAME(PI_CUPTI_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY);
    SAME(PI_CUPTI_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMSET);
    SAME(PI_CUPTI_KIND_KERNEL, CUPTI_ACTIVITY_KIND_KERNEL);
    SAME(PI_CUPTI_KIND_DRIVER, CUPTI_ACTIVITY_KIND_DRIVER);
    SAME(PI_CUPTI_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_RUNTIME);
    SAME(PI_CUPTI_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    SAME(PI_CUPTI_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    SAME(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
    SAME(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1);
    SAME(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    SAME(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    SAME(PI_CUPTI_MEMCPY_HTOD, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
    SAME(PI_CUPTI_MEMCPY_DTOH, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
    SAME(PI_CUPTI_MEMCPY_DTOD, CUPTI_ACTIVITY_MEMCPY_KIND_DTOD);
    SAME(PI_CUPTI_MEMCPY_HTOH, CUPTI_ACTIVITY_MEMCPY_KIND_HTOH);
    SAME(PI_CUPTI_SUCCESS, CUPTI_SUCCESS);
    SAME(PI_CUPTI_ERROR_MAX_LIMIT_REACHED, CUPTI_ERROR_MAX_LIMIT_REACHED);
    SAME(PI_CUPTI_ERROR_NOT_COMPATIBLE, CUPTI_ERROR_NOT_COMPATIBLE);
    SAME(PI_CUPTI_ERROR_NOT_INITIALIZED, CUPTI_ERROR_NOT_INITIALIZED);
    SAME(PI_CUPTI_ERROR_INVALID_KIND, CUPTI_ERROR_INVALID_KIND);
    SAME(PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    SAME(PI_CUPTI_ERROR_UNKNOWN, CUPTI_ERROR_UNKNOWN);
    SAME(1, CUPTI_ERROR_INVALID_PARAMETER);
    SAME(18, CUPTI_ERROR_QUEUE_EMPTY);
    SAME(8, CUPTI_ERROR_OUT_OF_MEMORY);
    SAME(9, CUPTI_ACTIVITY_KIND_CONTEXT); /* simcuda_clock.c enables it: not compatible */
    SAME(130001, CUPTI_API_VERSION);
    if (!bad) printf("ok layout\n");
    return bad;
}
