// SPDX-License-Identifier: MIT
// The address map (preload/addr_map.c) alone, linked directly: chunks in and out, growth, MIXED
// chunks, the incomplete map after a failed growth, the observer on a real allocator (ordinary
// and expandable segments, emptying and resetting), and lock-free readers racing one writer
// (the TSan job runs this file too: it must stay clean there).
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "addr_map.h"
#include "allocator.h"
#include "allocator_reset.h"
#include "testutil.h"

// testutil.h's MiB is a size_t, which is uintptr_t's width on every target of the preload.
#define CHUNK (2 * (uintptr_t)MiB)
// Synthetic addresses: the map never touches the memory it names.
#define BASE ((uintptr_t)0x7f0000000000)

static void insert_lookup_remove(void)
{
    cci_addr_map_forget_all();
    CHECK(cci_addr_map_device(BASE) == CCI_ADDR_NOT_OURS, "an empty map: not ours");
    CHECK_EQ_U(cci__addr_map_capacity(), 0, "no table before the first segment");

    cci_addr_map_add(2, BASE, 4 * MiB);
    CHECK(cci_addr_map_device(BASE) == 2, "the first byte of a segment names its device");
    CHECK(cci_addr_map_device(BASE + 3 * MiB) == 2, "a byte in its second chunk too");
    CHECK(cci_addr_map_device(BASE + 4 * MiB - 1) == 2, "its last byte too");
    CHECK(cci_addr_map_device(BASE - 1) == CCI_ADDR_NOT_OURS, "the chunk below: not ours");
    CHECK(cci_addr_map_device(BASE + 4 * MiB) == CCI_ADDR_NOT_OURS, "the chunk above: not ours");
    cci_addr_map_remove(2, BASE, 4 * MiB);
    CHECK(cci_addr_map_device(BASE) == CCI_ADDR_NOT_OURS, "given back: not ours");
    CHECK(cci_addr_map_device(BASE + 3 * MiB) == CCI_ADDR_NOT_OURS, "its second chunk neither");

    // Two segments of one device in one chunk: the chunk stays until both are gone.
    cci_addr_map_add(1, BASE + CHUNK, MiB / 2);
    cci_addr_map_add(1, BASE + CHUNK + MiB, MiB / 2);
    cci_addr_map_remove(1, BASE + CHUNK, MiB / 2);
    CHECK(cci_addr_map_device(BASE + CHUNK) == 1, "a chunk with one segment left still names device 1");
    cci_addr_map_remove(1, BASE + CHUNK + MiB, MiB / 2);
    CHECK(cci_addr_map_device(BASE + CHUNK + MiB) == CCI_ADDR_NOT_OURS, "the last one gone: not ours");

    // Giving back more than was added (a reset names an expandable segment's whole range, of
    // which only some pages were mapped) empties the chunk without wrapping below zero.
    cci_addr_map_add(0, BASE + 8 * CHUNK, MiB);
    cci_addr_map_remove(0, BASE + 8 * CHUNK, 64 * MiB);
    CHECK(cci_addr_map_device(BASE + 8 * CHUNK) == CCI_ADDR_NOT_OURS, "over-removal empties the chunk");
    cci_addr_map_add(0, BASE + 8 * CHUNK, MiB);
    CHECK(cci_addr_map_device(BASE + 8 * CHUNK) == 0, "and the chunk comes back whole afterwards");
    cci_addr_map_remove(0, BASE + 8 * CHUNK, MiB);
    CHECK(cci_addr_map_device(BASE + 8 * CHUNK) == CCI_ADDR_NOT_OURS, "after its exact removal: not ours");

    cci_addr_map_remove(5, BASE + 100 * CHUNK, CHUNK);
    CHECK(cci_addr_map_device(BASE + 100 * CHUNK) == CCI_ADDR_NOT_OURS, "removing what is absent changes nothing");
}

static void growth_and_reuse(void)
{
    cci_addr_map_forget_all();
    enum { N = 6000 };
    for (uintptr_t i = 0; i < N; i++)
        cci_addr_map_add((int)(i % 5), BASE + i * CHUNK, CHUNK);
    size_t grown = cci__addr_map_capacity();
    CHECK(grown >= 4 * N / 3, "%d chunks: the table grew to %zu slots", N, grown);
    int right = 0;
    for (uintptr_t i = 0; i < N; i++)
        right += cci_addr_map_device(BASE + i * CHUNK + i % CHUNK) == (int)(i % 5);
    CHECK_EQ_U(right, N, "every chunk names its device after the growths");
    for (uintptr_t i = 0; i < N; i += 2)
        cci_addr_map_remove((int)(i % 5), BASE + i * CHUNK, CHUNK);
    right = 0;
    for (uintptr_t i = 0; i < N; i++)
        right += cci_addr_map_device(BASE + i * CHUNK) == (i % 2 ? (int)(i % 5) : CCI_ADDR_NOT_OURS);
    CHECK_EQ_U(right, N, "half removed: those are not ours, the rest still named");

    // CUDA hands the same addresses out again and again: a chunk that comes back revives its own
    // slot, so churn over the same addresses never grows the table (tables replaced by a growth
    // are kept for the readers, so growth is what costs memory).
    for (int round = 0; round < 50; round++) {
        for (uintptr_t i = 0; i < N; i += 2)
            cci_addr_map_add(3, BASE + i * CHUNK, CHUNK);
        for (uintptr_t i = 0; i < N; i += 2)
            cci_addr_map_remove(3, BASE + i * CHUNK, CHUNK);
    }
    CHECK_EQ_U(cci__addr_map_capacity(), grown, "50 rounds of churn over the same chunks: no growth");
    CHECK(cci_addr_map_device(BASE + CHUNK) == 1 && cci_addr_map_device(BASE) == CCI_ADDR_NOT_OURS,
          "and the answers are unchanged");
}

// A full table (just under the growth threshold) has long probe chains: removing chunks that
// sit early on another chunk's chain must not cut it (dead slots, never EMPTY ones).
static void chains_survive_removals(void)
{
    cci_addr_map_forget_all();
    cci_addr_map_add(0, BASE, CHUNK);
    size_t cap = cci__addr_map_capacity();
    size_t n = cap * 3 / 4;  // the most the table holds before it grows
    for (uintptr_t i = 1; i < n; i++)
        cci_addr_map_add(0, BASE + i * CHUNK, CHUNK);
    CHECK_EQ_U(cci__addr_map_capacity(), cap, "filled to three quarters without growing");
    for (uintptr_t i = 0; i < n; i += 2)
        cci_addr_map_remove(0, BASE + i * CHUNK, CHUNK);
    unsigned right = 0;
    for (uintptr_t i = 0; i < n; i++)
        right += cci_addr_map_device(BASE + i * CHUNK) == (i % 2 ? 0 : CCI_ADDR_NOT_OURS);
    CHECK_EQ_U(right, n, "every other chunk removed from a full table: the rest are all found");
    // New chunks take dead slots on their way, or EMPTY ones (and the table is rebuilt without
    // the dead): every answer stays right either way.
    for (uintptr_t i = 0; i < n; i += 2)
        cci_addr_map_add(1, BASE + (i + 1000) * CHUNK, CHUNK);
    right = 0;
    for (uintptr_t i = 0; i < n; i++)
        right += cci_addr_map_device(BASE + i * CHUNK) == (i % 2 ? 0 : CCI_ADDR_NOT_OURS) &&
                 cci_addr_map_device(BASE + (i + 1000) * CHUNK) == (i % 2 ? CCI_ADDR_NOT_OURS : 1);
    CHECK_EQ_U(right, n, "old and new chunks all found");
}

static void mixed(void)
{
    cci_addr_map_forget_all();
    // Device 0 ends in the middle of a chunk where device 1 begins.
    uintptr_t shared = BASE + 4 * CHUNK;
    cci_addr_map_add(0, shared - 3 * CHUNK, 3 * CHUNK + MiB);
    cci_addr_map_add(1, shared + MiB, 3 * CHUNK);
    CHECK(cci_addr_map_device(shared) == CCI_ADDR_UNKNOWN, "device 0's half of a shared chunk: unknown");
    CHECK(cci_addr_map_device(shared + MiB) == CCI_ADDR_UNKNOWN, "device 1's half: unknown");
    CHECK(cci_addr_map_device(shared - CHUNK) == 0, "device 0's own chunk below still names it");
    CHECK(cci_addr_map_device(shared + 2 * CHUNK) == 1, "device 1's own chunk above still names it");
    cci_addr_map_remove(1, shared + MiB, 3 * CHUNK);
    CHECK(cci_addr_map_device(shared) == CCI_ADDR_UNKNOWN,
          "MIXED stays after one device left (the scan answers; the map does not count per device)");
    CHECK(cci_addr_map_device(shared + 2 * CHUNK) == CCI_ADDR_NOT_OURS, "device 1's own chunk is gone");
}

static void incomplete(void)
{
    cci_addr_map_forget_all();
    cci_addr_map_add(0, BASE, CHUNK);
    size_t cap = cci__addr_map_capacity();
    cci__addr_map_fail_table_allocs(1);
    // Enough new chunks to need a bigger table, whose allocation fails.
    for (uintptr_t i = 1; i <= cap; i++)
        cci_addr_map_add(1, BASE + i * CHUNK, CHUNK);
    CHECK_EQ_U(cci__addr_map_capacity(), cap, "the failed growth left the table as it was");
    CHECK(cci_addr_map_device(BASE) == CCI_ADDR_UNKNOWN, "an incomplete map answers unknown for a known chunk");
    CHECK(cci_addr_map_device(BASE + cap * CHUNK) == CCI_ADDR_UNKNOWN, "for a chunk it could not add");
    CHECK(cci_addr_map_device(BASE + 100000 * CHUNK) == CCI_ADDR_UNKNOWN, "and for memory never seen");
    cci_addr_map_add(0, BASE + 50000 * CHUNK, CHUNK);
    CHECK(cci_addr_map_device(BASE + 50000 * CHUNK) == CCI_ADDR_UNKNOWN, "it stays incomplete");

    cci_addr_map_forget_all();
    CHECK(cci_addr_map_device(BASE) == CCI_ADDR_NOT_OURS, "forgotten (the fork child): complete and empty");
    cci_addr_map_add(0, BASE, CHUNK);
    CHECK(cci_addr_map_device(BASE) == 0, "and in use again");

    cci_addr_map_mark_incomplete();  // what a missing observer slot does
    CHECK(cci_addr_map_device(BASE) == CCI_ADDR_UNKNOWN, "marked incomplete: unknown");

    if (sizeof(uintptr_t) == 8) {
        cci_addr_map_forget_all();
        cci_addr_map_add(0, (uintptr_t)1 << 60, CHUNK);
        CHECK(cci_addr_map_device(BASE) == CCI_ADDR_UNKNOWN,
              "a segment above what a key can name makes the map incomplete");
    }
}

// ---- the observer on a real allocator (the simulated device) ---------------------------------

static cci_config conf(const char *s)
{
    cci_config c;
    cci_config_default(&c);
    char err[256];
    if (cci_config_parse(&c, s, "test", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "bad test configuration: %s\n", err);
        exit(2);
    }
    return c;
}

static void observed(const char *confstr)
{
    cci_addr_map_forget_all();
    cci_sim_device *sim = cci_sim_create((size_t)8 << 30);
    cci_config c = conf(confstr);
    cci_allocator *a = cci_allocator_create(3, &c, cci_sim_backend(sim));
    CHECK(a != NULL, "%s: allocator created", confstr);
    cci_addr_map_attach(a);
    uintptr_t small, big;
    CHECK(cci_malloc(a, 4096, 0, &small) == CCI_OK && cci_malloc(a, 40 * MiB, 0, &big) == CCI_OK,
          "%s: two blocks served", confstr);
    CHECK(cci_addr_map_device(small) == 3 && cci_addr_map_device(big + 40 * MiB - 1) == 3,
          "%s: each block's memory names device 3 before the program has it", confstr);
    CHECK(cci_free(a, big, 0, CCI_FREE_NOW) == CCI_OK, "%s: freed", confstr);
    cci_alloc_empty_cache(a);
    CHECK(cci_addr_map_device(big) == CCI_ADDR_NOT_OURS, "%s: emptied cache: the freed block's memory is not ours",
          confstr);
    CHECK(cci_addr_map_device(small) == 3, "%s: the live block's memory still names device 3", confstr);
    cci_allocator_reset(a, 1);
    CHECK(cci_addr_map_device(small) == CCI_ADDR_NOT_OURS, "%s: after the reset the live block is not ours",
          confstr);
    CHECK(cci_malloc(a, 4096, 0, &small) == CCI_OK && cci_addr_map_device(small) == 3,
          "%s: the reset allocator's new segment is in the map", confstr);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

// ---- readers racing a writer -----------------------------------------------------------------

enum { STABLE = 64, CHURN = 3000, READERS = 3 };
static _Atomic int writer_done, readers_started;
static _Atomic unsigned long wrong_answers, lookups;

// Stable segments sit at BASE + i * 3 chunks (device i % 4, never removed); churn segments in
// between, at BASE + (i * 3 + 1) chunks, come and go on device 7.
static uintptr_t stable_at(int i) { return BASE + (uintptr_t)i * 3 * CHUNK; }
static uintptr_t churn_at(int i) { return BASE + ((uintptr_t)i * 3 + 1) * CHUNK; }

static void *reader(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned long n = 0, wrong = 0;
    atomic_fetch_add(&readers_started, 1);
    do {  // at least one pass: on a loaded machine the writer may finish before a reader runs
        seed = seed * 1103515245u + 12345u;
        int i = (int)(seed >> 8) % STABLE;
        wrong += cci_addr_map_device(stable_at(i) + (seed & 0xfffff)) != i % 4;
        int j = (int)(seed >> 4) % CHURN;
        int d = cci_addr_map_device(churn_at(j));
        wrong += d != 7 && d != CCI_ADDR_NOT_OURS;  // present or not, never another answer
        n++;
    } while (!atomic_load(&writer_done));
    atomic_fetch_add(&lookups, n);
    atomic_fetch_add(&wrong_answers, wrong);
    return NULL;
}

static void readers_and_a_writer(void)
{
    cci_addr_map_forget_all();
    for (int i = 0; i < STABLE; i++)
        cci_addr_map_add(i % 4, stable_at(i), CHUNK);
    size_t before = cci__addr_map_capacity();
    pthread_t r[READERS];
    for (int i = 0; i < READERS; i++)
        pthread_create(&r[i], NULL, reader, (void *)(uintptr_t)(i + 1));
    while (atomic_load(&readers_started) < READERS)  // the race needs the readers running
        sched_yield();
    // Adds every churn chunk (the table grows several times under the readers), then removes and
    // re-adds them in rounds (slots turn dead and come back).
    for (int i = 0; i < CHURN; i++)
        cci_addr_map_add(7, churn_at(i), CHUNK);
    for (int round = 0; round < 30; round++)
        for (int i = round % 3; i < CHURN; i += 3) {
            cci_addr_map_remove(7, churn_at(i), CHUNK);
            cci_addr_map_add(7, churn_at(i), CHUNK);
            cci_addr_map_remove(7, churn_at(i), CHUNK);
        }
    atomic_store(&writer_done, 1);
    for (int i = 0; i < READERS; i++)
        pthread_join(r[i], NULL);
    CHECK(cci__addr_map_capacity() > before, "the table grew while readers read (%zu -> %zu slots)", before,
          cci__addr_map_capacity());
    CHECK(atomic_load(&lookups) > 0, "the readers looked up %lu addresses", atomic_load(&lookups));
    CHECK_EQ_U(atomic_load(&wrong_answers), 0, "wrong answers while the writer changed and grew the table");
    for (int i = 0; i < CHURN; i++)
        CHECK(cci_addr_map_device(churn_at(i)) == CCI_ADDR_NOT_OURS, "churn chunk %d gone at the end", i);
}

int main(void)
{
    insert_lookup_remove();
    growth_and_reuse();
    chains_survive_removals();
    mixed();
    incomplete();
    observed("");
    observed("expandable_segments:True");
    readers_and_a_writer();
    cci_addr_map_forget_all();
    return t_finish();
}
