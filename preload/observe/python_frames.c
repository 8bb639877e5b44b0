// SPDX-License-Identifier: MIT
// Python frames of the allocating thread (python_frames.h), through libpython's public C API
// found at run time: no build dependency on Python, and nothing happens in other programs.
#include "python_frames.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "real.h"

typedef struct PyObject PyObject;   // opaque: only pointers cross this file

static struct {
    int (*is_initialized)(void);
    int (*gil_check)(void);
    PyObject *(*get_frame)(void);              // PyEval_GetFrame: borrowed
    PyObject *(*frame_get_code)(PyObject *);   // new reference
    PyObject *(*frame_get_back)(PyObject *);   // new reference
    int (*frame_get_line)(PyObject *);
    PyObject *(*get_attr)(PyObject *, const char *);  // new reference
    const char *(*as_utf8)(PyObject *);
    void (*dec_ref)(PyObject *);
    void (*err_clear)(void);
    int ok;
} py;

static pthread_once_t find_once = PTHREAD_ONCE_INIT;

// glibc's dlsym (real.h), not our exported hook: a lookup of ours must not pass through the
// program-facing dlsym, which hands out our wrappers and counts as one of the program's calls.
#define FIND(field, name) \
    (memcpy(&py.field, &(void *){cci_real_dlsym(RTLD_DEFAULT, name)}, sizeof py.field), py.field != NULL)

static void find(void)
{
    // PyFrame_GetCode and PyFrame_GetBack exist from 3.9: older interpreters get native frames only.
    py.ok = FIND(is_initialized, "Py_IsInitialized") && FIND(gil_check, "PyGILState_Check") &&
            FIND(get_frame, "PyEval_GetFrame") && FIND(frame_get_code, "PyFrame_GetCode") &&
            FIND(frame_get_back, "PyFrame_GetBack") && FIND(frame_get_line, "PyFrame_GetLineNumber") &&
            FIND(get_attr, "PyObject_GetAttrString") && FIND(as_utf8, "PyUnicode_AsUTF8") &&
            FIND(dec_ref, "Py_DecRef") && FIND(err_clear, "PyErr_Clear");
}

void cci_py_frames_init(void)
{
    pthread_once(&find_once, find);
}

int cci_py_frames_available(void)
{
    cci_py_frames_init();
    return py.ok;
}

// file and name stay valid while the code object lives. Every frame walked is on the thread's
// active call stack, which keeps its code object alive until the allocation hook has returned,
// so the caller may copy the strings after the references taken here are dropped.
static int code_names(PyObject *code, const char **file, const char **name)
{
    PyObject *f = py.get_attr(code, "co_filename"), *n = py.get_attr(code, "co_name");
    *file = f ? py.as_utf8(f) : NULL;
    *name = n ? py.as_utf8(n) : NULL;
    // Borrowed from the code object, which keeps its own references to both strings.
    if (f)
        py.dec_ref(f);
    if (n)
        py.dec_ref(n);
    if (!*file || !*name) {
        py.err_clear();
        return -1;
    }
    return 0;
}

size_t cci_py_frames_capture(cci_py_frame *out, size_t max)
{
    if (!max || !py.ok || !py.is_initialized() || !py.gil_check())
        return 0;
    PyObject *frame = py.get_frame();
    if (!frame)
        return 0;
    size_t n = 0;
    PyObject *owned = NULL;   // the frame we hold a reference to (all but the first)
    while (frame && n < max) {
        PyObject *code = py.frame_get_code(frame);
        if (!code)
            break;
        if (code_names(code, &out[n].file, &out[n].function) == 0) {
            out[n].line = py.frame_get_line(frame);
            n++;
        }
        py.dec_ref(code);
        PyObject *back = py.frame_get_back(frame);
        if (owned)
            py.dec_ref(owned);
        owned = frame = back;
    }
    if (owned)
        py.dec_ref(owned);
    return n;
}
