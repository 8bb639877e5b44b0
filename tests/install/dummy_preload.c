// SPDX-License-Identifier: MIT
// Stands for another tool's preload already in LD_PRELOAD when the launcher runs: it only says
// that it was loaded, so the test can see that the launcher kept it next to libccinterpose.
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void dummy_preload_loaded(void)
{
    static const char msg[] = "cci-dummy-preload: loaded\n";
    // write(2), not stdio: a constructor of a preload runs before the program set up anything.
    (void)!write(STDERR_FILENO, msg, strlen(msg));
}
