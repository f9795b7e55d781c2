/*
 * pi_cuda.h — the small part of the CUDA runtime and driver ABI that the shim
 * and simcuda need, declared here so that nothing requires a CUDA toolkit to
 * build.  Values match cuda.h / driver_types.h of CUDA 12.x and 13.x.
 */
#ifndef PI_CUDA_H
#define PI_CUDA_H
#include <stddef.h>
#include <stdint.h>

/* ---- driver ---- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
typedef struct CUmod_st *CUmodule;
typedef struct CUlib_st *CUlibrary;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef unsigned int cuuint32_t;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NO_DEVICE 100

/* cuGetProcAddress flags and status */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* cuLaunchKernel `extra` keys */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define CU_LAUNCH_PARAM_END_AS_INT 0
#define CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT 1
#define CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT 2

typedef struct CUlaunchAttribute_st {
    int id;
    char pad[4];
    char value[64];
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* CUmemLocation (CUDA 12.2+ _v2 UVM hints, VMM properties) */
typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_LOCATION_TYPE_HOST = 2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4
} CUmemLocationType;
typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;                 /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

typedef struct CUmemPoolProps_st {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

/* VMM shareable handles, IPC handles, multicast objects (collective libraries: NCCL) */
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_HANDLE_TYPE_FABRIC 8
typedef struct CUipcMemHandle_st { char reserved[64]; } CUipcMemHandle; /* passed by value */
typedef struct CUmulticastObjectProp_st {
    unsigned int numDevices;
    size_t size;
    unsigned long long handleTypes;
    unsigned long long flags;
} CUmulticastObjectProp;

/* ---- runtime ---- */
typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef CUevent cudaEvent_t;
typedef CUmemoryPool cudaMemPool_t;
typedef CUgraphExec cudaGraphExec_t;
typedef CUgraph cudaGraph_t;
typedef CUkernel cudaKernel_t;
typedef CUlibrary cudaLibrary_t;
typedef struct CUmemLocation_st cudaMemLocation; /* same layout */
typedef CUipcMemHandle cudaIpcMemHandle_t;
typedef CUmemPoolProps cudaMemPoolProps; /* same layout */
#define cudaSuccess 0
#define cudaErrorInvalidValue 1
#define cudaErrorMemoryAllocation 2
#define cudaErrorInitializationError 3
#define cudaErrorInvalidDeviceFunction 98
#define cudaErrorNoDevice 100
#define cudaErrorSymbolNotFound 500
#define cudaErrorNotSupported 801

typedef struct dim3 { unsigned int x, y, z; } dim3;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

typedef struct cudaLaunchAttribute_st {
    int id;
    char pad[4];
    char val[64];
} cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;

/* cudaGetDriverEntryPoint flags / status */
#define cudaEnableDefault 0
#define cudaEnableLegacyStream 1
#define cudaEnablePerThreadDefaultStream 2
typedef enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
} cudaDriverEntryPointQueryResult;


/* ---- CUDA graphs built node by node, and executable graph updates ---- */
typedef struct CUgraphNode_st *CUgraphNode;
typedef CUgraphNode cudaGraphNode_t;
typedef struct CUDA_KERNEL_NODE_PARAMS_st {     /* _v2 adds kern and ctx at the end */
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;
typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
} CUDA_MEMSET_NODE_PARAMS;
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_UNIFIED 4
typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;          /* out */
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef CUDA_MEM_ALLOC_NODE_PARAMS cudaMemAllocNodeParams; /* same layout */
typedef struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
} cudaKernelNodeParams;
typedef struct cudaMemsetParams {
    void *dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
} cudaMemsetParams;
typedef struct CUgraphExecUpdateResultInfo_st {
    int result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;
typedef CUgraphExecUpdateResultInfo cudaGraphExecUpdateResultInfo;

/* ---- the generic node API: cuGraphAddNode (12.2), cuGraphAddNode_v2 (12.3; edge data), cudaGraphAddNode,
 * cuGraphExecNodeSetParams.  One parameter block for every node type (a union, 256 bytes), the node type
 * first.  Only the members the shim reads are spelled out; every layout checked against cuda.h /
 * driver_types.h of CUDA 13.0. ---- */
typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY = 1,
    CU_GRAPH_NODE_TYPE_MEMSET = 2,
    CU_GRAPH_NODE_TYPE_HOST = 3,
    CU_GRAPH_NODE_TYPE_GRAPH = 4,
    CU_GRAPH_NODE_TYPE_EMPTY = 5,
    CU_GRAPH_NODE_TYPE_WAIT_EVENT = 6,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD = 7,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL = 8,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT = 9,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE = 11,
    CU_GRAPH_NODE_TYPE_BATCH_MEM_OP = 12,
    CU_GRAPH_NODE_TYPE_CONDITIONAL = 13
} CUgraphNodeType;
typedef CUDA_KERNEL_NODE_PARAMS CUDA_KERNEL_NODE_PARAMS_v3;      /* same members as _v2 */
typedef struct CUDA_MEMSET_NODE_PARAMS_v2_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
    CUcontext ctx;
} CUDA_MEMSET_NODE_PARAMS_v2;
typedef struct CUDA_MEMCPY_NODE_PARAMS_st {
    int flags;
    int reserved;
    CUcontext copyCtx;
    CUDA_MEMCPY3D copyParams;
} CUDA_MEMCPY_NODE_PARAMS;
typedef struct CUDA_CHILD_GRAPH_NODE_PARAMS_st {
    CUgraph graph;
    int ownership;             /* CUgraphChildGraphNodeOwnership (12.9+; 0 clone) */
} CUDA_CHILD_GRAPH_NODE_PARAMS;
typedef CUDA_MEM_ALLOC_NODE_PARAMS CUDA_MEM_ALLOC_NODE_PARAMS_v2; /* same layout */
typedef struct CUDA_MEM_FREE_NODE_PARAMS_st {
    CUdeviceptr dptr;
} CUDA_MEM_FREE_NODE_PARAMS;
typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_KERNEL_NODE_PARAMS_v3 kernel;
        CUDA_MEMCPY_NODE_PARAMS memcpy;
        CUDA_MEMSET_NODE_PARAMS_v2 memset;
        CUDA_CHILD_GRAPH_NODE_PARAMS graph;
        CUDA_MEM_ALLOC_NODE_PARAMS_v2 alloc;
        CUDA_MEM_FREE_NODE_PARAMS free;
    };
    long long reserved2;
} CUgraphNodeParams;
typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;
typedef CUgraphEdgeData cudaGraphEdgeData; /* same layout */

/* runtime (cudaGraphNodeType has the driver's values) */
typedef struct cudaKernelNodeParamsV2 {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
} cudaKernelNodeParamsV2;
typedef struct cudaPos { size_t x, y, z; } cudaPos;
typedef struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; } cudaPitchedPtr;
typedef struct cudaExtent { size_t width, height, depth; } cudaExtent;
typedef struct cudaMemcpy3DParms {
    void *srcArray;
    cudaPos srcPos;
    cudaPitchedPtr srcPtr;
    void *dstArray;
    cudaPos dstPos;
    cudaPitchedPtr dstPtr;
    cudaExtent extent;
    int kind;                  /* enum cudaMemcpyKind */
} cudaMemcpy3DParms;
typedef struct cudaMemcpyNodeParams {
    int flags;
    int reserved[3];
    cudaMemcpy3DParms copyParams;
} cudaMemcpyNodeParams;
typedef cudaMemsetParams cudaMemsetParamsV2;           /* same layout */
typedef struct cudaChildGraphNodeParams {
    cudaGraph_t graph;
    int ownership;
} cudaChildGraphNodeParams;
typedef cudaMemAllocNodeParams cudaMemAllocNodeParamsV2; /* same layout (dptr: void *) */
typedef struct cudaMemFreeNodeParams {
    void *dptr;
} cudaMemFreeNodeParams;
typedef struct cudaGraphNodeParams {
    int type;                  /* enum cudaGraphNodeType: CU_GRAPH_NODE_TYPE_* values */
    int reserved0[3];
    union {
        long long reserved1[29];
        cudaKernelNodeParamsV2 kernel;
        cudaMemcpyNodeParams memcpy;
        cudaMemsetParamsV2 memset;
        cudaChildGraphNodeParams graph;
        cudaMemAllocNodeParamsV2 alloc;
        cudaMemFreeNodeParams free;
    };
    long long reserved2;
} cudaGraphNodeParams;

#endif
