#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Convert a pickled PyTorch CUDA memory snapshot into a cci text trace.

The input is what torch.cuda.memory._snapshot() returns, pickled as-is and
optionally compressed with gzip or xz.  The output format is described in
docs/text-trace-format.md.

Snapshots are untrusted input: they get passed around in bug reports.  A
snapshot is nothing but dicts, lists, strings and numbers, so the unpickler
below refuses every global; without a global, a pickle has no callable to
invoke and therefore cannot run code.
"""

import argparse
import gzip
import io
import lzma
import os
import pickle
import sys
import time
import zlib

PROG = "snapshot2trace"
FORMAT_LINE = "# cci-text-trace 1"

# Allocator trace actions as PyTorch names them, mapped to what the text
# trace carries.  Mapping and unmapping of expandable segments change the
# amount of reserved memory exactly as segment allocation and release do,
# which is all the replayer needs to know.
ACTIONS = {
    "alloc": "alloc",
    "free_requested": "free_requested",
    "free_completed": "free_completed",
    "segment_alloc": "segment_alloc",
    "segment_free": "segment_free",
    "segment_map": "segment_alloc",
    "segment_unmap": "segment_free",
    "oom": "oom",
}
OUTPUT_ACTIONS = ("alloc", "free_requested", "free_completed",
                  "segment_alloc", "segment_free", "oom")

GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"

U64 = 1 << 64


class Failure(Exception):
    """An error worth one line on stderr and exit status 2."""


class RefusedGlobal(pickle.UnpicklingError):
    def __init__(self, module, name):
        super().__init__(f"{module}.{name}")
        self.qualname = f"{module}.{name}"


class PlainDataUnpickler(pickle.Unpickler):
    # The C unpickler routes GLOBAL, STACK_GLOBAL, INST, OBJ and the EXT*
    # opcodes through find_class, so refusing here closes every path by which
    # a pickle could obtain something callable.
    def find_class(self, module, name):
        raise RefusedGlobal(module, name)

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent IDs are not supported")


def printable(text):
    """Make TEXT safe to put on a single line (messages, headers)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def read_snapshot(path):
    """Return (the unpickled snapshot object at PATH, the pickle's size in
    bytes after decompression), or raise Failure."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise Failure("no such file")
    except IsADirectoryError:
        raise Failure("is a directory, not a snapshot file")
    except OSError as e:
        raise Failure(f"cannot read: {e.strerror or e}")

    if not raw:
        raise Failure("file is empty, not a pickled memory snapshot")

    # The content decides the decompressor: snapshots get renamed and
    # recompressed often enough that the suffix is not reliable.
    if raw.startswith(XZ_MAGIC):
        try:
            raw = lzma.decompress(raw)
        except EOFError:
            raise Failure("xz data is truncated")
        except lzma.LZMAError as e:
            raise Failure(f"xz data is corrupt ({e})")
    elif raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except EOFError:
            raise Failure("gzip data is truncated")
        except (gzip.BadGzipFile, zlib.error) as e:
            raise Failure(f"gzip data is corrupt ({e})")

    hint = ""
    lower = path.lower()
    for suffix, kind in ((".xz", "xz"), (".gz", "gzip")):
        if lower.endswith(suffix):
            hint = f" (named {suffix} but has no {kind} header)"
            break

    try:
        return PlainDataUnpickler(io.BytesIO(raw)).load(), len(raw)
    except RefusedGlobal as e:
        raise Failure(f"refusing to unpickle global '{printable(e.qualname)}'"
                      " (a memory snapshot contains only plain data)")
    except EOFError:
        raise Failure("pickle data is truncated" + hint)
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError,
            IndexError, AttributeError, UnicodeDecodeError,
            OverflowError) as e:
        raise Failure(f"not a valid pickle{hint}: {printable(e)}")
    except (MemoryError, RecursionError):
        raise Failure("pickle data is too large or too deeply nested")


def simple_settings(settings):
    """Yield KEY=VALUE strings for the scalar allocator settings."""
    if not isinstance(settings, dict):
        return
    for key, value in settings.items():
        if not isinstance(key, str) or not key or not key.isprintable() \
                or any(c.isspace() or c == "=" for c in key):
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        elif isinstance(value, str):
            if not value.isprintable() or any(c.isspace() for c in value):
                continue
            text = value
        else:
            continue
        yield f"{key}={text}"


# The values examined per byte of (decompressed) pickle, the bound ccreplay's
# reader applies too (src/trace/trace_load.c, MAX_VALUES_PER_BYTE).  Each
# value a writer emits costs at least one byte, so a real snapshot, where
# every event and every device trace is its own object, stays under it; only
# memo references that share one container many times (80 KB expanding into
# 400 M events) go past it, and would otherwise write an enormous file.
MAX_VALUES_PER_BYTE = 1


def convert(snapshot, source_name, device=None, pickle_bytes=None):
    """Return (lines, written counts, skipped counts) for SNAPSHOT.

    Raises Failure when the snapshot does not have the expected shape, or
    when it expands past MAX_VALUES_PER_BYTE values per byte of its pickle
    (PICKLE_BYTES; None = no bound, for snapshots built in memory).
    """
    if not isinstance(snapshot, dict):
        raise Failure("not a memory snapshot: top level is a "
                      f"{type(snapshot).__name__}, not a dict")
    if "device_traces" not in snapshot:
        raise Failure("not a memory snapshot: no 'device_traces' key")
    traces = snapshot["device_traces"]
    if not isinstance(traces, (list, tuple)):
        raise Failure("not a memory snapshot: 'device_traces' is a "
                      f"{type(traces).__name__}, not a list")

    if device is None:
        devices = range(len(traces))
    else:
        if device >= len(traces):
            raise Failure(f"no device {device}: the snapshot has traces for "
                          f"{len(traces)} device(s)")
        devices = (device,)

    lines = [FORMAT_LINE]
    lines.extend(f"# device {d}" for d in devices)
    lines.append(f"# source {printable(source_name)}")
    lines.extend(f"# settings {kv}"
                 for kv in simple_settings(snapshot.get("allocator_settings")))

    written = dict.fromkeys(OUTPUT_ACTIONS, 0)
    skipped = {}
    append = lines.append
    actions = ACTIONS
    # Every list element visited and every item of every event dict is
    # charged, before any line is made: work and output stay linear in the
    # input's size.
    budget = None if pickle_bytes is None else pickle_bytes * MAX_VALUES_PER_BYTE
    for d in devices:
        events = traces[d]
        if not isinstance(events, (list, tuple)):
            raise Failure(f"not a memory snapshot: trace of device {d} is a "
                          f"{type(events).__name__}, not a list")
        if budget is not None:
            budget -= len(events)
        for i, ev in enumerate(events):
            if type(ev) is not dict:
                raise Failure(f"device {d} event {i}: is a "
                              f"{type(ev).__name__}, not a dict")
            if budget is not None:
                budget -= len(ev)
                if budget < 0:
                    raise Failure(
                        f"refusing a snapshot that expands past "
                        f"{pickle_bytes * MAX_VALUES_PER_BYTE} values "
                        f"({MAX_VALUES_PER_BYTE} per pickle byte): its memo "
                        "references share containers, which no memory "
                        "snapshot does")
            action = ev.get("action")
            out = actions.get(action) if type(action) is str else None
            if out is None:
                name = printable(action) if type(action) is str else \
                    f"<{type(action).__name__}>"
                skipped[name] = skipped.get(name, 0) + 1
                continue
            try:
                addr = ev["addr"]
                size = ev["size"]
                stream = ev["stream"]
            except KeyError as e:
                raise Failure(f"device {d} event {i} ({action}): "
                              f"missing {e.args[0]!r}")
            if type(addr) is not int or type(size) is not int \
                    or type(stream) is not int:
                bad = next(k for k, v in (("addr", addr), ("size", size),
                                          ("stream", stream))
                           if type(v) is not int)
                raise Failure(f"device {d} event {i} ({action}): {bad!r} is "
                              f"a {type(ev[bad]).__name__}, not an integer")
            if not 0 <= addr < U64 or not 0 <= size < U64:
                raise Failure(f"device {d} event {i} ({action}): addr/size "
                              "outside the unsigned 64-bit range")
            if not -U64 // 2 <= stream < U64:
                raise Failure(f"device {d} event {i} ({action}): stream "
                              "does not fit in 64 bits")
            # A stream is a cudaStream_t, i.e. a pointer; if it was ever
            # stored through a signed integer, its bit pattern is the handle.
            if stream < 0:
                stream += U64
            append(f"{out} 0x{addr:x} {size} {stream} {d}")
            written[out] += 1
    return lines, written, skipped


def write_output(text, out_path):
    data = text.encode("utf-8")
    if out_path is None or out_path == "-":
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            # The reader (e.g. `head`) has gone; stop without a second error
            # when the interpreter flushes stdout at exit.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return
    # A device or pipe (-o /dev/null, -o /dev/stdout) is written in place:
    # renaming a file over it would replace the device node itself.
    if os.path.exists(out_path) and not os.path.isfile(out_path):
        try:
            with open(out_path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise Failure(f"cannot write {printable(out_path)}: "
                          f"{e.strerror or e}")
        return
    # Written beside the target and renamed, so that a failed run never
    # leaves a half-written trace that looks complete.
    tmp = f"{out_path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, out_path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Failure(f"cannot write {printable(out_path)}: "
                      f"{e.strerror or e}")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Convert a pickled PyTorch CUDA memory snapshot "
                    "(plain, gzip or xz) into a cci text trace.")
    p.add_argument("snapshot", metavar="SNAPSHOT",
                   help="pickled torch.cuda.memory._snapshot() output")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write the trace to OUT instead of stdout")
    p.add_argument("--device", metavar="N", type=int,
                   help="convert only the events of device N")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print a one-line summary on stderr")
    args = p.parse_args(argv)
    if args.device is not None and args.device < 0:
        p.error("--device must be a non-negative integer")
    return args


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    where = printable(args.snapshot)
    try:
        snapshot, pickle_bytes = read_snapshot(args.snapshot)
        lines, written, skipped = convert(
            snapshot, os.path.basename(args.snapshot), args.device,
            pickle_bytes)
        lines.append("")
        write_output("\n".join(lines), args.output)
    except Failure as e:
        print(f"{PROG}: {where}: {e}", file=sys.stderr)
        return 2
    except (MemoryError, RecursionError) as e:
        print(f"{PROG}: {where}: out of resources ({type(e).__name__})",
              file=sys.stderr)
        return 2
    if args.verbose:
        total = sum(written.values())
        counts = " ".join(f"{k}={v}" for k, v in written.items())
        skip = sum(skipped.values())
        skip_detail = ""
        if skipped:
            skip_detail = " (" + " ".join(
                f"{k}={v}" for k, v in sorted(skipped.items())) + ")"
        print(f"{PROG}: {where}: wrote {total} events [{counts}], "
              f"skipped {skip}{skip_detail}, "
              f"{time.perf_counter() - started:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
