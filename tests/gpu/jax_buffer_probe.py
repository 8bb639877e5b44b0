#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Which driver path a JAX buffer took (docs/interception-levels.md): allocates a 1 GiB array and
asks the driver about its pointer (cuPointerGetAttribute through ctypes): the range CUDA made for it
(its start and size: one allocation of its own, or a slice of a larger arena), whether it is mapped
virtual memory (cuMemCreate + cuMemMap), whether it came from a memory pool (cuMemAllocAsync /
cuMemAllocFromPoolAsync) and whether legacy IPC works on it (cuMemAlloc's memory). One line per
attribute; run it with and without the preload and with the allocator settings under study
(XLA_PYTHON_CLIENT_ALLOCATOR, XLA_PYTHON_CLIENT_PREALLOCATE). Exit status 0 unless JAX or the
driver cannot be loaded."""
import ctypes
import sys

ATTRS = [  # CUpointer_attribute values (cuda.h)
    (10, "is_legacy_cuda_ipc_capable", ctypes.c_int),
    (11, "range_start_addr", ctypes.c_uint64),
    (12, "range_size", ctypes.c_size_t),
    (13, "mapped", ctypes.c_int),
    (14, "allowed_handle_types", ctypes.c_uint64),
    (17, "mempool_handle", ctypes.c_void_p),
    (18, "mapping_size", ctypes.c_size_t),
    (19, "mapping_base_addr", ctypes.c_void_p),
]


def main():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        print(f"SKIP: jax not importable ({e})")
        return 0
    cuda = ctypes.CDLL("libcuda.so.1")
    get = cuda.cuPointerGetAttribute
    get.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    x = jnp.ones((256, 1024, 1024), jnp.float32)
    x.block_until_ready()
    ptr = x.unsafe_buffer_pointer()
    print(f"jax {jax.__version__}, device {x.devices()}, buffer at {ptr:#x}, 1 GiB")
    for attr, name, ctype in ATTRS:
        v = ctype()
        rc = get(ctypes.byref(v), attr, ptr)
        val = v.value if v.value is not None else 0
        print(f"  {name:<28} rc {rc:<3} {val:#x}" if "addr" in name or "handle" in name
              else f"  {name:<28} rc {rc:<3} {val}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
