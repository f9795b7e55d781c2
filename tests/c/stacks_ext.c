/* stacks_ext.c — a minimal CPython extension module that allocates through
 * libcudart with the GIL held (alloc) or released (alloc_nogil): its own file
 * is the owner of those allocations.  Built per Python version by the tests. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

int cudaMalloc(void **p, size_t n);

static PyObject *alloc(PyObject *self, PyObject *arg) {
    size_t n = PyLong_AsSize_t(arg);
    void *p = NULL;
    int r = cudaMalloc(&p, n);
    return Py_BuildValue("(iK)", r, (unsigned long long)(uintptr_t)p);
}

static PyObject *alloc_nogil(PyObject *self, PyObject *arg) {
    size_t n = PyLong_AsSize_t(arg);
    void *p = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = cudaMalloc(&p, n);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iK)", r, (unsigned long long)(uintptr_t)p);
}

static PyMethodDef methods[] = {
    {"alloc", alloc, METH_O, "cudaMalloc with the GIL held"},
    {"alloc_nogil", alloc_nogil, METH_O, "cudaMalloc with the GIL released"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "stacks_ext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_stacks_ext(void) { return PyModule_Create(&mod); }
