// SPDX-License-Identifier: MIT
// The CUDA driver entry points we define, under their exported (ABI-versioned) names.
#ifndef CCI_PRELOAD_HOOKS_DRIVER_H
#define CCI_PRELOAD_HOOKS_DRIVER_H

#include "export.h"
#include "real.h"

#define CCI_X(name, need, params, args) CCI_EXPORT CUresult name params;
CCI_REAL_DRIVER_WRAPPED(CCI_X)
#undef CCI_X

#endif
