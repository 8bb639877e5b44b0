// SPDX-License-Identifier: MIT
// Tests of the PYTORCH_CUDA_ALLOC_CONF parser and printer: every key, every kind of bad value,
// the messages' shape, the notices, and format -> parse round trips.
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "config_harness.h"

static int all_divisions(const cci_config *c, unsigned v)
{
    for (int i = 0; i < CCI_ROUNDUP_INTERVALS; i++)
        if (c->roundup_divisions[i] != v)
            return 0;
    return 1;
}

// The lookup the rounding code does: log2(size) - 20, clamped to the table.
static unsigned divisions_for(const cci_config *c, size_t size)
{
    int lg = 0;
    while ((size >> lg) > 1)
        lg++;
    int idx = lg - 20;
    if (idx < 0)
        idx = 0;
    if (idx > CCI_ROUNDUP_INTERVALS - 1)
        idx = CCI_ROUNDUP_INTERVALS - 1;
    return c->roundup_divisions[idx];
}

// ---- tests ----------------------------------------------------------------------------------

static void test_defaults(void)
{
    cci_config c;
    memset(&c, 0x5a, sizeof c);
    cci_config_default(&c);
    CHECK(c.max_split_size == SIZE_MAX);
    CHECK(c.max_non_split_rounding == 20 * MIB);
    CHECK(all_divisions(&c, 0));
    CHECK(c.gc_threshold == 0.0);
    CHECK(c.memory_fraction == 0.0);
    CHECK(c.backend_async == 0);
    CHECK(c.expandable_segments == 0);
    CHECK(c.release_lock_on_cudamalloc == 0);
    CHECK(c.immediate_reuse == 0);
    CHECK(c.memgetinfo_cached_as_free == 1);
    CHECK(c.intercept_level == CCI_LEVEL_BOTH);
    CHECK(c.compact_segments == -1);  // unset: the device decides (cci_config_resolve)
}

static void test_empty(void)
{
    cci_config c, d;
    cci_config_default(&d);
    EXPECT_OK(&c, "");
    CHECK(same_config(&c, &d));
    CHECK(warned.n == 0);
    EXPECT_OK(&c, "   \t ");
    CHECK(same_config(&c, &d));
    cci_config_default(&c);
    CHECK(cci_config_parse(&c, NULL, VAR, err, sizeof err, NULL, NULL) == 0);
    CHECK(same_config(&c, &d));
    // No error buffer and no notice callback are both allowed.
    CHECK(cci_config_parse(&c, "expandable_segments:True", VAR, NULL, 0, NULL, NULL) == 0);
    CHECK(c.expandable_segments == 1);
    CHECK(cci_config_parse(&c, "backend:bogus", VAR, NULL, 0, NULL, NULL) == -1);
}

static void test_backend(void)
{
    cci_config c;
    EXPECT_OK(&c, "backend:native");
    CHECK(c.backend_async == 0);
    EXPECT_OK(&c, "backend:cudaMallocAsync");
    CHECK(c.backend_async == 1);
    CHECK(warned.n == 0);
    EXPECT_ERROR("backend:magic", "backend", "'magic'", "native or cudaMallocAsync");
    EXPECT_ERROR("backend:cudamallocasync", "backend", "'cudamallocasync'");
    EXPECT_ERROR("backend:", "backend", "empty value");
    EXPECT_ERROR("backend", "backend", "missing ':'");
}

static void test_max_split(void)
{
    cci_config c;
    EXPECT_OK(&c, "max_split_size_mb:21");
    CHECK(c.max_split_size == 21 * MIB);
    EXPECT_OK(&c, "max_split_size_mb:1024");
    CHECK(c.max_split_size == 1024 * MIB);
    // Values whose bytes would overflow mean "no limit".
    EXPECT_OK(&c, "max_split_size_mb:17592186044416");
    CHECK(c.max_split_size == SIZE_MAX);
    EXPECT_OK(&c, "max_split_size_mb:18446744073709551615");
    CHECK(c.max_split_size == SIZE_MAX);
    EXPECT_OK(&c, "max_split_size_mb:99999999999999999999999999999999999999999999");
    CHECK(c.max_split_size == SIZE_MAX);
    EXPECT_OK(&c, "max_split_size_mb:17592186044415");
    CHECK(c.max_split_size == (size_t)17592186044415ULL * MIB);
    EXPECT_OK(&c, "max_split_size_mb:000040");
    CHECK(c.max_split_size == 40 * MIB);

    cci_config_default(&c);
    CHECK(cci_config_parse(&c, "max_split_size_mb:16", VAR, err, sizeof err, NULL, NULL) == -1);
    CHECK(strcmp(err, "CCI_ALLOC_CONF: max_split_size_mb: '16' is too small: expected an integer "
                      "number of MiB > 20") == 0);
    EXPECT_ERROR("max_split_size_mb:20", "max_split_size_mb", "'20'", "too small", "> 20");
    EXPECT_ERROR("max_split_size_mb:0", "max_split_size_mb", "too small");
    EXPECT_ERROR("max_split_size_mb:-1", "max_split_size_mb", "'-1'", "negative");
    EXPECT_ERROR("max_split_size_mb:12abc", "max_split_size_mb", "'12abc'", "trailing");
    EXPECT_ERROR("max_split_size_mb:abc", "max_split_size_mb", "'abc'", "not a number");
    EXPECT_ERROR("max_split_size_mb:1.5e3", "max_split_size_mb", "'1.5e3'");
    EXPECT_ERROR("max_split_size_mb:+40", "max_split_size_mb", "'+40'");
    EXPECT_ERROR("max_split_size_mb:0x40", "max_split_size_mb", "'0x40'");
    EXPECT_ERROR("max_split_size_mb:4 0", "max_split_size_mb", "'4 0'");
    EXPECT_ERROR("max_split_size_mb:", "max_split_size_mb", "empty value");
    EXPECT_ERROR("max_split_size_mb:   ,backend:native", "max_split_size_mb", "empty value");
    EXPECT_ERROR("max_split_size_mb", "max_split_size_mb", "missing ':'");
    EXPECT_ERROR("max_split_size_mb:[40]", "max_split_size_mb", "is a list");
}

static void test_non_split(void)
{
    cci_config c;
    EXPECT_OK(&c, "max_non_split_rounding_mb:0");
    CHECK(c.max_non_split_rounding == 0);
    EXPECT_OK(&c, "max_non_split_rounding_mb:30");
    CHECK(c.max_non_split_rounding == 30 * MIB);
    EXPECT_OK(&c, "max_non_split_rounding_mb:1");
    CHECK(c.max_non_split_rounding == MIB);
    EXPECT_OK(&c, "max_non_split_rounding_mb:17592186044416");
    CHECK(c.max_non_split_rounding == SIZE_MAX);
    EXPECT_OK(&c, "max_non_split_rounding_mb:123456789012345678901234567890");
    CHECK(c.max_non_split_rounding == SIZE_MAX);
    EXPECT_ERROR("max_non_split_rounding_mb:-5", "max_non_split_rounding_mb", "negative");
    EXPECT_ERROR("max_non_split_rounding_mb:5MB", "max_non_split_rounding_mb", "'5MB'", "trailing");
    EXPECT_ERROR("max_non_split_rounding_mb:x", "max_non_split_rounding_mb", "not a number");
    EXPECT_ERROR("max_non_split_rounding_mb:", "max_non_split_rounding_mb", "empty");
}

static void test_roundup_single(void)
{
    cci_config c;
    EXPECT_OK(&c, "roundup_power2_divisions:4");
    CHECK(all_divisions(&c, 4));
    EXPECT_OK(&c, "roundup_power2_divisions:1");
    CHECK(all_divisions(&c, 1));
    EXPECT_OK(&c, "roundup_power2_divisions:0");
    CHECK(all_divisions(&c, 0));
    EXPECT_OK(&c, "roundup_power2_divisions:2147483648");
    CHECK(all_divisions(&c, 2147483648u));
    EXPECT_ERROR("roundup_power2_divisions:3", "roundup_power2_divisions", "'3'", "power of two");
    EXPECT_ERROR("roundup_power2_divisions:6", "roundup_power2_divisions", "power of two");
    EXPECT_ERROR("roundup_power2_divisions:8589934592", "roundup_power2_divisions", "too many");
    EXPECT_ERROR("roundup_power2_divisions:99999999999999999999", "roundup_power2_divisions", "too many");
    EXPECT_ERROR("roundup_power2_divisions:[256:8589934592]", "roundup_power2_divisions", "too many");
    EXPECT_ERROR("roundup_power2_divisions:-4", "roundup_power2_divisions", "negative");
    EXPECT_ERROR("roundup_power2_divisions:4x", "roundup_power2_divisions", "trailing");
    EXPECT_ERROR("roundup_power2_divisions:four", "roundup_power2_divisions", "'four'");
    EXPECT_ERROR("roundup_power2_divisions:", "roundup_power2_divisions", "empty value");
}

static void test_roundup_list(void)
{
    cci_config c;
    EXPECT_OK(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    // The first key fills every interval below it; '>' fills every interval after the last key.
    for (int i = 0; i <= 8; i++)
        CHECK(c.roundup_divisions[i] == 1);
    CHECK(c.roundup_divisions[9] == 2);
    CHECK(c.roundup_divisions[10] == 4);
    for (int i = 11; i < CCI_ROUNDUP_INTERVALS; i++)
        CHECK(c.roundup_divisions[i] == 8);
    // Key 256 governs sizes in [256 MiB, 512 MiB).
    CHECK(divisions_for(&c, 255 * MIB) == 1);
    CHECK(divisions_for(&c, 256 * MIB) == 1);
    CHECK(divisions_for(&c, 511 * MIB) == 1);
    CHECK(divisions_for(&c, 512 * MIB) == 2);
    CHECK(divisions_for(&c, 1024 * MIB) == 4);
    CHECK(divisions_for(&c, 2048 * MIB) == 8);
    CHECK(divisions_for(&c, 1000) == 1);

    // PyTorch's own test vectors.
    EXPECT_OK(&c, "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]");
    CHECK(divisions_for(&c, 32 * MIB) == 8);
    CHECK(divisions_for(&c, 64 * MIB) == 8);
    CHECK(divisions_for(&c, 128 * MIB) == 2);
    CHECK(divisions_for(&c, 256 * MIB) == 4);
    CHECK(divisions_for(&c, 512 * MIB) == 2);
    CHECK(divisions_for(&c, 1024 * MIB) == 4);
    CHECK(divisions_for(&c, 2048 * MIB) == 1);
    CHECK(divisions_for(&c, 4096 * MIB) == 1);
    CHECK(divisions_for(&c, 8192 * MIB) == 1);
    EXPECT_OK(&c, "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
    CHECK(divisions_for(&c, 64 * MIB) == 8);
    CHECK(divisions_for(&c, 128 * MIB) == 8);
    CHECK(divisions_for(&c, 256 * MIB) == 16);
    CHECK(divisions_for(&c, 512 * MIB) == 1);
    CHECK(divisions_for(&c, 1024 * MIB) == 0);  // named by no rule: keeps its old value
    CHECK(divisions_for(&c, 2048 * MIB) == 8);
    CHECK(divisions_for(&c, 4096 * MIB) == 2);

    // A list over an earlier setting keeps the intervals it does not name.
    cci_config_default(&c);
    CHECK(parse(&c, "roundup_power2_divisions:4,roundup_power2_divisions:[2:1,8:2]") == 0);
    CHECK(c.roundup_divisions[0] == 1 && c.roundup_divisions[1] == 1);
    CHECK(c.roundup_divisions[2] == 4);
    CHECK(c.roundup_divisions[3] == 2);
    CHECK(c.roundup_divisions[4] == 4 && c.roundup_divisions[15] == 4);

    EXPECT_OK(&c, "roundup_power2_divisions:[1:4]");
    CHECK(c.roundup_divisions[0] == 4);
    CHECK(c.roundup_divisions[1] == 0 && c.roundup_divisions[15] == 0);
    EXPECT_OK(&c, "roundup_power2_divisions:[>:8]");
    CHECK(all_divisions(&c, 8));
    EXPECT_OK(&c, "roundup_power2_divisions:[65536:2]");  // beyond 32 GiB clamps to the last
    CHECK(all_divisions(&c, 2));
    EXPECT_OK(&c, "roundup_power2_divisions:[32768:2,>:4]");
    CHECK(all_divisions(&c, 2));  // nothing lies after the last interval
    EXPECT_OK(&c, "roundup_power2_divisions:[4:0,16:2,>:4]");
    CHECK(c.roundup_divisions[0] == 0 && c.roundup_divisions[2] == 0);
    CHECK(c.roundup_divisions[3] == 0);
    CHECK(c.roundup_divisions[4] == 2);
    CHECK(c.roundup_divisions[5] == 4 && c.roundup_divisions[15] == 4);
    EXPECT_OK(&c, "roundup_power2_divisions:[256:1,]");
    CHECK(c.roundup_divisions[8] == 1 && c.roundup_divisions[9] == 0);
    EXPECT_OK(&c, " roundup_power2_divisions : [ 256 : 1 , 512:2 ,\t> : 8 ] , max_split_size_mb:40 ");
    CHECK(c.roundup_divisions[0] == 1 && c.roundup_divisions[8] == 1);
    CHECK(c.roundup_divisions[9] == 2 && c.roundup_divisions[10] == 8);
    CHECK(c.max_split_size == 40 * MIB);

    const char *k = "roundup_power2_divisions";
    EXPECT_ERROR("roundup_power2_divisions:[300:1]", k, "'300:1'", "not a power of two");
    EXPECT_ERROR("roundup_power2_divisions:[0:1]", k, "'0:1'", "not a power of two");
    EXPECT_ERROR("roundup_power2_divisions:[256:3]", k, "'256:3'", "not 0 or a power of two");
    EXPECT_ERROR("roundup_power2_divisions:[256:-1]", k, "'256:-1'", "negative");
    EXPECT_ERROR("roundup_power2_divisions:[-256:1]", k, "'-256:1'", "negative");
    EXPECT_ERROR("roundup_power2_divisions:[256]", k, "'256'", "no ':");
    EXPECT_ERROR("roundup_power2_divisions:[256:]", k, "'256:'", "no divisions");
    EXPECT_ERROR("roundup_power2_divisions:[:4]", k, "':4'", "no interval");
    EXPECT_ERROR("roundup_power2_divisions:[abc:1]", k, "'abc:1'", "neither a number nor '>'");
    EXPECT_ERROR("roundup_power2_divisions:[256x:1]", k, "'256x:1'", "trailing");
    EXPECT_ERROR("roundup_power2_divisions:[256:1:2]", k, "'256:1:2'", "trailing");
    EXPECT_ERROR("roundup_power2_divisions:[99999999999999999999999:1]", k, "not a power of two");
    EXPECT_ERROR("roundup_power2_divisions:[]", k, "'[]'", "empty list");
    EXPECT_ERROR("roundup_power2_divisions:[ ]", k, "empty list");
    EXPECT_ERROR("roundup_power2_divisions:[256:1,,512:2]", k, "empty list entry");
    EXPECT_ERROR("roundup_power2_divisions:[,256:1]", k, "empty list entry");
    EXPECT_ERROR("roundup_power2_divisions:[256:1", k, "no closing ']'");
    EXPECT_ERROR("roundup_power2_divisions:[256:1]x", k, "trailing characters after ']'");
    EXPECT_ERROR("roundup_power2_divisions:[256:1] 4,backend:native", k, "after ']'");
    EXPECT_ERROR("roundup_power2_divisions:4[", k, "trailing");
}

static void test_gc(void)
{
    cci_config c;
    EXPECT_OK(&c, "garbage_collection_threshold:0.5");
    CHECK(c.gc_threshold == 0.5);
    EXPECT_OK(&c, "garbage_collection_threshold:.25");
    CHECK(c.gc_threshold == 0.25);
    EXPECT_OK(&c, "garbage_collection_threshold:8e-1");
    CHECK(c.gc_threshold == 0.8);
    EXPECT_OK(&c, "garbage_collection_threshold:0.999999");
    CHECK(c.gc_threshold == 0.999999);
    const char *k = "garbage_collection_threshold";
    EXPECT_ERROR("garbage_collection_threshold:0", k, "'0'", "out of range", "> 0 and < 1");
    EXPECT_ERROR("garbage_collection_threshold:0.0", k, "out of range");
    EXPECT_ERROR("garbage_collection_threshold:1", k, "'1'", "out of range");
    EXPECT_ERROR("garbage_collection_threshold:1.2", k, "'1.2'", "out of range");
    EXPECT_ERROR("garbage_collection_threshold:-0.5", k, "negative");
    EXPECT_ERROR("garbage_collection_threshold:nan", k, "'nan'", "not a number");
    EXPECT_ERROR("garbage_collection_threshold:inf", k, "'inf'");
    EXPECT_ERROR("garbage_collection_threshold:0x0.8p0", k, "trailing");
    EXPECT_ERROR("garbage_collection_threshold:0.5x", k, "'0.5x'", "trailing");
    EXPECT_ERROR("garbage_collection_threshold:1e-400", k, "out of range");
    EXPECT_ERROR("garbage_collection_threshold:.", k, "not a number");
    EXPECT_ERROR("garbage_collection_threshold:", k, "empty value");
}

static void test_bools(void)
{
    static const struct {
        const char *key;
        size_t off;  // which int of the struct it sets
    } keys[] = {
        {"expandable_segments", offsetof(cci_config, expandable_segments)},
        {"release_lock_on_cudamalloc", offsetof(cci_config, release_lock_on_cudamalloc)},
        {"immediate_reuse", offsetof(cci_config, immediate_reuse)},
        {"memgetinfo_cached_as_free", offsetof(cci_config, memgetinfo_cached_as_free)},
        {"compact_segments", offsetof(cci_config, compact_segments)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char s[128];
        cci_config c;
        snprintf(s, sizeof s, "%s:True", keys[i].key);
        EXPECT_OK(&c, s);
        CHECK(*(int *)((char *)&c + keys[i].off) == 1);
        snprintf(s, sizeof s, "%s:False", keys[i].key);
        EXPECT_OK(&c, s);
        CHECK(*(int *)((char *)&c + keys[i].off) == 0);
        CHECK(warned.n == 0);
        snprintf(s, sizeof s, "%s:true", keys[i].key);
        EXPECT_ERROR(s, keys[i].key, "'true'", "True or False");
        snprintf(s, sizeof s, "%s:1", keys[i].key);
        EXPECT_ERROR(s, keys[i].key, "'1'", "True or False");
        snprintf(s, sizeof s, "%s:Truee", keys[i].key);
        EXPECT_ERROR(s, keys[i].key, "'Truee'");
        snprintf(s, sizeof s, "%s:", keys[i].key);
        EXPECT_ERROR(s, keys[i].key, "empty value");
    }
}

static void test_notices(void)
{
    cci_config c;
    // expandable_segments is honoured now (expandable.c): no notice any more, either way.
    EXPECT_OK(&c, "expandable_segments:True");
    CHECK(warned.n == 0);
    CHECK(c.expandable_segments == 1);
    EXPECT_OK(&c, "expandable_segments:False");
    CHECK(warned.n == 0);
    EXPECT_OK(&c, "compact_segments:True,expandable_segments:True");
    CHECK(warned.n == 0 && c.compact_segments == 1 && c.expandable_segments == 1);

    EXPECT_OK(&c, "graph_capture_record_stream_reuse:True");
    CHECK(warned.n == 1 && strstr(warned.line[0], "graph_capture_record_stream_reuse") &&
          strstr(warned.line[0], "not honoured"));
    EXPECT_OK(&c, "graph_capture_record_stream_reuse:False");
    CHECK(warned.n == 0);
    EXPECT_ERROR("graph_capture_record_stream_reuse:yes", "graph_capture_record_stream_reuse",
                 "True or False");

    // The pinned_* keys configure the preload's pinned host cache: stored, no notice, and
    // printed back (only where they differ from the defaults) so the string round-trips.
    cci_config_default(&c);
    CHECK(c.pinned_num_register_threads == 1 && !c.pinned_use_cuda_host_register &&
          !c.pinned_use_background_threads && c.pinned_reserve_segment_size == 0 && !c.pinned_free_catch_all);
    EXPECT_OK(&c, "pinned_use_cuda_host_register:True,pinned_num_register_threads:4,"
                  "pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,"
                  "pinned_free_catch_all:True,expandable_segments:True");
    CHECK(warned.n == 0);
    CHECK(c.pinned_use_cuda_host_register == 1 && c.pinned_num_register_threads == 4 &&
          c.pinned_use_background_threads == 1 && c.pinned_reserve_segment_size == ((size_t)64 << 20) &&
          c.pinned_free_catch_all == 1);
    {
        char printed[1024];
        cci_config_format(&c, printed, sizeof printed);
        CHECK(strstr(printed, ",pinned_use_cuda_host_register:True,pinned_num_register_threads:4,"
                              "pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,"
                              "pinned_free_catch_all:True") != NULL);
        cci_config again;
        cci_config_default(&again);
        EXPECT_OK(&again, printed);
        CHECK(same_config(&again, &c));
    }
    EXPECT_OK(&c, "pinned_num_register_threads:128,pinned_reserve_segment_size_mb:4096");
    CHECK(c.pinned_num_register_threads == 128 && c.pinned_reserve_segment_size == ((size_t)4096 << 20));
    EXPECT_ERROR("pinned_free_catch_all:1", "pinned_free_catch_all", "True or False");

    EXPECT_ERROR("pinned_use_cuda_host_register:yes", "pinned_use_cuda_host_register", "True or False");
    EXPECT_ERROR("pinned_use_background_threads:", "pinned_use_background_threads", "empty value");
    EXPECT_ERROR("pinned_num_register_threads:3", "pinned_num_register_threads", "'3'",
                 "not a power of two", "<= 128");
    EXPECT_ERROR("pinned_num_register_threads:0", "pinned_num_register_threads", "not a power of two");
    EXPECT_ERROR("pinned_num_register_threads:256", "pinned_num_register_threads", "'256'", "too large");
    EXPECT_ERROR("pinned_num_register_threads:99999999999999999999", "pinned_num_register_threads",
                 "too large");
    EXPECT_ERROR("pinned_num_register_threads:-2", "pinned_num_register_threads", "negative");
    EXPECT_ERROR("pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb", "'0'", "too small",
                 "> 0");
    EXPECT_ERROR("pinned_reserve_segment_size_mb:-1", "pinned_reserve_segment_size_mb", "negative");
    EXPECT_ERROR("pinned_reserve_segment_size_mb:1.5", "pinned_reserve_segment_size_mb", "trailing");

    // cudaMallocAsync makes every native key moot, which PyTorch also points out.
    EXPECT_OK(&c, "backend:cudaMallocAsync,max_split_size_mb:40");
    CHECK(warned.n == 1 && strstr(warned.line[0], "cudaMallocAsync") && one_line(warned.line[0]));
    EXPECT_OK(&c, "backend:cudaMallocAsync,pinned_num_register_threads:2");
    CHECK(warned.n == 0);  // the pinned keys are not the native allocator's: no notice

    // A string that fails announces nothing, even for the good keys before the bad one.
    cci_config_default(&c);
    CHECK(parse(&c, "expandable_segments:True,pinned_num_register_threads:2,bogus:1,backend:x") == -1);
    CHECK(warned.n == 0);
    CHECK(c.expandable_segments == 0);
}

static void test_fraction(void)
{
    cci_config c;
    EXPECT_OK(&c, "per_process_memory_fraction:0.5");
    CHECK(c.memory_fraction == 0.5);
    EXPECT_OK(&c, "per_process_memory_fraction:1");
    CHECK(c.memory_fraction == 1.0);
    EXPECT_OK(&c, "per_process_memory_fraction:1.0");
    CHECK(c.memory_fraction == 1.0);
    EXPECT_OK(&c, "per_process_memory_fraction:0.001");
    CHECK(c.memory_fraction == 0.001);
    const char *k = "per_process_memory_fraction";
    EXPECT_ERROR("per_process_memory_fraction:0", k, "'0'", "out of range", "> 0 and <= 1");
    EXPECT_ERROR("per_process_memory_fraction:1.01", k, "out of range");
    EXPECT_ERROR("per_process_memory_fraction:-1", k, "negative");
    EXPECT_ERROR("per_process_memory_fraction:half", k, "not a number");
    EXPECT_ERROR("per_process_memory_fraction:50%", k, "trailing");
}

static void test_structure(void)
{
    cci_config c;
    EXPECT_OK(&c, "max_split_size_mb:40,garbage_collection_threshold:0.6,backend:native,"
                  "immediate_reuse:True,memgetinfo_cached_as_free:False,per_process_memory_fraction:0.75");
    CHECK(c.max_split_size == 40 * MIB && c.gc_threshold == 0.6 && c.immediate_reuse == 1 &&
          c.memgetinfo_cached_as_free == 0 && c.memory_fraction == 0.75);
    // Whitespace around every token.
    EXPECT_OK(&c, "  max_split_size_mb : 40 ,\tgarbage_collection_threshold:\t0.5  , "
                  "expandable_segments :False ");
    CHECK(c.max_split_size == 40 * MIB && c.gc_threshold == 0.5);
    // A trailing comma is fine, as in PyTorch.
    EXPECT_OK(&c, "max_split_size_mb:40,");
    CHECK(c.max_split_size == 40 * MIB);
    // The last occurrence wins.
    EXPECT_OK(&c, "max_split_size_mb:40,max_split_size_mb:80");
    CHECK(c.max_split_size == 80 * MIB);
    // Parsing builds on what is already there.
    cci_config_default(&c);
    CHECK(parse(&c, "max_split_size_mb:40") == 0);
    CHECK(parse(&c, "garbage_collection_threshold:0.3") == 0);
    CHECK(c.max_split_size == 40 * MIB && c.gc_threshold == 0.3);

    EXPECT_ERROR("max_split_size_mb=40", "'max_split_size_mb=40'", "separated by ':'");
    EXPECT_ERROR("bogus", "'bogus'", "not a key:value pair");
    EXPECT_ERROR("max_split_size_mb:40,garbage_collection_threshold", "garbage_collection_threshold",
                 "missing ':'");
    EXPECT_ERROR("max_split_size_mb:40,,backend:native", "empty entry");
    EXPECT_ERROR(",max_split_size_mb:40", "empty entry");
    EXPECT_ERROR(":40", "empty entry");
    EXPECT_ERROR("max_split_size_mb:40 backend:native", "max_split_size_mb", "'40 backend:native'");
    EXPECT_ERROR("max_split_size_mb:40;backend:native", "max_split_size_mb", "trailing");

    // The first error wins and is the one reported.
    cci_config_default(&c);
    CHECK(parse(&c, "max_split_size_mb:1,garbage_collection_threshold:7") == -1);
    CHECK(strstr(err, "max_split_size_mb") && !strstr(err, "garbage"));
}

static void test_one_line(void)
{
    // Control characters in the input are escaped, so the message stays one printable line.
    EXPECT_ERROR("max_split_size_mb:1\n2", "max_split_size_mb", "'1\\x0a2'");
    EXPECT_ERROR("max_split_size_mb:\x1b[31m40", "max_split_size_mb", "\\x1b");
    cci_config u;
    CHECK(parse_fresh(&u, "bo\rgus:1") == 0 && warned.n == 1 && strstr(warned.line[0], "'bo\\x0dgus'") &&
          one_line(warned.line[0]));
    EXPECT_ERROR("garbage_collection_threshold:0.5\xc3\xa9", "garbage_collection_threshold", "\\xc3\\xa9");
    EXPECT_ERROR("backend:a\\b", "backend", "'a\\\\b'");

    // A very long value is cut short.
    char s[4096];
    strcpy(s, "max_split_size_mb:1");
    memset(s + strlen(s), '7', 3000);
    s[19 + 3000] = 'x';
    s[20 + 3000] = '\0';
    EXPECT_ERROR(s, "max_split_size_mb", "...", "trailing");
    CHECK(strlen(err) < 300);
    strcpy(s, "roundup_power2_divisions:[");
    for (int i = 0; i < 300; i++)
        strcat(s, "1:1,");
    strcat(s, "3:1]");
    EXPECT_ERROR(s, "roundup_power2_divisions", "'3:1'");
    memset(s, 'k', 3000);
    strcpy(s + 3000, ":1");
    CHECK(parse_fresh(&u, s) == 0 && warned.n == 1 && strstr(warned.line[0], "...") &&
          strlen(warned.line[0]) < 300);

    // A small buffer gets a truncated but terminated message.
    cci_config c;
    cci_config_default(&c);
    char small[16];
    memset(small, 'Z', sizeof small);
    CHECK(cci_config_parse(&c, "max_split_size_mb:1", VAR, small, sizeof small, NULL, NULL) == -1);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, VAR, strlen(VAR)) == 0);
    CHECK(cci_config_parse(&c, "max_split_size_mb:1", VAR, small, 1, NULL, NULL) == -1);
    CHECK(small[0] == '\0');
    // The variable name is the caller's: PYTORCH_CUDA_ALLOC_CONF when that is where it came from.
    CHECK(cci_config_parse(&c, "max_split_size_mb:x", "PYTORCH_CUDA_ALLOC_CONF", err, sizeof err, NULL, NULL) == -1);
    CHECK(strncmp(err, "PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb", 42) == 0);
}


static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_format(void)
{
    cci_config c;
    char buf[1024];
    cci_config_default(&c);
    int n = cci_config_format(&c, buf, sizeof buf);
    const char *def = "backend:native,max_non_split_rounding_mb:20,roundup_power2_divisions:0,"
                      "expandable_segments:False,release_lock_on_cudamalloc:False,"
                      "immediate_reuse:False,memgetinfo_cached_as_free:True";
    CHECK(strcmp(buf, def) == 0);
    CHECK(n == (int)strlen(def));
    ROUNDTRIP(&c);

    EXPECT_OK(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_split_size_mb:40,"
                  "garbage_collection_threshold:0.8,per_process_memory_fraction:0.9,"
                  "backend:cudaMallocAsync,expandable_segments:True,release_lock_on_cudamalloc:True,"
                  "immediate_reuse:True,memgetinfo_cached_as_free:False,max_non_split_rounding_mb:0");
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strcmp(buf, "backend:cudaMallocAsync,max_split_size_mb:40,max_non_split_rounding_mb:0,"
                      "roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
                      "garbage_collection_threshold:0.8,expandable_segments:True,"
                      "release_lock_on_cudamalloc:True,per_process_memory_fraction:0.9,"
                      "immediate_reuse:True,memgetinfo_cached_as_free:False") == 0);
    ROUNDTRIP(&c);
    // Our compact_segments key is printed only when given, after the others, True or False: unset
    // (the default) prints nothing and reads back as unset, so each of the three states survives.
    EXPECT_OK(&c, "compact_segments:True");
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, ",compact_segments:True") != NULL && strstr(buf, "compact_segments:True") ==
                                                               buf + strlen(buf) - strlen("compact_segments:True"));
    ROUNDTRIP(&c);
    EXPECT_OK(&c, "compact_segments:False");
    CHECK(c.compact_segments == 0);
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strcmp(buf, def) != 0 && strstr(buf, ",compact_segments:False") == buf + strlen(def));
    ROUNDTRIP(&c);
    EXPECT_OK(&c, "expandable_segments:True");
    CHECK(c.compact_segments == -1);
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, "compact_segments") == NULL);
    ROUNDTRIP(&c);

    static const char *const samples[] = {
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[1:4]",
        "roundup_power2_divisions:[2:4]",
        "roundup_power2_divisions:[16384:0,>:8]",
        "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]",
        "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
        "max_split_size_mb:17592186044415",
        "max_split_size_mb:99999999999999999999",
        "max_non_split_rounding_mb:99999999999999999999",
        "garbage_collection_threshold:0.1",
        "garbage_collection_threshold:0.30000000000000004",
        "per_process_memory_fraction:1",
        "per_process_memory_fraction:0.3333333333333333",
    };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        EXPECT_OK(&c, samples[i]);
        ROUNDTRIP(&c);
    }
    EXPECT_OK(&c, "garbage_collection_threshold:0.1");
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, ",garbage_collection_threshold:0.1,") != NULL);
    EXPECT_OK(&c, "roundup_power2_divisions:[16384:0,>:8]");
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, "roundup_power2_divisions:[16384:0,>:8],") != NULL);

    // Random tables and values, all of them representable by the grammar.
    for (int iter = 0; iter < 2000; iter++) {
        cci_config_default(&c);
        for (int i = 0; i < CCI_ROUNDUP_INTERVALS; i++) {
            uint64_t r = next_rand() % 6;
            // Runs are likely so that the '>' and first-key shortcuts get exercised.
            c.roundup_divisions[i] = (i > 0 && r < 3) ? c.roundup_divisions[i - 1]
                                                      : (next_rand() % 3 == 0 ? 0u : 1u << (next_rand() % 31));
        }
        if (next_rand() % 2)
            c.max_split_size = (size_t)(21 + next_rand() % 100000) * MIB;
        c.max_non_split_rounding = (size_t)(next_rand() % 5000) * MIB;
        if (next_rand() % 2)
            c.gc_threshold = (double)(1 + next_rand() % ((1ULL << 53) - 1)) / (double)(1ULL << 53);
        if (next_rand() % 2)
            c.memory_fraction = (double)(1 + next_rand() % (1ULL << 53)) / (double)(1ULL << 53);
        c.backend_async = (int)(next_rand() % 2);
        c.expandable_segments = (int)(next_rand() % 2);
        c.release_lock_on_cudamalloc = (int)(next_rand() % 2);
        c.immediate_reuse = (int)(next_rand() % 2);
        c.memgetinfo_cached_as_free = (int)(next_rand() % 2);
        c.intercept_level = 1 + (int)(next_rand() % 3);
        c.compact_segments = (int)(next_rand() % 3) - 1;
        int before = failed;
        ROUNDTRIP(&c);
        if (failed != before)
            break;
    }

    // snprintf-like: the needed length, with whatever fits written and terminated.
    cci_config_default(&c);
    int need = cci_config_format(&c, NULL, 0);
    CHECK(need == (int)strlen(def));
    char small[10];
    memset(small, 'Z', sizeof small);
    CHECK(cci_config_format(&c, small, sizeof small) == need);
    CHECK(strcmp(small, "backend:n") == 0);
}

// The default is settled per device: compact segments where the virtual-memory API is offered,
// ordinary ones elsewhere; expandable_segments:True alone keeps PyTorch's mode; a given value stays.
static void test_resolve(void)
{
    static const struct {
        const char *conf;
        int vmm, want;
    } cases[] = {
        {"", 1, 1},
        {"", 0, 0},
        {"compact_segments:False", 1, 0},
        {"compact_segments:True", 0, 1},  // kept: the allocator warns that it cannot honour it
        {"expandable_segments:True", 1, 0},
        {"expandable_segments:True,compact_segments:True", 1, 1},
        {"expandable_segments:False", 1, 1},
        {"max_split_size_mb:128,immediate_reuse:True,fence_slack_mb:64", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cci_config c;
        EXPECT_OK(&c, cases[i].conf);
        cci_config_resolve(&c, cases[i].vmm);
        char what[160];
        snprintf(what, sizeof what, "'%s' on a device %s the virtual-memory API: compact_segments %d",
                 cases[i].conf, cases[i].vmm ? "with" : "without", c.compact_segments);
        check(c.compact_segments == cases[i].want, __LINE__, what);
        ROUNDTRIP(&c);  // the settled value prints, and reads back, as given
        cci_config_resolve(&c, !cases[i].vmm);
        check(c.compact_segments == cases[i].want, __LINE__, "settled once, for good");
    }
}

static void test_intercept_level(void)
{
    cci_config c;
    char buf[1024];
    EXPECT_OK(&c, "intercept_level:runtime");
    CHECK(c.intercept_level == CCI_LEVEL_RUNTIME);
    CHECK(warned.n == 0);
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, ",intercept_level:runtime") != NULL);
    ROUNDTRIP(&c);
    EXPECT_OK(&c, "intercept_level:driver");
    CHECK(c.intercept_level == CCI_LEVEL_DRIVER);
    ROUNDTRIP(&c);
    EXPECT_OK(&c, " intercept_level : both ,max_split_size_mb:40");
    CHECK(c.intercept_level == CCI_LEVEL_BOTH);
    // The default is left out of the canonical string, which thus stays what it always was.
    cci_config_format(&c, buf, sizeof buf);
    CHECK(strstr(buf, "intercept_level") == NULL);
    ROUNDTRIP(&c);
    // Strict: case-sensitive words only; no numbers, lists or abbreviations.
    EXPECT_ERROR("intercept_level:Driver", "intercept_level", "'Driver'", "is not a known level",
                 "runtime, driver or both");
    EXPECT_ERROR("intercept_level:3", "intercept_level", "'3'");
    EXPECT_ERROR("intercept_level:run", "intercept_level", "'run'");
    EXPECT_ERROR("intercept_level:runtime driver", "intercept_level", "'runtime driver'");
    EXPECT_ERROR("intercept_level:[runtime]", "intercept_level", "is a list");
    EXPECT_ERROR("intercept_level:", "intercept_level", "empty value");
    EXPECT_ERROR("intercept_level", "intercept_level", "missing ':'");
    // Not an allocator key: no "ignored under cudaMallocAsync" notice for it.
    EXPECT_OK(&c, "backend:cudaMallocAsync,intercept_level:runtime");
    CHECK(warned.n == 0);
}


static void test_fuzz(void)
{
    static const char *const pieces[] = {
        "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
        "expandable_segments", "backend", "per_process_memory_fraction", "pinned_num_register_threads",
        "immediate_reuse", "intercept_level", "driver", ":", ":", ",", ",", "[", "]", ">", " ", "\t", "\n", "\x01", "\xff",
        "0", "1", "2", "3", "4", "16", "21", "256", "0.5", "-", ".", "e", "True", "False", "native",
        "99999999999999999999999", "x",
    };
    int bad = 0, accepted = 0;
    for (int iter = 0; iter < 50000 && !bad; iter++) {
        char s[512] = "";
        int parts = 1 + (int)(next_rand() % 12);
        for (int i = 0; i < parts; i++)
            strcat(s, pieces[next_rand() % (sizeof pieces / sizeof pieces[0])]);
        cci_config c, before;
        cci_config_default(&c);
        before = c;
        int rc = parse(&c, s);
        if (rc == 0) {
            accepted++;
            char buf[1024];
            cci_config_format(&c, buf, sizeof buf);
            cci_config d;
            cci_config_default(&d);
            if (cci_config_parse(&d, buf, VAR, NULL, 0, NULL, NULL) != 0 || !same_config(&c, &d))
                bad = 1;
        } else if (rc != -1 || !one_line(err) || strncmp(err, VAR ": ", strlen(VAR) + 2) != 0 ||
                   !same_config(&c, &before) || warned.n != 0) {
            bad = 1;
        }
        if (bad)
            fprintf(stderr, "fuzz input \"%s\": rc %d, message \"%s\"\n", s, rc, err);
    }
    CHECK(!bad);
    CHECK(accepted > 0);
}

int main(void)
{
    test_defaults();
    test_empty();
    test_backend();
    test_max_split();
    test_non_split();
    test_roundup_single();
    test_roundup_list();
    test_gc();
    test_bools();
    test_notices();
    test_fraction();
    test_structure();
    test_one_line();
    test_format();
    test_resolve();
    test_intercept_level();
    test_fuzz();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
