// SPDX-License-Identifier: MIT
// Which of our driver-level wrappers stands for which real driver function: what our dlsym
// (dlsym_hook.c) and our cuGetProcAddress (resolver.c) hand out instead of the driver's own.
#ifndef CCI_PRELOAD_RESOLVER_H
#define CCI_PRELOAD_RESOLVER_H

#include "real.h"

/// 1 when `name` is exactly the exported name of one of the CCI_REAL_DRIVER_WRAPPED entry points.
/// Cheap: every dlsym of the process asks it.
CCI_NO_SANITIZE int cci_drv_is_wrapped_name(const char *name);

/// What to hand a program that asked the driver for a function and got `real`: our wrapper when
/// `real` is the driver's own export of a function we wrap, else `real` unchanged (a function we
/// do not wrap, another library's symbol of the same name, or already our wrapper). `name` is
/// the exported name a dlsym asked for (only that entry may match), or NULL for an answer of the
/// resolver (any entry whose real address it is). Driver level off: always `real`.
void *cci_drv_substitute(const char *name, void *real);

/// 1 when `p` is one of our wrappers (what a real lookup finds when it reaches our own exports).
int cci_drv_is_ours(const void *p);

#endif
