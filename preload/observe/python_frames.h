// SPDX-License-Identifier: MIT
// The Python frames of the allocating thread, when the program is a Python interpreter and the
// thread holds the GIL (PyTorch holds it while it allocates a tensor from Python; ctypes.CDLL
// calls release it, ctypes.PyDLL calls keep it). Only libpython's public C API, looked up with
// dlsym(RTLD_DEFAULT) on first use: Py_IsInitialized, PyGILState_Check, PyEval_GetFrame,
// PyFrame_GetCode, PyFrame_GetBack, PyFrame_GetLineNumber, PyObject_GetAttrString (co_filename,
// co_name), PyUnicode_AsUTF8, Py_DecRef, PyErr_Clear. Without all of them (not Python, or a
// Python before 3.9) no Python frame is recorded.
#ifndef CCI_PRELOAD_PYTHON_FRAMES_H
#define CCI_PRELOAD_PYTHON_FRAMES_H

#include <stddef.h>

typedef struct cci_py_frame {
    const char *file;        ///< co_filename: valid until the allocation hook returns
    const char *function;    ///< co_name: the same
    int line;
} cci_py_frame;

/// Looks the API up (once; later calls are free). Call it at start-up, outside any lock.
void cci_py_frames_init(void);
/// 1 when every function was found.
int cci_py_frames_available(void);
/// Up to max frames of the calling thread, innermost first; 0 when Python is absent, not
/// initialised, or the thread does not hold the GIL.
size_t cci_py_frames_capture(cci_py_frame *out, size_t max);

#endif
