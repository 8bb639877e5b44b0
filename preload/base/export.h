// SPDX-License-Identifier: MIT
// The library is built with hidden visibility; only what carries CCI_EXPORT and is listed in
// libccinterpose.map leaves it.
#ifndef CCI_PRELOAD_EXPORT_H
#define CCI_PRELOAD_EXPORT_H

#define CCI_EXPORT __attribute__((visibility("default")))

/// For the library's own globals read on the hooks' fast paths: an extern declaration keeps
/// default visibility otherwise (whatever gnu_symbol_visibility says of the definition), and each
/// access then goes through the GOT, two instructions instead of one.
#define CCI_HIDDEN __attribute__((visibility("hidden")))

#endif
