// SPDX-License-Identifier: MIT
// What the device's calls cost the host, as statistics (cci_stats version 4: fence_* and vmm_*):
// a program that fences its frees (non-blocking streams) and grows by mapping pages
// (expandable_segments:True) reads cci_get_stats and checks that the cost figures are there and
// agree with each other, with the core's own counts and with the calls the fake CUDA saw. It then
// prints every cost figure ("stat NAME VALUE"), and does nothing more that could cost: costs_check.py
// compares them with the exit lines (CCI_LOG=info), which must be printed from the same figures.
//
//   costs [--devices 2] [--report FILE]
//     --devices 2   device 1 maps pages too: the vmm_* figures are each device's own (summing to
//                   the fake's counts), the fence_* ones the same on both
//     --report FILE at the end, the JSON report (cci_dump_report), whose "costs" and
//                   "process_costs" costs_check.py compares with the figures printed
#include "fake_cuda_driver.h"

#include <stddef.h>

#include "ptest.h"

#define BIG ((size_t)12 << 20)
#define OLD 0xAA
#define NEW 0x5A

// Every cost field of version 4, in the struct's order.
#define COST_FIELDS(X)                                                                             \
    X(fence_record_calls) X(fence_record_events) X(fence_record_ns) X(fence_query_calls)           \
    X(fence_query_events) X(fence_query_ns) X(fence_wait_calls) X(fence_wait_events)               \
    X(fence_wait_ns) X(fence_order_calls) X(fence_order_ns) X(fence_catch_up_calls)                \
    X(fence_catch_up_events) X(fence_catch_up_ns) X(fence_barrier_records)                         \
    X(fence_context_records) X(fence_stream_queries) X(fence_stream_idle_answers) X(fence_sweeps)  \
    X(fence_shared_event_queries) X(fence_looks_put_off) X(fence_orders_made)                      \
    X(fence_orders_covered) X(fence_orders_refused) X(fence_orders_behind)                         \
    X(fence_order_stream_waits) X(fence_order_skips) X(fence_context_orders)                       \
    X(fence_watcher_rounds) X(fence_watcher_stream_queries) X(fence_watcher_looks_ahead)           \
    X(fence_watched_answers) X(fence_reuse_frees) X(fence_reuse_orders) X(fence_reuse_refused)       \
    X(fence_reuse_order_ns) X(vmm_create_calls) X(vmm_create_ns) X(vmm_map_calls) X(vmm_map_ns)   \
    X(vmm_set_access_calls) X(vmm_set_access_ns) X(vmm_unmap_calls) X(vmm_unmap_ns)                \
    X(vmm_release_calls) X(vmm_release_ns)

// The fenced frees of a program with a side stream: pairs of several sizes (misses and fits
// record fences and ask them), then a block freed while a late write to it is held on the side
// stream, wanted again with no room to grow: the host waits for its fence.
static void fenced_work(int device, cudaStream_t side, cudaStream_t other)
{
    CUDA_OK(cudaSetDevice(device));
    // First a free while the side stream is seen busy (as NCCL's is under DDP): from then on frees
    // are fenced, not ordered at reuse, whatever the fake's timing.
    void *first;
    CUDA_OK(cudaMalloc(&first, (size_t)2 << 20));
    CUDA_OK(fakecuda_stream_hold(side, 1));
    CUDA_OK(cudaMemsetAsync(first, NEW, 4096, side));
    CUDA_OK(cudaFree(first));
    CUDA_OK(fakecuda_stream_hold(side, 0));
    for (int i = 0; i < 200; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, ((size_t)1 << 20) << (i % 4)));
        CUDA_OK(cudaMemsetAsync(p, NEW, 4096, side));
        CUDA_OK(cudaFree(p));
    }
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(ptest_get_api().empty_cache(device) == 0, "device %d: cache emptied before the wait", device);
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(fakecuda_stream_hold(side, 1));
    fakecuda_delayed_fill(p, OLD, BIG, side, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, BIG));  // FAKECUDA_CAPACITY has room for one BIG block only
    CUDA_OK(cudaMemsetAsync(q, NEW, BIG, other));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(ptest_all_bytes(q, BIG, NEW), "device %d: the new owner's data intact after the wait", device);
    CUDA_OK(fakecuda_stream_hold(side, 0));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaDeviceSynchronize());
}

// An older caller's struct (`size` bytes) in a buffer with a canary after it: the library fills
// what both know, says so in `size`, and writes nothing beyond.
static void old_caller(const ptest_api *api, size_t size, const cci_stats *now, const char *what)
{
    _Alignas(cci_stats) unsigned char buf[sizeof(cci_stats) + 64];
    memset(buf, 0xC5, sizeof buf);
    cci_stats *s = (cci_stats *)(void *)buf;
    s->size = (uint32_t)size;
    CHECK(api->get_stats(0, s) == 0, "%s caller (%zu bytes): cci_get_stats succeeds", what, size);
    int canary = 1;
    for (size_t i = size; i < sizeof buf; i++)
        canary &= buf[i] == 0xC5;
    CHECK(s->size == size && canary, "%s caller: size kept at %u, nothing written beyond it", what, s->size);
    CHECK(s->version == CCI_STATS_VERSION && s->num_device_alloc == now->num_device_alloc &&
              s->reserved_bytes[CCI_POOL_ALL].peak == now->reserved_bytes[CCI_POOL_ALL].peak,
          "%s caller: the fields it knows as a full caller reads them", what);
    if (size > offsetof(cci_stats, num_fence_catch_ups))
        CHECK(s->num_fence_catch_ups == now->num_fence_catch_ups && s->num_fence_records == now->num_fence_records,
              "%s caller: its fence counts too", what);
}

int main(int argc, char **argv)
{
    int devices = 1;
    const char *report = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--devices"))
            devices = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--report"))
            report = argv[i + 1];
    }
    ptest_api api = ptest_get_api();
    cudaStream_t side[2], other[2];
    for (int d = 0; d < devices; d++) {
        CUDA_OK(cudaSetDevice(d));
        side[d] = ptest_stream(cudaStreamNonBlocking);
        other[d] = ptest_stream(cudaStreamNonBlocking);
    }
    for (int d = 0; d < devices; d++)
        fenced_work(d, side[d], other[d]);
    for (int d = 0; d < devices; d++) {
        CUDA_OK(cudaSetDevice(d));
        CUDA_OK(cudaStreamDestroy(side[d]));
        CUDA_OK(cudaStreamDestroy(other[d]));
    }
    CUDA_OK(cudaSetDevice(0));

    // From here on nothing fences, maps or unmaps: the exit lines must show these figures.
    cci_stats st[2];
    for (int d = 0; d < devices; d++)
        st[d] = ptest_stats(&api, d);
    const cci_stats *s = &st[0];
    struct fakecu_event_calls ev;
    fakecu_get_event_calls(&ev);
    struct fakecu_vmm_stats vm;
    fakecu_vmm_get_stats(&vm);

    CHECK(s->version >= 4 && s->size == sizeof *s, "version %u (4 or later), %u bytes", s->version, s->size);
    // Whether the host waits at all depends on timing (the watcher may find the fences passed
    // first, as it does under ThreadSanitizer's scheduling): waits are checked against the core's.
    CHECK(s->fence_record_calls > 0 && s->fence_record_ns > 0 && s->fence_query_calls > 0 &&
              s->fence_wait_calls >= s->num_fence_waits,
          "fences recorded (%llu, %llu ns), queried (%llu), waited for (%llu, the core counted %llu)",
          (unsigned long long)s->fence_record_calls, (unsigned long long)s->fence_record_ns,
          (unsigned long long)s->fence_query_calls, (unsigned long long)s->fence_wait_calls,
          (unsigned long long)s->num_fence_waits);
    CHECK(s->fence_record_calls >= s->num_fence_records && s->num_fence_records > 0,
          "the backend's records (%llu) include the core's batches (%llu)",
          (unsigned long long)s->fence_record_calls, (unsigned long long)s->num_fence_records);
    CHECK(s->fence_record_events >= s->fence_record_calls &&
              s->fence_record_events <= ev.event_records + ev.ctx_records,
          "every record made at least one event (%llu for %llu records), no more than the driver recorded "
          "(%llu cuEventRecord, %llu cuCtxRecordEvent)",
          (unsigned long long)s->fence_record_events, (unsigned long long)s->fence_record_calls,
          ev.event_records, ev.ctx_records);
    CHECK(s->fence_context_records + s->fence_barrier_records <= s->fence_record_calls,
          "context records (%llu) and barriers (%llu) are some of the records",
          (unsigned long long)s->fence_context_records, (unsigned long long)s->fence_barrier_records);
    // A backend wait blocks on at least one event; none at all is fine when the GPU was always ahead.
    CHECK(s->fence_wait_calls + s->fence_catch_up_calls >= s->num_fence_waits &&
              s->fence_wait_events >= (s->fence_wait_calls > 0) && s->fence_wait_events <= ev.event_syncs,
          "the core's host waits (%llu) are backend waits (%llu) or catch-ups (%llu); %llu events blocked on, "
          "of %llu cuEventSynchronize", (unsigned long long)s->num_fence_waits,
          (unsigned long long)s->fence_wait_calls, (unsigned long long)s->fence_catch_up_calls,
          (unsigned long long)s->fence_wait_events, ev.event_syncs);
    CHECK(s->fence_query_events <= ev.event_queries, "queried events (%llu) are cuEventQuery calls (%llu)",
          (unsigned long long)s->fence_query_events, ev.event_queries);
    CHECK(s->fence_stream_queries == ev.stream_queries && s->fence_stream_idle_answers <= s->fence_stream_queries,
          "stream questions: %llu, as the driver saw (%llu), %llu idle", (unsigned long long)s->fence_stream_queries,
          ev.stream_queries, (unsigned long long)s->fence_stream_idle_answers);
    CHECK(s->fence_order_calls == s->fence_orders_made + s->fence_orders_refused + s->fence_orders_behind,
          "orders decided (%llu) = made %llu + refused %llu + behind %llu", (unsigned long long)s->fence_order_calls,
          (unsigned long long)s->fence_orders_made, (unsigned long long)s->fence_orders_refused,
          (unsigned long long)s->fence_orders_behind);
    CHECK(s->fence_watcher_rounds == 0 && s->fence_watcher_stream_queries == 0 && s->fence_watched_answers == 0,
          "no watcher (CCI_FENCE_WATCHER=0): none of its figures");

    uint64_t creates = 0, maps = 0, access = 0, unmaps = 0, releases = 0;
    for (int d = 0; d < devices; d++) {
        const cci_stats *x = &st[d];
        // (Creates may outnumber maps: a create refused at the capacity is a call too.)
        CHECK(x->vmm_create_calls > 0 && x->vmm_create_ns > 0 && x->vmm_map_calls > 0 && x->vmm_map_ns > 0 &&
                  x->vmm_set_access_calls > 0 && x->vmm_set_access_ns > 0,
              "device %d: pages created (%llu), mapped (%llu) and given access (%llu), each timed", d,
              (unsigned long long)x->vmm_create_calls, (unsigned long long)x->vmm_map_calls,
              (unsigned long long)x->vmm_set_access_calls);
        creates += x->vmm_create_calls;
        maps += x->vmm_map_calls;
        access += x->vmm_set_access_calls;
        unmaps += x->vmm_unmap_calls;
        releases += x->vmm_release_calls;
    }
    // The fake counts the creates it granted; ours counts calls, refused ones (the capacity) too.
    CHECK(creates >= vm.creates && maps == vm.maps && access == vm.set_access_calls && unmaps == vm.unmaps &&
              releases == vm.releases,
          "the devices' VMM calls add up to the driver's: %llu/%llu cuMemCreate, %llu/%llu cuMemMap, "
          "%llu/%llu cuMemSetAccess, %llu/%llu cuMemUnmap, %llu/%llu cuMemRelease",
          (unsigned long long)creates, vm.creates, (unsigned long long)maps, vm.maps, (unsigned long long)access,
          vm.set_access_calls, (unsigned long long)unmaps, vm.unmaps, (unsigned long long)releases, vm.releases);
    if (devices > 1) {
        int same = 1;
#define SAME_FENCE(f) same &= strncmp(#f, "fence_", 6) != 0 || st[0].f == st[1].f;
        COST_FIELDS(SAME_FENCE)
#undef SAME_FENCE
        CHECK(same, "the fence figures, counted for the process, are the same on both devices");
    }

    old_caller(&api, offsetof(cci_stats, pinned_buffers), s, "version 4");
    old_caller(&api, offsetof(cci_stats, fence_record_calls), s, "version 3");
    old_caller(&api, offsetof(cci_stats, num_fence_records), s, "version 1");

    // As the exit lines hold them: the process's fence figures, the devices' VMM figures summed.
#define PRINT(f)                                                                                   \
    printf("stat %s %llu\n", #f,                                                                   \
           (unsigned long long)(strncmp(#f, "vmm_", 4) || devices == 1 ? s->f : st[0].f + st[1].f));
    COST_FIELDS(PRINT)
#undef PRINT
    fflush(stdout);
    if (report)
        CHECK(api.dump_report(report) == 0, "the JSON report written to %s", report);
    return 0;
}
