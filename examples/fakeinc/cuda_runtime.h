// SPDX-License-Identifier: MIT
// Stand-in for the toolkit's cuda_runtime.h when the examples are built with gcc against the fake
// libcudart (tests/fake), so the same sources serve the GPU and the tests.
#ifndef CCI_EXAMPLES_FAKE_CUDA_RUNTIME_H
#define CCI_EXAMPLES_FAKE_CUDA_RUNTIME_H
#include "fake_cuda_runtime.h"
#endif
