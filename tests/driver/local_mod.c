// SPDX-License-Identifier: MIT
// A module loaded RTLD_LOCAL (as Python loads extensions). glibc searches RTLD_DEFAULT in the
// CALLER's scope, which for this module includes its own dependencies: a lookup forwarded by an
// ordinary call from libccinterpose would search the global scope only and miss them.
#include <dlfcn.h>

#define API __attribute__((visibility("default")))

int dtest_local_only(void);

API void *dmod_default(const char *name);
API void *dmod_next(const char *name);
API void *dmod_direct(void);

void *dmod_default(const char *name) { return dlsym(RTLD_DEFAULT, name); }
void *dmod_next(const char *name) { return dlsym(RTLD_NEXT, name); }
void *dmod_direct(void) { return (void *)dtest_local_only; }
