// SPDX-License-Identifier: MIT
// A restricted unpickler: builds plain data (None, bools, ints, floats, str, bytes, lists,
// tuples, dicts, sets) from a pickle of protocol 1 to 5 and refuses every opcode that could name
// or call code.
//
// A PyTorch memory snapshot is plain data, so this reads one completely. It is a data parser,
// not a virtual machine with an escape hatch: GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
// NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID/BINPERSID and the out-of-band buffer opcodes are errors,
// reported before anything they name could be looked up.
#ifndef CCI_PICKLE_READER_H
#define CCI_PICKLE_READER_H

#include <stddef.h>
#include <stdint.h>

typedef enum cci_pv_type {
    CCI_PV_NONE, CCI_PV_BOOL, CCI_PV_INT, CCI_PV_BIGINT, CCI_PV_FLOAT, CCI_PV_STR, CCI_PV_BYTES,
    CCI_PV_LIST, CCI_PV_TUPLE, CCI_PV_DICT, CCI_PV_SET,
} cci_pv_type;

/// One value. Containers hold pointers to values owned by the document; dicts hold 2n items,
/// key then value. Strings point into the (decompressed) input, which must outlive the document.
typedef struct cci_pv {
    uint8_t type;       ///< cci_pv_type
    uint8_t is_u64;     ///< CCI_PV_INT: the value is `u`, >= 2^63 (else `i`)
    union {
        int64_t i;      ///< CCI_PV_INT, CCI_PV_BOOL
        uint64_t u;
        double f;       ///< CCI_PV_FLOAT
        struct {
            const char *p;
            size_t n;
        } s;            ///< CCI_PV_STR (UTF-8, not validated), CCI_PV_BYTES
        struct {
            struct cci_pv **v;
            size_t n, cap;
        } c;            ///< containers
    };
} cci_pv;

typedef struct cci_pickle_doc cci_pickle_doc;

/// Parses `len` bytes. On success returns the document (free with cci_pickle_free) and the top
/// value in *root. On failure returns NULL with one line in err (no file name): the problem and
/// the byte offset, e.g. "refusing to unpickle global 'posix.system' ...".
cci_pickle_doc *cci_pickle_load(const uint8_t *buf, size_t len, const cci_pv **root, char *err, size_t errlen);
void cci_pickle_free(cci_pickle_doc *d);

/// Looks up a string key in a dict; NULL when absent or `d` is not a dict.
const cci_pv *cci_pv_get(const cci_pv *d, const char *key);
/// A short type name for messages ("dict", "int", ...).
const char *cci_pv_type_name(const cci_pv *v);

#endif
