// SPDX-License-Identifier: MIT
// Our dlsym: how static cudart copies (nvcc's default, CuPy, cuBLAS, cuDNN...) get our resolver.
//
// Every cudart copy does dlsym(libcuda handle, "cuGetProcAddress_v2") and, when the resolver
// fails, dlsym of each driver name: answering those exact names with our functions puts every
// copy's allocations through us. Everything else must behave exactly as glibc's dlsym, and for
// that the CALLER must stay the caller: glibc resolves RTLD_NEXT (the objects after the caller)
// and RTLD_DEFAULT (the caller's namespace and scope; it also records that the caller now depends
// on the object found) from the return address of the dlsym call. Forwarded by an ordinary call,
// the lookup would start from libccinterpose instead: a library loaded after us that wraps `open`
// and looks up the next one would get itself and loop (LLVM OpenMP did, under other
// interposers).
//
// So `dlsym` is a trampoline that never returns through itself: it asks cci__dlsym_route() where
// to go and JUMPS there with the caller's arguments and return address untouched — to glibc's
// dlsym for every lookup we do not answer (all pseudo-handles, all other names), or to lookup()
// for the exact names we wrap on a real handle (where glibc does not consult the caller).
// Written in assembly so the jump does not depend on optimisation flags (a C tail call is not
// emitted at -O0 or under some sanitizers). tests/driver/check_binary.py checks the built code,
// the dlsym-caller tests (a naive forwarder is their negative control) check the behaviour.
#include <dlfcn.h>

#include "real.h"
#include "resolver.h"

CCI_NO_SANITIZE cci_dlsym_fn cci__dlsym_route(void *handle, const char *name);

// A real handle and a name we wrap: the real answer, or our wrapper when the answer is the
// driver's own function (cci_drv_substitute). A failed lookup stays failed, dlerror intact.
static void *lookup(void *handle, const char *name)
{
    void *real = cci_real_dlsym(handle, name);
    return real ? cci_drv_substitute(name, real) : NULL;
}

// Where the trampoline jumps. Called with the caller's arguments; must not touch anything but
// its return value (the trampoline restores the argument registers). Runs for every dlsym of the
// process, sanitizer start-up included (CCI_NO_SANITIZE).
__attribute__((used, visibility("hidden"))) CCI_NO_SANITIZE cci_dlsym_fn
cci__dlsym_route(void *handle, const char *name)
{
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !name || !cci_drv_is_wrapped_name(name))
        return cci_real_dlsym_fn();
    return lookup;
}

#if defined(__x86_64__)
// Stack on entry: the return address, rsp = 8 mod 16. Two pushes and 8 bytes realign it for the
// call; after the pops the stack and the argument registers are as the caller left them, and
// `jmp` enters the target with the caller's return address on top. endbr64 (a no-op on CPUs
// without CET) makes it a valid indirect-branch target, as the PLT's jump requires under IBT.
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "endbr64\n"
        "pushq %rdi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %rsi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "subq $8, %rsp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "call cci__dlsym_route\n"
        "addq $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %rsi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %rdi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "jmp *%rax\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
// The caller's return address is in x30: saved with the frame around the call, restored before
// `br`, so the target sees it unchanged. x16 is the intra-procedure scratch register that BTI
// lets land on a `bti c` pad (hint #34, a no-op without BTI).
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        ".p2align 2\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "hint #34\n"
        "stp x29, x30, [sp, #-32]!\n"
        ".cfi_def_cfa_offset 32\n"
        ".cfi_offset 29, -32\n"
        ".cfi_offset 30, -24\n"
        "mov x29, sp\n"
        "stp x0, x1, [sp, #16]\n"
        "bl cci__dlsym_route\n"
        "mov x16, x0\n"
        "ldp x0, x1, [sp, #16]\n"
        "ldp x29, x30, [sp], #32\n"
        ".cfi_restore 29\n"
        ".cfi_restore 30\n"
        ".cfi_def_cfa_offset 0\n"
        "br x16\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
// Other architectures: a C tail call, which GCC and Clang emit at -O2. Build this file optimised
// there, and check the disassembly before trusting RTLD_NEXT.
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    return cci__dlsym_route(handle, name)(handle, name);
}
#endif
