// SPDX-License-Identifier: MIT
// The library is built with hidden visibility; only what carries CCI_EXPORT and is listed in
// libccinterpose.map leaves it.
#ifndef CCI_PRELOAD_EXPORT_H
#define CCI_PRELOAD_EXPORT_H

#define CCI_EXPORT __attribute__((visibility("default")))

#endif
