// SPDX-License-Identifier: MIT
// PyTorch's newest allocator keys in the parser and printer: large_segment_size_mb (honoured: the
// 1-10 MiB segment, and the default of max_non_split_rounding_mb), throw_on_cudamalloc_oom
// (honoured), pinned_free_catch_all (a pinned key: accepted with its notice), and what a key
// nobody knows does. None may ever turn the layer off.
#include <stdint.h>
#include <stdlib.h>

#include "config_harness.h"

// Random strings stitched from grammar pieces: the parser must answer 0, or -1 with one
// printable line that names the variable, never touch the configuration on -1, and a string it
// accepts must print to a canonical form it accepts again.
static void test_newest_keys(void)
{
    cci_config c, d;
    cci_config_default(&d);
    CHECK(d.large_segment_size == 20 * MIB && d.throw_on_cudamalloc_oom == 0);
    EXPECT_OK(&c, "large_segment_size_mb:64");
    CHECK(c.large_segment_size == 64 * MIB && c.max_non_split_rounding == 64 * MIB && warned.n == 0);
    // A given allowance wins, before or after the segment key.
    EXPECT_OK(&c, "large_segment_size_mb:64,max_non_split_rounding_mb:30");
    CHECK(c.large_segment_size == 64 * MIB && c.max_non_split_rounding == 30 * MIB);
    EXPECT_OK(&c, "max_non_split_rounding_mb:30,large_segment_size_mb:64");
    CHECK(c.large_segment_size == 64 * MIB && c.max_non_split_rounding == 30 * MIB);
    ROUNDTRIP(&c);
    EXPECT_OK(&c, "large_segment_size_mb:1");
    CHECK(c.large_segment_size == MIB);
    ROUNDTRIP(&c);
    EXPECT_ERROR("large_segment_size_mb:0", "large_segment_size_mb", "'0'", "too small", "> 0");
    EXPECT_ERROR("large_segment_size_mb:99999999999999999999", "large_segment_size_mb", "too large");
    EXPECT_ERROR("large_segment_size_mb:2.5", "large_segment_size_mb");

    EXPECT_OK(&c, "throw_on_cudamalloc_oom:True");
    CHECK(c.throw_on_cudamalloc_oom == 1 && warned.n == 0);
    ROUNDTRIP(&c);
    EXPECT_OK(&c, "throw_on_cudamalloc_oom:False");
    CHECK(same_config(&c, &d));
    EXPECT_ERROR("throw_on_cudamalloc_oom:1", "throw_on_cudamalloc_oom", "True or False");
    char buf[512];
    EXPECT_OK(&c, "large_segment_size_mb:40,throw_on_cudamalloc_oom:True");
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, ",large_segment_size_mb:40,throw_on_cudamalloc_oom:True") != NULL);
    cci_config_format(&d, buf, sizeof buf);
    CHECK(!strstr(buf, "large_segment") && !strstr(buf, "throw_on"));  // defaults print as before

    // Accepted and kept (the pinned host cache's frees never throw, so it changes nothing): no notice.
    EXPECT_OK(&c, "pinned_free_catch_all:True");
    CHECK(c.pinned_free_catch_all == 1 && warned.n == 0);
    EXPECT_ERROR("pinned_free_catch_all:yes", "pinned_free_catch_all", "True or False");

    // A key nobody knows: one notice that names it (and the nearest known key), the rest applies.
    EXPECT_OK(&c, "max_split_size_mb:40,max_split_sise_mb:80,garbage_collection_threshold:0.5");
    CHECK(c.max_split_size == 40 * MIB && c.gc_threshold == 0.5);
    CHECK(warned.n == 1 && strstr(warned.line[0], VAR ": unknown key 'max_split_sise_mb' ignored") &&
          strstr(warned.line[0], "did you mean 'max_split_size_mb'") && one_line(warned.line[0]));
    EXPECT_OK(&c, "some_future_key:[1,2,3],expandable_segments:True,Max_Split_Size_MB:40");
    CHECK(c.expandable_segments == 1 && c.max_split_size == SIZE_MAX && warned.n == 2);
    CHECK(strstr(warned.line[0], "'some_future_key' ignored (not known") != NULL);
    CHECK(strstr(warned.line[1], "did you mean 'max_split_size_mb'") != NULL);
    // A bad value elsewhere still rejects the whole string, and announces nothing.
    CHECK(parse_fresh(&c, "bogus:1,max_split_size_mb:5") == -1 && warned.n == 0);
    EXPECT_ERROR("bogus:[1,2", "bogus: '[1,2'", "no closing ']'");
}

int main(void)
{
    test_newest_keys();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
