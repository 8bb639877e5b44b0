// SPDX-License-Identifier: MIT
// Restricted unpickler (see pickle_reader.h). Opcode semantics follow CPython's pickle.py; only
// the data-building subset of protocols 1-5 is implemented (protocol 0's text strings, floats
// and memo opcodes are refused), with no recursion, so a deep or hostile input costs memory proportional to
// its size and nothing else.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle_reader.h"

#define ARENA_NODES 16384

typedef struct arena {
    struct arena *next;
    size_t used;
    cci_pv nodes[ARENA_NODES];
} arena;

struct cci_pickle_doc {
    arena *blocks;
};

typedef struct vm {
    const uint8_t *p, *start, *end;
    cci_pickle_doc *doc;
    cci_pv **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    cci_pv **memo;
    size_t memo_cap, memo_entries;
    char *err;
    size_t errlen;
    int failed;
} vm;

__attribute__((format(printf, 2, 3))) static void fail(vm *m, const char *fmt, ...)
{
    if (m->failed++)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, m->errlen, fmt, ap);
    va_end(ap);
}

static size_t off(const vm *m) { return (size_t)(m->p - m->start); }

static cci_pv *node(vm *m, cci_pv_type type)
{
    arena *a = m->doc->blocks;
    if (!a || a->used == ARENA_NODES) {
        arena *n = malloc(sizeof *n);
        if (!n) {
            fail(m, "out of memory building the snapshot");
            return NULL;
        }
        n->next = a;
        n->used = 0;
        m->doc->blocks = a = n;
    }
    cci_pv *v = &a->nodes[a->used++];
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)type;
    return v;
}

static int grow(vm *m, void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : need;  // containers are filled in one batch: often exactly
    while (c < need)
        c *= 2;
    void *n = realloc(*arr, c * elem);
    if (!n) {
        fail(m, "out of memory building the snapshot");
        return -1;
    }
    *arr = n;
    *cap = c;
    return 0;
}

static int push(vm *m, cci_pv *v)
{
    if (!v || grow(m, (void **)&m->stack, &m->scap, m->sp + 1, sizeof *m->stack))
        return -1;
    m->stack[m->sp++] = v;
    return 0;
}

// The stack below the innermost MARK belongs to an enclosing opcode.
static cci_pv *top(vm *m)
{
    size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (m->sp <= floor) {
        fail(m, "malformed pickle: stack underflow at byte %zu", off(m) - 1);
        return NULL;
    }
    return m->stack[m->sp - 1];
}

static cci_pv *pop(vm *m)
{
    cci_pv *v = top(m);
    m->sp -= v != NULL;
    return v;
}

// Returns the stack index where the innermost mark starts, removing the mark.
static int pop_mark(vm *m, size_t *at)
{
    if (!m->nmarks) {
        fail(m, "malformed pickle: no MARK before the opcode at byte %zu", off(m) - 1);
        return -1;
    }
    *at = m->marks[--m->nmarks];
    return 0;
}

static int append_item(vm *m, cci_pv *c, cci_pv *item)
{
    if (grow(m, (void **)&c->c.v, &c->c.cap, c->c.n + 1, sizeof *c->c.v))
        return -1;
    c->c.v[c->c.n++] = item;
    return 0;
}

// Moves the items above stack index `from` into container c.
static int move_items(vm *m, cci_pv *c, size_t from)
{
    size_t k = m->sp - from;
    if (!k)
        return 0;
    if (grow(m, (void **)&c->c.v, &c->c.cap, c->c.n + k, sizeof *c->c.v))
        return -1;
    memcpy(c->c.v + c->c.n, m->stack + from, k * sizeof *c->c.v);
    c->c.n += k;
    m->sp = from;
    return 0;
}

static const uint8_t *take(vm *m, uint64_t n)
{
    if ((uint64_t)(m->end - m->p) < n) {
        fail(m, "pickle data is truncated (at byte %zu)", off(m));
        return NULL;
    }
    const uint8_t *r = m->p;
    m->p += n;
    return r;
}

static uint64_t le(const uint8_t *b, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | b[i];
    return v;
}

// Text-mode argument: the bytes up to the next newline, as a NUL-terminated copy.
static int line_arg(vm *m, char *buf, size_t cap)
{
    const uint8_t *nl = memchr(m->p, '\n', (size_t)(m->end - m->p));
    if (!nl) {
        fail(m, "pickle data is truncated (at byte %zu)", off(m));
        return -1;
    }
    size_t n = (size_t)(nl - m->p);
    if (n >= cap) {
        fail(m, "malformed pickle: argument too long at byte %zu", off(m));
        return -1;
    }
    memcpy(buf, m->p, n);
    buf[n] = 0;
    m->p = nl + 1;
    return 0;
}

static cci_pv *int_node(vm *m, const uint8_t *b, uint64_t n)
{
    cci_pv *v = node(m, CCI_PV_INT);
    if (!v)
        return NULL;
    if (n <= 8) {
        uint64_t u = n ? le(b, (unsigned)n) : 0;
        if (n && n < 8 && (b[n - 1] & 0x80))
            u |= ~UINT64_C(0) << (8 * n);
        v->i = (int64_t)u;
        return v;
    }
    // Longer encodings still fit when the extra bytes only extend the sign; all-zero extra bytes
    // over a set top bit give 2^63..2^64-1, a pointer-sized unsigned value.
    int zero = 1, ones = 1;
    for (uint64_t i = 8; i < n; i++) {
        zero &= b[i] == 0;
        ones &= b[i] == 0xff;
    }
    if (zero || (ones && (b[7] & 0x80))) {
        v->u = le(b, 8);
        v->is_u64 = zero && (b[7] & 0x80);
    } else {
        v->type = CCI_PV_BIGINT;
    }
    return v;
}

static cci_pv *str_node(vm *m, cci_pv_type type, uint64_t n)
{
    const uint8_t *b = take(m, n);
    cci_pv *v = b ? node(m, type) : NULL;
    if (v) {
        v->s.p = (const char *)b;
        v->s.n = (size_t)n;
    }
    return v;
}

static int memo_put(vm *m, uint64_t idx)
{
    cci_pv *v = top(m);
    // Memo indices count the values a writer stored, so one larger than the input is forged.
    if (!v || idx > (uint64_t)(m->end - m->start)) {
        if (v)
            fail(m, "malformed pickle: memo index %llu out of range at byte %zu", (unsigned long long)idx,
                 off(m));
        return -1;
    }
    size_t old = m->memo_cap;
    if (grow(m, (void **)&m->memo, &m->memo_cap, (size_t)idx + 1, sizeof *m->memo))
        return -1;
    memset(m->memo + old, 0, (m->memo_cap - old) * sizeof *m->memo);
    m->memo_entries += m->memo[idx] == NULL;
    m->memo[idx] = v;
    return 0;
}

static int memo_get(vm *m, uint64_t idx)
{
    if (idx >= m->memo_cap || !m->memo[idx]) {
        fail(m, "malformed pickle: memo entry %llu not defined at byte %zu", (unsigned long long)idx, off(m));
        return -1;
    }
    return push(m, m->memo[idx]);
}

// Opcodes that name, call or fetch something outside the data: never executed, always refused.
static const char *refused_name(uint8_t op)
{
    static const struct {
        uint8_t op;
        const char *name;
    } refused[] = {
        {'R', "REDUCE"}, {'b', "BUILD"}, {'i', "INST"}, {'o', "OBJ"}, {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"},
        {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {'P', "PERSID"}, {'Q', "BINPERSID"},
        {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (refused[i].op == op)
            return refused[i].name;
    return NULL;
}

static void refuse_global(vm *m, const char *mod, size_t ml, const char *name, size_t nl)
{
    char q[160];
    snprintf(q, sizeof q, "%.*s.%.*s", (int)(ml > 70 ? 70 : ml), mod, (int)(nl > 70 ? 70 : nl), name);
    for (char *c = q; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
            *c = '?';
    fail(m, "refusing to unpickle global '%s' (a memory snapshot contains only plain data; nothing was run)",
         q);
}

static int step(vm *m, int *stop)
{
    const uint8_t *b;
    cci_pv *v, *k, *c;
    size_t at;
    uint64_t u;
    char buf[64];
    uint8_t op = *m->p++;
    switch (op) {
    case 0x80: // PROTO
        if (!(b = take(m, 1)))
            return -1;
        if (*b > 5) {
            fail(m, "pickle protocol %u is not supported (0-5 are)", *b);
            return -1;
        }
        return 0;
    case 0x95: return take(m, 8) ? 0 : -1;  // FRAME: framing only, the data follows inline
    case '.': *stop = 1; return 0;
    case '(': // MARK
        if (grow(m, (void **)&m->marks, &m->mcap, m->nmarks + 1, sizeof *m->marks))
            return -1;
        m->marks[m->nmarks++] = m->sp;
        return 0;
    case '0': // POP
        if (m->sp > (m->nmarks ? m->marks[m->nmarks - 1] : 0))
            return pop(m) ? 0 : -1;
        return pop_mark(m, &at);
    case '1': // POP_MARK
        if (pop_mark(m, &at))
            return -1;
        m->sp = at;
        return 0;
    case '2': return (v = top(m)) ? push(m, v) : -1;  // DUP
    case 'N': return push(m, node(m, CCI_PV_NONE));
    case 0x88: case 0x89: // NEWTRUE, NEWFALSE
        if (!(v = node(m, CCI_PV_BOOL)))
            return -1;
        v->i = op == 0x88;
        return push(m, v);
    case 'J': return (b = take(m, 4)) ? push(m, int_node(m, b, 4)) : -1;
    case 'K': return (b = take(m, 1)) ? push(m, int_node(m, (const uint8_t[]){*b, 0}, 2)) : -1;
    case 'M': return (b = take(m, 2)) ? push(m, int_node(m, (const uint8_t[]){b[0], b[1], 0}, 3)) : -1;
    case 0x8a: case 0x8b: // LONG1, LONG4
        if (!(b = take(m, op == 0x8a ? 1 : 4)))
            return -1;
        u = le(b, op == 0x8a ? 1 : 4);
        return (b = take(m, u)) ? push(m, int_node(m, b, u)) : -1;
    case 'G': // BINFLOAT, big-endian
        if (!(b = take(m, 8)) || !(v = node(m, CCI_PV_FLOAT)))
            return -1;
        u = 0;
        for (int i = 0; i < 8; i++)
            u = u << 8 | b[i];
        memcpy(&v->f, &u, sizeof v->f);
        return push(m, v);
    case 0x8c: return (b = take(m, 1)) ? push(m, str_node(m, CCI_PV_STR, *b)) : -1;
    case 'X': return (b = take(m, 4)) ? push(m, str_node(m, CCI_PV_STR, le(b, 4))) : -1;
    case 0x8d: return (b = take(m, 8)) ? push(m, str_node(m, CCI_PV_STR, le(b, 8))) : -1;
    case 'U':
    case 'C': return (b = take(m, 1)) ? push(m, str_node(m, op == 'U' ? CCI_PV_STR : CCI_PV_BYTES, *b)) : -1;
    case 'T':
    case 'B':
        return (b = take(m, 4)) ? push(m, str_node(m, op == 'T' ? CCI_PV_STR : CCI_PV_BYTES, le(b, 4))) : -1;
    case 0x8e: case 0x96: return (b = take(m, 8)) ? push(m, str_node(m, CCI_PV_BYTES, le(b, 8))) : -1;
    case ')': return push(m, node(m, CCI_PV_TUPLE));
    case ']': return push(m, node(m, CCI_PV_LIST));
    case '}': return push(m, node(m, CCI_PV_DICT));
    case 0x8f: return push(m, node(m, CCI_PV_SET));
    case 0x85: case 0x86: case 0x87: { // TUPLE1..3
        size_t n = (size_t)(op - 0x84);
        size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
        if (m->sp < floor + n) {
            fail(m, "malformed pickle: stack underflow at byte %zu", off(m) - 1);
            return -1;
        }
        if (!(v = node(m, CCI_PV_TUPLE)) || move_items(m, v, m->sp - n))
            return -1;
        return push(m, v);
    }
    case 't': case 'l': case 'd': case 0x91: // TUPLE, LIST, DICT, FROZENSET
        if (pop_mark(m, &at))
            return -1;
        if (op == 'd' && (m->sp - at) % 2) {
            fail(m, "malformed pickle: odd number of dict items at byte %zu", off(m) - 1);
            return -1;
        }
        if (!(v = node(m, op == 't'   ? CCI_PV_TUPLE
                          : op == 'l' ? CCI_PV_LIST
                          : op == 'd' ? CCI_PV_DICT
                                      : CCI_PV_SET)) ||
            move_items(m, v, at))
            return -1;
        return push(m, v);
    case 'a': // APPEND
        if (!(v = pop(m)) || !(c = top(m)))
            return -1;
        if (c->type != CCI_PV_LIST) {
            fail(m, "malformed pickle: APPEND to a %s at byte %zu", cci_pv_type_name(c), off(m) - 1);
            return -1;
        }
        return append_item(m, c, v);
    case 's': // SETITEM
        if (!(v = pop(m)) || !(k = pop(m)) || !(c = top(m)))
            return -1;
        if (c->type != CCI_PV_DICT) {
            fail(m, "malformed pickle: SETITEM on a %s at byte %zu", cci_pv_type_name(c), off(m) - 1);
            return -1;
        }
        return append_item(m, c, k) || append_item(m, c, v) ? -1 : 0;
    case 'e': case 'u': case 0x90: { // APPENDS, SETITEMS, ADDITEMS
        if (pop_mark(m, &at))
            return -1;
        int want = op == 'e' ? CCI_PV_LIST : op == 'u' ? CCI_PV_DICT : CCI_PV_SET;
        c = at ? m->stack[at - 1] : NULL;
        if (!c || c->type != want || (op == 'u' && (m->sp - at) % 2)) {
            fail(m, "malformed pickle: %s without a %s below its MARK at byte %zu",
                 op == 'e' ? "APPENDS" : op == 'u' ? "SETITEMS" : "ADDITEMS",
                 op == 'e' ? "list" : op == 'u' ? "dict with paired items" : "set", off(m) - 1);
            return -1;
        }
        return move_items(m, c, at);
    }
    case 0x94: return memo_put(m, m->memo_entries);  // MEMOIZE
    case 'q': return (b = take(m, 1)) ? memo_put(m, *b) : -1;
    case 'r': return (b = take(m, 4)) ? memo_put(m, le(b, 4)) : -1;
    case 'h': return (b = take(m, 1)) ? memo_get(m, *b) : -1;
    case 'j': return (b = take(m, 4)) ? memo_get(m, le(b, 4)) : -1;
    case 'c': { // GLOBAL: named in the message, never looked up
        char mod[128];
        if (line_arg(m, mod, sizeof mod) || line_arg(m, buf, sizeof buf))
            return -1;
        refuse_global(m, mod, strlen(mod), buf, strlen(buf));
        return -1;
    }
    case 0x93: { // STACK_GLOBAL
        cci_pv *n = m->sp >= 1 ? m->stack[m->sp - 1] : NULL, *mo = m->sp >= 2 ? m->stack[m->sp - 2] : NULL;
        if (n && mo && n->type == CCI_PV_STR && mo->type == CCI_PV_STR)
            refuse_global(m, mo->s.p, mo->s.n, n->s.p, n->s.n);
        else
            fail(m,
                 "refusing pickle opcode STACK_GLOBAL at byte %zu (a memory snapshot contains only plain "
                 "data)",
                 off(m) - 1);
        return -1;
    }
    case 'I': case 'L': { // INT, LONG: decimal text; protocol 1 still writes ints past 32 bits so
        char *e;
        if (line_arg(m, buf, sizeof buf) || !(v = node(m, CCI_PV_INT)))
            return -1;
        size_t l = strlen(buf);
        if (op == 'L' && l && buf[l - 1] == 'L')
            buf[--l] = 0;
        if (op == 'I' && (!strcmp(buf, "00") || !strcmp(buf, "01"))) {  // protocol 0 booleans
            v->type = CCI_PV_BOOL;
            v->i = buf[1] == '1';
            return push(m, v);
        }
        errno = 0;
        if (buf[0] == '-') {
            v->i = strtoll(buf, &e, 10);
        } else {
            v->u = strtoull(buf, &e, 10);
            v->is_u64 = v->u > INT64_MAX;
        }
        if (e == buf || *e || errno) {
            fail(m, "malformed pickle: bad decimal integer at byte %zu", off(m));
            return -1;
        }
        return push(m, v);
    }
    case 'S': case 'V': case 'F': case 'p': case 'g':
        fail(m, "unsupported pickle opcode '%c' at byte %zu (a protocol 0 text opcode; snapshots are written "
             "with protocol 2 or later)", op, off(m) - 1);
        return -1;
    default:
        if (refused_name(op))
            fail(m, "refusing pickle opcode %s at byte %zu (it calls or names code; a memory snapshot "
                 "contains only plain data)", refused_name(op), off(m) - 1);
        else
            fail(m, "not a valid pickle: unknown opcode 0x%02x at byte %zu", op, off(m) - 1);
        return -1;
    }
}

cci_pickle_doc *cci_pickle_load(const uint8_t *buf, size_t len, const cci_pv **root, char *err, size_t errlen)
{
    vm m = {.p = buf, .start = buf, .end = buf + len, .err = err, .errlen = errlen};
    m.doc = calloc(1, sizeof *m.doc);
    if (!m.doc) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int stop = 0;
    while (!stop && !m.failed) {
        if (m.p == m.end) {
            fail(&m, "pickle data is truncated (no STOP opcode after %zu bytes)", len);
            break;
        }
        if (step(&m, &stop) != 0 && !m.failed)
            fail(&m, "out of memory building the snapshot");
    }
    cci_pv *r = m.failed ? NULL : pop(&m);  // STOP returns the top value, as pickle.py does
    if (r)
        *root = r;
    free(m.stack);
    free(m.marks);
    free(m.memo);
    if (m.failed) {
        cci_pickle_free(m.doc);
        return NULL;
    }
    return m.doc;
}

void cci_pickle_free(cci_pickle_doc *d)
{
    if (!d)
        return;
    for (arena *a = d->blocks, *n; a; a = n) {
        n = a->next;
        for (size_t i = 0; i < a->used; i++) {
            cci_pv *v = &a->nodes[i];
            if (v->type >= CCI_PV_LIST)
                free(v->c.v);
        }
        free(a);
    }
    free(d);
}

const cci_pv *cci_pv_get(const cci_pv *d, const char *key)
{
    if (!d || d->type != CCI_PV_DICT)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = d->c.n; i >= 2; i -= 2) {  // the last binding wins, as in Python
        const cci_pv *k = d->c.v[i - 2];
        if (k->type == CCI_PV_STR && k->s.n == kl && !memcmp(k->s.p, key, kl))
            return d->c.v[i - 1];
    }
    return NULL;
}

const char *cci_pv_type_name(const cci_pv *v)
{
    static const char *const names[] = {"None", "bool", "int", "int", "float", "str", "bytes",
                                        "list", "tuple", "dict", "set"};
    return v && v->type < sizeof names / sizeof names[0] ? names[v->type] : "?";
}
