# SPDX-License-Identifier: MIT
# Run under the preload with CCI_STACKS: allocates through the fake libcudart via ctypes, from
# named Python functions. ctypes.PyDLL keeps the GIL during the call (ctypes.CDLL would release
# it, and a thread without the GIL gets native frames only). Exit 77 when there is no fake
# libcudart to load.
import ctypes
import sys

try:
    rt = ctypes.PyDLL("libcudart.so.13")
except OSError as e:
    print(f"no fake libcudart: {e}", file=sys.stderr)
    sys.exit(77)
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]


def allocate_activations(n):
    out = []
    for _ in range(n):
        p = ctypes.c_void_p()
        if rt.cudaMalloc(ctypes.byref(p), 16 << 20) != 0:
            sys.exit("cudaMalloc failed")
        out.append(p)
    return out


def allocate_temp():
    p = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(p), 1 << 20) != 0:
        sys.exit("cudaMalloc failed")
    rt.cudaFree(p)


kept = allocate_activations(2)
allocate_temp()
print("python program done, 2 blocks kept")
