// SPDX-License-Identifier: MIT
// The address map (addr_map.h): an open-addressing table of 2 MiB chunks, one atomic 64-bit
// word a slot, read without a lock and changed by one writer at a time.
#include "addr_map.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "log.h"

// ---- one slot: (chunk key, owner, bytes) packed in 64 bits ----------------------------------
//
// One word, so that a reader never sees the key of one chunk with the owner of another.
//   bits 63..29  chunk key (addr >> 21): 35 bits, addresses below 2^56 (every user address of
//                x86-64 with 5-level paging and of AArch64); a segment above makes the map
//                incomplete;
//   bits 28..22  owner: device + 1, or OWNER_MIXED;
//   bits 21..0   how many bytes of the chunk the owner holds, at most 2^21.
// Three kinds of slot: EMPTY (0, ends every probe), live (owner MIXED, or bytes > 0) and dead
// (bytes 0): the tombstone of a chunk that was given back. A dead slot keeps its key, so the
// same chunk coming back (CUDA reuses addresses) revives its own slot, and it is never made
// EMPTY again, so a probe never stops short of a key behind it. Only a rebuild drops the dead.

#define CHUNK_SHIFT 21
#define CHUNK_BYTES ((uint64_t)1 << CHUNK_SHIFT)
#define BYTES_BITS 22
#define OWNER_SHIFT 22
#define OWNER_BITS 7
#define KEY_SHIFT 29
#define KEY_MAX (((uint64_t)1 << (64 - KEY_SHIFT)) - 1)
#define OWNER_MIXED ((1u << OWNER_BITS) - 1)
#define EMPTY 0

static uint64_t pack(uint64_t key, unsigned owner, uint64_t bytes)
{
    return key << KEY_SHIFT | (uint64_t)owner << OWNER_SHIFT | bytes;
}
static uint64_t key_of(uint64_t e) { return e >> KEY_SHIFT; }
static unsigned owner_of(uint64_t e) { return (unsigned)(e >> OWNER_SHIFT) & OWNER_MIXED; }
static uint64_t bytes_of(uint64_t e) { return e & (((uint64_t)1 << BYTES_BITS) - 1); }
static int is_live(uint64_t e) { return e != EMPTY && (owner_of(e) == OWNER_MIXED || bytes_of(e) > 0); }

// A device the owner field cannot name shares the MIXED answer: its chunks are looked up by
// asking every allocator (CCI_PL_MAX_DEVICES is far below the limit).
static unsigned owner_for(int device)
{
    return device >= 0 && (unsigned)device < OWNER_MIXED - 1 ? (unsigned)device + 1 : OWNER_MIXED;
}

// ---- tables ---------------------------------------------------------------------------------

typedef struct table {
    struct table *retired_next;  // the writer's list of tables readers may still be reading
    size_t mask;                 // slots - 1 (a power of two)
    unsigned shift;              // 64 - log2(slots), for the hash
    _Atomic uint64_t slot[];
} table;

#define MIN_SLOTS 64

static _Atomic(table *) current;  // what readers read; NULL: nothing was ever added
static _Atomic int incomplete;    // lookups answer unknown
static _Atomic int fail_allocs;   // test hook: table allocations still to fail

// The writer's state, under `writer`. A table that a rebuild replaced goes on `retired` and is
// never freed while the process runs: a reader may have loaded its pointer just before the
// switch and still be probing it, and readers announce themselves to nobody (that is what
// makes them free of locks and shared writes). Rebuilds are rare (the table doubles, and dead
// slots are reused by their own chunk), so what is kept is at most about as much again as the
// table in use. Only the fork child, which has one thread, frees them (cci_addr_map_forget_all).
static pthread_mutex_t writer = PTHREAD_MUTEX_INITIALIZER;
static table *retired;
static size_t used;  // slots not EMPTY in `current`
static size_t live;  // live slots in `current`

static size_t slot_of(const table *t, uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> t->shift) & t->mask;
}

static table *table_new(size_t slots)
{
    int left = atomic_load_explicit(&fail_allocs, memory_order_relaxed);
    if (left > 0) {
        atomic_store_explicit(&fail_allocs, left - 1, memory_order_relaxed);
        return NULL;
    }
    // calloc's zero bytes are EMPTY slots: an atomic uint64_t is a plain 64-bit word here.
    table *t = calloc(1, sizeof *t + slots * sizeof t->slot[0]);
    if (!t)
        return NULL;
    t->mask = slots - 1;
    unsigned log2 = 0;
    while (((size_t)1 << log2) < slots)
        log2++;
    t->shift = 64 - log2;
    return t;
}

// Copies the live slots into a table with room for `need` of them at a quarter full, and
// publishes it. 0, or -1 when the host had no memory for it (nothing changed).
static int rebuild(size_t need)
{
    size_t slots = MIN_SLOTS;
    while (slots / 4 < need)
        slots *= 2;
    table *t = table_new(slots);
    if (!t)
        return -1;
    table *old = atomic_load_explicit(&current, memory_order_relaxed);
    if (old) {
        for (size_t i = 0; i <= old->mask; i++) {
            uint64_t e = atomic_load_explicit(&old->slot[i], memory_order_relaxed);
            if (!is_live(e))
                continue;
            size_t j = slot_of(t, key_of(e));
            while (atomic_load_explicit(&t->slot[j], memory_order_relaxed) != EMPTY)
                j = (j + 1) & t->mask;
            atomic_store_explicit(&t->slot[j], e, memory_order_relaxed);
        }
        old->retired_next = retired;
        retired = old;
    }
    used = live;
    // Release: a reader that loads this pointer sees every slot copied above.
    atomic_store_explicit(&current, t, memory_order_release);
    return 0;
}

static void set_slot(table *t, size_t i, uint64_t e)
{
    // Release: pairs with the readers' acquire loads (the word is the whole message).
    atomic_store_explicit(&t->slot[i], e, memory_order_release);
}

// ---- writers (under `writer`) ----------------------------------------------------------------

// `owner` gains `bytes` of chunk `key`. 0, or -1 when the table could not grow.
static int add_chunk(uint64_t key, unsigned owner, uint64_t bytes)
{
    table *t = atomic_load_explicit(&current, memory_order_relaxed);
    size_t reuse = SIZE_MAX;
    if (t) {
        for (size_t i = slot_of(t, key);; i = (i + 1) & t->mask) {
            uint64_t e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
            if (e == EMPTY)
                break;
            if (key_of(e) != key) {
                if (reuse == SIZE_MAX && !is_live(e))
                    reuse = i;  // another chunk's tombstone, on this key's probe path
                continue;
            }
            if (!is_live(e)) {
                set_slot(t, i, pack(key, owner, bytes));
                live++;
            } else if (owner_of(e) == owner && owner != OWNER_MIXED) {
                uint64_t sum = bytes_of(e) + bytes;
                set_slot(t, i, pack(key, owner, sum < CHUNK_BYTES ? sum : CHUNK_BYTES));
            } else if (owner_of(e) != OWNER_MIXED) {
                // Two devices in one chunk: only their allocators can tell whose an address is.
                // MIXED stays until the fork child or forever: counting per device would take
                // more than one word, and such chunks are rare (CUDA keeps devices' memory
                // apart at 2 MiB pages).
                set_slot(t, i, pack(key, OWNER_MIXED, 0));
            }
            return 0;
        }
    }
    if (reuse != SIZE_MAX) {
        set_slot(t, reuse, pack(key, owner, bytes));
        live++;
        return 0;
    }
    // A fresh slot: keep at least a quarter of the slots EMPTY, so that probes stay short and
    // always end.
    if (!t || (used + 1) * 4 > (t->mask + 1) * 3) {
        if (rebuild(live + 1) != 0)
            return -1;
        t = atomic_load_explicit(&current, memory_order_relaxed);
    }
    size_t i = slot_of(t, key);
    while (atomic_load_explicit(&t->slot[i], memory_order_relaxed) != EMPTY)
        i = (i + 1) & t->mask;
    set_slot(t, i, pack(key, owner, bytes));
    used++;
    live++;
    return 0;
}

// `owner` gave back `bytes` of chunk `key`. Never below zero: a reset's SEGMENT_FREE of an
// expandable segment names its whole address range, of which only the mapped pages were added.
static void remove_chunk(uint64_t key, unsigned owner, uint64_t bytes)
{
    table *t = atomic_load_explicit(&current, memory_order_relaxed);
    if (!t)
        return;
    for (size_t i = slot_of(t, key);; i = (i + 1) & t->mask) {
        uint64_t e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
        if (e == EMPTY)
            return;
        if (key_of(e) != key)
            continue;
        if (!is_live(e) || owner_of(e) != owner || owner == OWNER_MIXED)
            return;
        uint64_t left = bytes_of(e) - (bytes < bytes_of(e) ? bytes : bytes_of(e));
        set_slot(t, i, pack(key, owner, left));
        if (left == 0)
            live--;
        return;
    }
}

static void mark_incomplete_locked(void)
{
    if (!atomic_load_explicit(&incomplete, memory_order_relaxed))
        cci_log(CCI_LOG_DEBUG, "address map incomplete: frees ask every allocator from now on");
    atomic_store_explicit(&incomplete, 1, memory_order_release);
}

// Calls add_chunk or remove_chunk for each chunk of [addr, addr + size) with the bytes of the
// range in it.
static void for_each_chunk(int device, uintptr_t addr, size_t size, int adding)
{
    if (size == 0)
        return;
    pthread_mutex_lock(&writer);
    if (atomic_load_explicit(&incomplete, memory_order_relaxed))
        goto out;
    uint64_t end = (uint64_t)addr + size;
    if (end < (uint64_t)addr || ((end - 1) >> CHUNK_SHIFT) > KEY_MAX) {
        // Beyond what a key can name: the map cannot vouch for such addresses.
        mark_incomplete_locked();
        goto out;
    }
    unsigned owner = owner_for(device);
    for (uint64_t key = (uint64_t)addr >> CHUNK_SHIFT; key <= (end - 1) >> CHUNK_SHIFT; key++) {
        uint64_t lo = key << CHUNK_SHIFT, hi = lo + CHUNK_BYTES;
        uint64_t bytes = (end < hi ? end : hi) - ((uint64_t)addr > lo ? (uint64_t)addr : lo);
        if (!adding) {
            remove_chunk(key, owner, bytes);
        } else if (add_chunk(key, owner, bytes) != 0) {
            // The host is out of memory: a segment the map does not know must not read as
            // "not ours", so nothing the map says counts any more.
            mark_incomplete_locked();
            break;
        }
    }
out:
    pthread_mutex_unlock(&writer);
}

void cci_addr_map_add(int device, uintptr_t addr, size_t size)
{
    for_each_chunk(device, addr, size, 1);
}

void cci_addr_map_remove(int device, uintptr_t addr, size_t size)
{
    for_each_chunk(device, addr, size, 0);
}

void cci_addr_map_mark_incomplete(void)
{
    pthread_mutex_lock(&writer);
    mark_incomplete_locked();
    pthread_mutex_unlock(&writer);
}

void cci_addr_map_forget_all(void)
{
    pthread_mutex_lock(&writer);
    free(atomic_exchange_explicit(&current, NULL, memory_order_relaxed));
    while (retired) {
        table *t = retired;
        retired = t->retired_next;
        free(t);
    }
    used = live = 0;
    atomic_store_explicit(&incomplete, 0, memory_order_relaxed);
    pthread_mutex_unlock(&writer);
}

// ---- the reader --------------------------------------------------------------------------------

int cci_addr_map_device(uintptr_t p)
{
    // Acquire, both: whatever made the caller hold `p` (the allocation that returned it, in
    // this thread or passed on by the program) came after its chunk was added or after the map
    // became incomplete, and these loads see that much.
    if (atomic_load_explicit(&incomplete, memory_order_acquire))
        return CCI_ADDR_UNKNOWN;
    const table *t = atomic_load_explicit(&current, memory_order_acquire);
    uint64_t key = (uint64_t)p >> CHUNK_SHIFT;
    if (!t || key > KEY_MAX)
        return CCI_ADDR_NOT_OURS;
    for (size_t i = slot_of(t, key), n = 0; n <= t->mask; i = (i + 1) & t->mask, n++) {
        uint64_t e = atomic_load_explicit(&t->slot[i], memory_order_acquire);
        if (e == EMPTY)
            return CCI_ADDR_NOT_OURS;
        if (key_of(e) != key)
            continue;
        if (!is_live(e))
            return CCI_ADDR_NOT_OURS;
        return owner_of(e) == OWNER_MIXED ? CCI_ADDR_UNKNOWN : (int)owner_of(e) - 1;
    }
    // Every slot probed: cannot happen while a quarter stays EMPTY, but a bounded loop costs
    // nothing and a wrong "not ours" would: ask the allocators.
    return CCI_ADDR_UNKNOWN;
}

// ---- the observer ------------------------------------------------------------------------------

static void observe(void *ud, const cci_event *ev)
{
    (void)ud;
    switch (ev->kind) {
    case CCI_EV_SEGMENT_ALLOC:
    case CCI_EV_SEGMENT_MAP:
        cci_addr_map_add(ev->device, ev->addr, ev->size);
        break;
    case CCI_EV_SEGMENT_FREE:  // also each segment of an allocator reset (allocator_reset.c)
    case CCI_EV_SEGMENT_UNMAP:
        cci_addr_map_remove(ev->device, ev->addr, ev->size);
        break;
    default:
        break;
    }
}

// The fork child starts with an empty map, as with no allocators. Registered when the library
// loads, not at the first allocator: pthread_atfork takes the C library's fork-handler lock,
// which fork() holds while the prepare handlers run, and lifecycle.c's prepare handler waits for
// the allocator-creation lock; registering from inside allocator creation could deadlock
// against a concurrent fork. The order against lifecycle.c's child handler does not matter:
// dropping the inherited allocators emits no event, and forgetting an empty map is a no-op.
// No writer can be half-way through a change at fork (writers run in observers, under an
// allocator lock, and the parent's prepare handler holds all of those); the mutex is made new
// anyway, because a hung fork child is the worse failure.
static void atfork_child(void)
{
    pthread_mutex_init(&writer, NULL);
    cci_addr_map_forget_all();
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    // Without it a fork child starts from a stale map, still correct: a stale chunk costs one
    // allocator lookup or one scan, never a wrong answer about a segment the child creates.
    (void)pthread_atfork(NULL, NULL, atfork_child);
}

void cci_addr_map_attach(cci_allocator *a)
{
    unsigned segments = 1u << CCI_EV_SEGMENT_ALLOC | 1u << CCI_EV_SEGMENT_FREE | 1u << CCI_EV_SEGMENT_MAP |
                        1u << CCI_EV_SEGMENT_UNMAP;
    if (cci_allocator_add_observer_of(a, observe, NULL, segments) != 0) {
        cci_log(CCI_LOG_WARNING, "device %d: no observer slot left for the address map; every free "
                "asks each device's allocator in turn", cci_allocator_device(a));
        cci_addr_map_mark_incomplete();
    }
}

// ---- for the unit test ----------------------------------------------------------------------

void cci__addr_map_fail_table_allocs(int n)
{
    atomic_store_explicit(&fail_allocs, n, memory_order_relaxed);
}

size_t cci__addr_map_capacity(void)
{
    const table *t = atomic_load_explicit(&current, memory_order_acquire);
    return t ? t->mask + 1 : 0;
}
