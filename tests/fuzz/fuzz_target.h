// SPDX-License-Identifier: MIT
// The one entry point every fuzz target defines. libFuzzer calls it with generated inputs
// (scripts/fuzz.sh); corpus_main.c calls it with the committed corpus as an ordinary test.
// A target returns 0 and reports a broken invariant by aborting, as libFuzzer expects.
#ifndef CCI_FUZZ_TARGET_H
#define CCI_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
