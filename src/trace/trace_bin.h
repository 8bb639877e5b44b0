// SPDX-License-Identifier: MIT
// The binary trace format (docs/trace-format.md): constants, record coding, and the reader.
//
// The recorder (trace_record.c) writes it; ccreplay and the tests read it. Everything on disk is
// little-endian with fixed offsets, so a file written on one host reads on any other.
#ifndef CCI_TRACE_BIN_H
#define CCI_TRACE_BIN_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#define CCI_TBIN_MAGIC "CCITRACE"     ///< 8 bytes, no terminator on disk
#define CCI_TBIN_VERSION 1u
#define CCI_TBIN_FIXED_HEADER 64u     ///< bytes before the configuration string
#define CCI_TBIN_RECORD_SIZE 48u      ///< bytes per record written by this version
#define CCI_TBIN_CAPACITY_OFFSET 24u  ///< where the recorder patches in the capacity later

/// Record actions: 0–5 and 7–8 are cci_event_kind (allocator.h); 6 describes a device.
enum { CCI_TBIN_DEVICE = 6, CCI_TBIN_ACTIONS = 9 };

/// Requests are stored in 48 bits (256 TiB), sharing a word with the action and the device.
#define CCI_TBIN_REQUEST_MAX ((UINT64_C(1) << 48) - 1)
#define CCI_TBIN_MAX_DEVICES 256

/// One record, decoded.
typedef struct cci_tbin_record {
    uint64_t time_ns;    ///< since the start of the recording (monotonic clock)
    uint64_t seq;        ///< event number on its device, from 0, in allocator-lock order
    uint64_t addr;
    uint64_t stream;
    uint64_t size;       ///< rounded block or segment size; device capacity for CCI_TBIN_DEVICE
    uint64_t requested;  ///< what the program asked for (alloc, oom), else 0
    uint8_t action;
    uint8_t device;
} cci_tbin_record;

/// The fixed part of the header, decoded.
typedef struct cci_tbin_header {
    uint32_t version;
    uint32_t header_size;   ///< offset of the first record (multiple of 8)
    uint32_t record_size;   ///< >= CCI_TBIN_RECORD_SIZE; later versions may append fields
    uint32_t flags;         ///< 0 in version 1
    uint64_t capacity;      ///< bytes of the first device recorded; 0 = not known yet
    uint64_t start_realtime_ns;  ///< wall clock at the start (for humans)
    uint32_t pid;
    int32_t rank;           ///< RANK / LOCAL_RANK of the recording process, -1 when unset
    uint32_t config_len;    ///< bytes of the configuration string that follows the fixed part
} cci_tbin_header;

/// Bytes of a header that carries a configuration string of `config_len` bytes.
size_t cci_tbin_header_size(size_t config_len);
/// Writes the header (cci_tbin_header_size(h->config_len) bytes) into out.
void cci_tbin_encode_header(uint8_t *out, const cci_tbin_header *h, const char *config);
void cci_tbin_encode_record(uint8_t out[CCI_TBIN_RECORD_SIZE], const cci_tbin_record *r);
void cci_tbin_decode_record(const uint8_t *in, cci_tbin_record *r);
void cci_tbin_put_u64(uint8_t *p, uint64_t v);

/// Parses a whole binary trace held in memory into *t (events of each device in their recorded
/// order). An incomplete final record (a crash mid-write) is not an error: it is left out and
/// counted in t->truncated_bytes. 0, or -1 with one line in err that starts with `name`.
int cci_trace_parse_bin(const uint8_t *buf, size_t len, const char *name, cci_trace *t, char *err,
                        size_t errlen);

#endif
