// SPDX-License-Identifier: MIT
// The forwarding mark: a thread is inside one of our hooks, passing a call on to the real CUDA
// function. Whatever that call reaches of ours on its way down (the runtime calls the driver
// through our wrappers) is already handled and must pass straight through.
#ifndef CCI_PRELOAD_FORWARDING_H
#define CCI_PRELOAD_FORWARDING_H

/// Non-zero while a runtime hook runs: the real runtime it passes a call to may reach the driver
/// through our own wrappers, and the call is already handled (or deliberately passed through).
/// A depth (hooks nest: the out-of-memory report asks the runtime from inside one), counted up
/// and down rather than saved and restored, so a hook keeps no saved value across its call into
/// the allocator (one register fewer to save on every served call). Initial-exec, like
/// the other thread-locals of the preload (see serve/serve.c). Defined in real.c.
extern _Thread_local int cci__forwarding __attribute__((tls_model("initial-exec")));

static inline int cci_pl_forwarding(void)
{
    return cci__forwarding;
}

/// Marks the calling thread as inside a runtime hook, until the matching cci_pl_forwarding_end.
static inline void cci_pl_forwarding_begin(void)
{
    cci__forwarding++;
}

static inline void cci_pl_forwarding_end(void)
{
    cci__forwarding--;
}

#endif
