// SPDX-License-Identifier: MIT
// Whether context fences may be recorded (context_fences.h says why each condition is there).
#include "context_fences.h"

#include "backend_cuda.h"
#include "log.h"
#include "captures.h"

_Atomic int cci__context_fences_on;
// Why they are off: a string literal, set once before the flag is cleared (or at start-up).
static const char *_Atomic off_reason = "not started";
// A stream of another context was registered, perhaps before start-up; why it stops them.
static _Atomic int foreign_seen;
static const char *_Atomic foreign_why;

void cci_context_fences_start(int allowed)
{
    const cci_real_driver *t = cci_real_drv();
    const char *why = NULL;
    if (!allowed)
        why = "CCI_CONTEXT_FENCES=0";
    else if (!t->cuCtxRecordEvent || !t->cuCtxWaitEvent)
        why = "the driver has no cuCtxRecordEvent (CUDA < 12.5)";
    else if (atomic_load(&cci__capture_unseen_possible))
        why = "a driver newer than CUDA 13.0 may begin captures we do not count";
    atomic_store(&off_reason, why ? why : "on");
    atomic_store(&cci__context_fences_on, why == NULL);
    // A stream registered meanwhile either saw them on (and stopped them) or is seen here
    // (seq_cst on both sides).
    if (atomic_load(&foreign_seen))
        cci_context_fences_stop(atomic_load(&foreign_why), 0);
}

void cci_context_fences_stop(const char *why, int warn)
{
    int was = 1;
    if (!atomic_compare_exchange_strong(&cci__context_fences_on, &was, 0))
        return;
    atomic_store(&off_reason, why);
    cci_log(warn ? CCI_LOG_WARNING : CCI_LOG_INFO, "context fences off from now on: %s; fences look "
            "at each stream instead", why);
}

// The primary context of `device` without holding it for good: ours if held, else the driver's
// answer while it is active (a retain then release of an active one creates and destroys
// nothing). NULL when it is not active: no stream can be in it.
static CUcontext primary_of(const cci_real_driver *t, int device)
{
    CUcontext primary = cci_cuda_backend_primary(device, 0);
    unsigned flags = 0;
    int active = 0;
    if (!primary && t->cuDevicePrimaryCtxGetState &&
        t->cuDevicePrimaryCtxGetState(device, &flags, &active) == CUDA_SUCCESS && active &&
        t->cuDevicePrimaryCtxRetain(&primary, device) == CUDA_SUCCESS)
        t->cuDevicePrimaryCtxRelease_v2(device);
    return primary;
}

// Checked whether context fences are on yet or not (a stream may be created before start-up).
void cci_context_fences_note_stream(CUstream s, int device)
{
    if (atomic_load(&foreign_seen))
        return;
    const cci_real_driver *t = cci_real_drv();
    CUcontext c = NULL;
    const char *why = NULL;
    if (!t->cuStreamGetCtx || t->cuStreamGetCtx(s, &c) != CUDA_SUCCESS || !c)
        why = "a stream whose context the driver did not tell";
    else if (c != primary_of(t, device))
        why = "a stream in a context of the program's own";
    if (!why)
        return;
    atomic_store(&foreign_why, why);
    atomic_store(&foreign_seen, 1);
    cci_context_fences_stop(why, 0);
}

const char *cci_context_fences_state(void)
{
    return atomic_load(&off_reason);
}
