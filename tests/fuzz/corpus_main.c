// SPDX-License-Identifier: MIT
// Runs a fuzz target over every file of the corpus directories given as arguments: the regression
// half of fuzzing, built with any compiler and run by meson test. A crash or a broken invariant
// aborts, which fails the test; so does an unreadable or empty corpus (a test that fed nothing
// would prove nothing).
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_target.h"

static int feed_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz corpus: cannot open %s\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                fclose(f);
                free(buf);
                fprintf(stderr, "fuzz corpus: out of memory reading %s\n", path);
                return -1;
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    // An exact-size copy, so that ASan sees a read one byte past the input as libFuzzer would.
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    if (n)
        memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    size_t fed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
            if (feed_file(argv[i]) != 0)
                return 1;
            fed++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "fuzz corpus: cannot open directory %s\n", argv[i]);
            return 1;
        }
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.')
                continue;
            char **p = realloc(names, (n + 1) * sizeof *names);
            if (!p || !(p[n] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2))) {
                fprintf(stderr, "fuzz corpus: out of memory\n");
                return 1;
            }
            names = p;
            sprintf(names[n++], "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);  // a fixed order makes a failure reproducible
        for (size_t k = 0; k < n; k++) {
            if (feed_file(names[k]) != 0)
                return 1;
            fed++;
            free(names[k]);
        }
        free(names);
    }
    if (!fed) {
        fprintf(stderr, "fuzz corpus: no input files given\n");
        return 1;
    }
    printf("%zu corpus input(s) ran without a finding\n", fed);
    return 0;
}
