// SPDX-License-Identifier: MIT
// The simulated device's fence group: fences pass at once without a lag, pass exactly `lag`
// records later with one, pass on cci_sim_complete of their stream (and only of theirs, or of
// every stream), a wait makes the device catch up and is counted, and released handles are reused.
#include "backend.h"
#include "testutil.h"

int main(void)
{
    cci_sim_device *sim = cci_sim_create((size_t)1 << 30);
    cci_backend be = cci_sim_backend(sim);
    const cci_backend_fence_ops *f = be.ops->fence;
    CHECK(be.ops->caps & CCI_CAP_FENCES, "the simulated device offers fences");
    CHECK(f && f->record && f->query && f->wait && f->release, "every fence op is set");

    // No lag: a fence has passed the moment it is recorded.
    cci_fence a = 0;
    CHECK(f->record(be.ctx, 0, 5, &a) == CCI_OK && a != 0, "record on stream 5");
    CHECK_EQ_U(f->query(be.ctx, 0, a), 1, "no lag: passed at once");
    f->release(be.ctx, 0, a);

    // Lag 2: a fence passes once two more fences have been recorded after it.
    cci_sim_set_fence_lag(sim, 2);
    cci_fence x, y, z;
    f->record(be.ctx, 0, 5, &x);
    CHECK_EQ_U(f->query(be.ctx, 0, x), 0, "lag 2: not passed when recorded");
    f->record(be.ctx, 0, 5, &y);
    CHECK_EQ_U(f->query(be.ctx, 0, x), 0, "lag 2: not passed one record later");
    f->record(be.ctx, 0, 9, &z);
    CHECK_EQ_U(f->query(be.ctx, 0, x), 1, "lag 2: passed two records later");
    CHECK_EQ_U(f->query(be.ctx, 0, y), 0, "the next one still waits");
    CHECK(x != y && y != z && x != z, "live fences have distinct handles");

    // Completing a stream passes its fences, not another stream's.
    cci_sim_set_fence_lag(sim, 1000);
    cci_sim_complete(sim, 9);
    CHECK_EQ_U(f->query(be.ctx, 0, z), 1, "complete(9) passes the stream-9 fence");
    CHECK_EQ_U(f->query(be.ctx, 0, y), 0, "complete(9) leaves the stream-5 fence");
    cci_sim_complete(sim, 5);
    CHECK_EQ_U(f->query(be.ctx, 0, y), 1, "complete(5) passes it");

    // A fence on every stream passes only when every stream has completed.
    cci_fence all;
    f->record(be.ctx, 0, CCI_STREAM_ALL, &all);
    cci_sim_complete(sim, 5);
    cci_sim_complete(sim, 9);
    CHECK_EQ_U(f->query(be.ctx, 0, all), 0, "completing named streams does not pass an all-streams fence");
    cci_sim_complete(sim, CCI_STREAM_ALL);
    CHECK_EQ_U(f->query(be.ctx, 0, all), 1, "complete(all) passes it");

    // Waiting: for a passed fence costs nothing; for a pending one the device catches up to it
    // (and to everything before it on that stream), not beyond.
    uint64_t records, waits, live;
    cci_sim_fence_counts(sim, &records, &waits, &live);
    CHECK_EQ_U(waits, 0, "no wait yet");
    CHECK(f->wait(be.ctx, 0, all) == CCI_OK, "wait on a passed fence");
    cci_fence p1, p2;
    f->record(be.ctx, 0, CCI_STREAM_ALL, &p1);
    f->record(be.ctx, 0, CCI_STREAM_ALL, &p2);
    CHECK(f->wait(be.ctx, 0, p1) == CCI_OK, "wait on a pending fence");
    CHECK_EQ_U(f->query(be.ctx, 0, p1), 1, "passed after the wait");
    CHECK_EQ_U(f->query(be.ctx, 0, p2), 0, "a later fence is still pending");
    cci_sim_fence_counts(sim, &records, &waits, &live);
    CHECK_EQ_U(waits, 1, "one wait had to make the device catch up");
    CHECK_EQ_U(records, 7, "seven records");
    CHECK_EQ_U(live, 6, "six fences not yet released");

    // Released handles are handed out again; stale or unknown handles are refused.
    f->release(be.ctx, 0, p2);
    cci_fence again;
    f->record(be.ctx, 0, 5, &again);
    CHECK_EQ_U(again, p2, "a released handle is reused");
    f->release(be.ctx, 0, again);
    CHECK(f->query(be.ctx, 0, again) == CCI_EBACKEND, "a released fence is unknown");
    CHECK(f->query(be.ctx, 0, 0) == CCI_EBACKEND, "fence 0 is never valid");
    CHECK(f->wait(be.ctx, 0, 12345) == CCI_EBACKEND, "an unknown handle cannot be waited for");
    f->release(be.ctx, 0, 12345);  // forgetting an unknown handle changes nothing
    cci_fence rest[] = {x, y, z, all, p1};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        f->release(be.ctx, 0, rest[i]);
    cci_sim_fence_counts(sim, NULL, NULL, &live);
    CHECK_EQ_U(live, 0, "every fence released");
    cci_sim_destroy(sim);
    return t_finish();
}
