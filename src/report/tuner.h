// SPDX-License-Identifier: MIT
// The one rule that picks a configuration from replayed figures, and the one wording of it: the
// exit report's advice, its what-if table and `ccreplay --sweep` all call these, so they cannot
// disagree about the same run (docs/reports.md, "The tuner's rule").
//
// Configurations are compared by OOMs, by peak reserved memory, and by the estimated time of the
// device calls they make (a per-call cost table in report_tuner.c), scaled by how long the
// recorded run took: extra call time that is small against the run is no reason to refuse memory.
#ifndef CCI_TUNER_H
#define CCI_TUNER_H

#include <stddef.h>
#include <stdint.h>

/// The device calls one configuration made in a replay (all devices together).
typedef struct cci_tuner_calls {
    int vmm_mode;                  ///< 0: ordinary segments (cudaMalloc/cudaFree); 1 expandable; 2 compact
    uint64_t device_allocs;        ///< segments asked of the device (num_device_alloc)
    uint64_t device_frees;         ///< segments given back (num_device_free)
    uint64_t device_alloc_bytes;   ///< bytes of those segments (mode 0: sizes the cudaMalloc cost)
    uint64_t page_creates, maps, set_access, unmaps, page_releases;  ///< VMM modes: the calls
} cci_tuner_calls;

/// One replayed configuration as the rule sees it.
typedef struct cci_tuner_row {
    const char *conf;              ///< CCI_ALLOC_CONF grammar; "" = the defaults
    int nkeys;                     ///< keys in conf (fewer is simpler advice)
    uint64_t num_ooms;
    uint64_t peak_reserved;
    cci_tuner_calls calls;
} cci_tuner_row;

/// Estimated host time of the calls, microseconds (the cost table; an estimate, not a measurement).
double cci_tuner_call_us(const cci_tuner_calls *c);
/// How many device calls that estimate covers.
uint64_t cci_tuner_call_count(const cci_tuner_calls *c);
/// Extra call time, microseconds, a configuration may add over the reference before it is
/// penalised: a share of the run's duration, or a fixed allowance when the duration is unknown
/// (duration_s <= 0).
double cci_tuner_allowance_us(double duration_s);

/// The recommended row of rows[0..n) (any order; the answer does not depend on it), compared
/// with rows[ref] (the defaults for a sweep, the run's own setting in the exit report).
/// duration_s: the recorded run's duration (<= 0 unknown). Returns ref when nothing beats it.
size_t cci_tuner_choose(const cci_tuner_row *rows, size_t n, size_t ref, double duration_s);

/// The rule in words, built from the constants the code applies: "fewest OOMs; then ...".
/// `ref_name` names the reference ("the default's", "this run's"). Returns the length.
size_t cci_tuner_rule_text(char *buf, size_t len, double duration_s, const char *ref_name);
/// What the recommendation costs, one or two sentences: its device calls and their estimated
/// time against the reference's, and what it limits (CUDA IPC in the VMM modes). "" when rec is
/// ref. Returns the length.
size_t cci_tuner_cost_text(char *buf, size_t len, const cci_tuner_row *rec, const cci_tuner_row *ref,
                           double duration_s);
/// The recommendation in one paragraph, the same words in every output: "CCI_ALLOC_CONF='X':
/// peak reserved A MiB instead of B MiB (−Z %) with REF. Its cost: ...", or, when rec is ref,
/// that REF is kept. ref_name: "the default", "this run's setting". Returns the length.
size_t cci_tuner_recommendation_text(char *buf, size_t len, const cci_tuner_row *rec, const cci_tuner_row *ref,
                                     const char *ref_name, double duration_s);
/// "X MiB instead of Y MiB (−Z %)": the measured gain of rec over ref, in the one phrasing.
size_t cci_tuner_gain_text(char *buf, size_t len, const cci_tuner_row *rec, const cci_tuner_row *ref);

/// Bytes of the next unbreakable run of `p` for a word wrapper: one word, or a number and the short
/// unit after it ("13.4 ms", "20.8 %)"), which a line break must not part.
size_t cci_tuner_word_len(const char *p);

#endif
