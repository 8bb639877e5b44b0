# SPDX-License-Identifier: MIT
"""libccinterpose from Python: the caching allocator's statistics, cache and reports.

The allocator is a preload (``ccinterpose python3 train.py``, or ``LD_PRELOAD``); this module
talks to the copy preloaded into the current process through the opt-in C API
(include/ccinterpose.h), so it works the same under PyTorch, JAX, CuPy or plain ctypes code.

Without the preload (or with it disabled, or passing every call through) nothing raises:
``is_active()`` is False, ``memory_stats()`` is ``{}``, ``memory_summary()`` says so in one line,
``empty_cache()`` and ``dump_report()`` return False. Only bad arguments raise (TypeError,
ValueError), and ``replay()`` raises ReplayError when ccreplay fails.
"""
import ctypes
import json
import os
import shutil
import subprocess
import tempfile

from . import _binding

__all__ = ['is_active', 'memory_stats', 'memory_summary', 'empty_cache', 'dump_report',
           'config_string', 'replay', 'ReplayError', 'library_path', 'loaded_library',
           'use_as_torch_allocator', 'NOT_ACTIVE']

_HERE = os.path.dirname(os.path.abspath(__file__))
_UINT64_MAX = (1 << 64) - 1

# What memory_summary() returns when there is nothing to summarise.
NOT_ACTIVE = ('libccinterpose is not active in this process '
              '(not preloaded, CCI_DISABLE=1, or passing every call through)\n')


class ReplayError(RuntimeError):
    """ccreplay could not be run, or refused the trace or the configuration."""


def _device_index(device):
    # An int, None (device 0, which the library counts from as CUDA does), or anything with an
    # integer `index` such as torch.device('cuda', 1). bool is refused: True is not a device.
    if device is None:
        return 0
    index = getattr(device, 'index', device)
    if index is None:
        return 0
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f'device must be an int or have an integer .index, not {device!r}')
    if index < 0:
        raise ValueError(f'device must be >= 0, not {index}')
    return index


def is_active():
    """True when libccinterpose is preloaded into this process and serving allocations."""
    api = _binding.lookup()
    return bool(api and api['cci_is_active']() == 1)


def memory_stats(device=0):
    """The allocator's statistics for `device` as a flat dict, sorted by key; {} when not active.

    Figures PyTorch also has carry PyTorch's names (``torch.cuda.memory_stats()``):
    ``allocated_bytes.all.current``, ``reserved_bytes.large_pool.peak``, ``num_alloc_retries``,
    ``num_ooms``, ``max_split_size`` (-1 when unlimited, as PyTorch reports it), ... The rest keep
    the C API's field names: ``largest_free_block``, ``device_capacity``, ``num_fence_*``,
    ``fence_*``, ``vmm_*`` (docs/usage-installed.md).
    """
    index = _device_index(device)
    api = _binding.lookup()
    if not api:
        return {}
    stats = _binding.Stats()
    stats.size, stats.version = ctypes.sizeof(stats), _binding.STATS_VERSION
    if api['cci_get_stats'](index, ctypes.byref(stats)) != 0:
        return {}
    out = {}
    for name in _binding.POOLED_STATS:
        per_pool = getattr(stats, name)
        for i, pool in enumerate(_binding.POOLS):
            for part in _binding.STAT_PARTS:
                out[f'{name}.{pool}.{part}'] = getattr(per_pool[i], part)
    for name in _binding.SINGLE_STATS:
        for part in _binding.STAT_PARTS:
            out[f'{name}.{part}'] = getattr(getattr(stats, name), part)
    # An older library fills fewer bytes (stats.size says how many): leave out what it lacks
    # rather than report zeros it never measured.
    for name in _binding.COUNTERS:
        field = getattr(_binding.Stats, name)
        if field.offset + field.size <= stats.size:
            out[name] = getattr(stats, name)
    for name, kind in _binding.LATER:
        field = getattr(_binding.Stats, name)
        if field.offset + field.size > stats.size:
            continue
        if kind == 'stat':
            for part in _binding.STAT_PARTS:
                out[f'{name}.{part}'] = getattr(getattr(stats, name), part)
        else:
            out[name] = getattr(stats, name)
    if out.get('max_split_size') == _UINT64_MAX:
        out['max_split_size'] = -1
    return dict(sorted(out.items()))


def memory_summary():
    """The library's text report now (every device it serves), or NOT_ACTIVE.

    The same printer as the exit report, from one snapshot, without the exit's what-if replays.
    """
    api = _binding.lookup()
    if not api or api['cci_is_active']() != 1:
        return NOT_ACTIVE
    fd, path = tempfile.mkstemp(prefix='ccinterpose-summary-', suffix='.txt')
    os.close(fd)
    try:
        # The library expands %p, %r, %h in a report path: a literal % must be doubled.
        if api['cci_dump_report'](os.fsencode(path.replace('%', '%%'))) != 0:
            return f'libccinterpose could not write its report to {path} (its reason is on stderr)\n'
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read()
    finally:
        os.unlink(path)


def empty_cache(device=0):
    """Gives `device`'s whole cached segments back to the driver. True when done."""
    index = _device_index(device)
    api = _binding.lookup()
    return bool(api and api['cci_empty_cache'](index) == 0)


def dump_report(path=None):
    """Writes the report to `path` (None: stderr). True when written.

    The format follows the extension (.json, .html, else text); %p, %r and %h in `path` are the
    pid, the rank and the host, as for CCI_REPORT.
    """
    api = _binding.lookup()
    if not api:
        return False
    arg = None if path is None else os.fsencode(os.fspath(path))
    return api['cci_dump_report'](arg) == 0


def config_string():
    """The effective allocator configuration in CCI_ALLOC_CONF grammar; '' when not active."""
    api = _binding.lookup()
    if not api:
        return ''
    return (api['cci_config_string']() or b'').decode('utf-8', 'replace')


def library_path():
    """The libccinterpose.so installed with this package, for LD_PRELOAD; None in a checkout."""
    path = os.path.join(_HERE, 'libccinterpose.so')
    return path if os.path.isfile(path) else None


def loaded_library():
    """The path of the libccinterpose.so preloaded into this process (from /proc/self/maps);
    None when none is loaded or the preload is not active."""
    if not is_active():
        return None
    try:
        with open('/proc/self/maps') as maps:
            for line in maps:
                fields = line.split(None, 5)  # the sixth, the path, is absent for anonymous maps
                path = fields[5].strip() if len(fields) == 6 else ''
                if os.path.basename(path) == 'libccinterpose.so':
                    return path
    except OSError:
        pass
    return None


def use_as_torch_allocator():
    """Makes PyTorch allocate through the preload's pluggable-allocator entry points, which get
    the stream of every allocation and free: frees are then stream-ordered, not fenced against
    every stream (docs/torch-streams.md). Call it before PyTorch's
    first CUDA allocation, in a process under the preload, without
    PYTORCH_NO_CUDA_MEMORY_CACHING. Tensor.record_stream reaches no pluggable allocator: code
    relying on it should keep the default. Returns False (and changes nothing) when the preload
    is not active; PyTorch's own error when it is too late to change the allocator."""
    lib = loaded_library()
    if not lib:
        return False
    import torch  # only here: the module itself needs no PyTorch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, 'cci_torch_alloc', 'cci_torch_free')
    torch.cuda.memory.change_current_allocator(alloc)
    return True


def _installed_program(name):
    # The copy installed inside the package (pip), else one on PATH (meson install, devenv).
    path = os.path.join(_HERE, 'bin', name)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return shutil.which(name)


def replay(trace, conf=None, capacity=None, timeout=None):
    """Replays a recorded trace (CCI_TRACE, or a PyTorch snapshot) offline under `conf`.

    Runs the installed ``ccreplay --json`` and returns its JSON object (peak reserved bytes,
    the allocation counts, ...). `capacity` is a simulated device size (bytes, or "80G").
    Raises ReplayError with ccreplay's own message when it fails.
    """
    ccreplay = _installed_program('ccreplay')
    if not ccreplay:
        raise ReplayError('ccreplay not found: install the package (pip install .) or put it on PATH')
    trace = os.fspath(trace)
    if trace.startswith('-'):
        trace = os.path.join('.', trace)  # a file name, never an option
    cmd = [ccreplay, '--json']
    if conf is not None:
        cmd += ['--conf', str(conf)]
    if capacity is not None:
        cmd += ['--capacity', str(capacity)]
    cmd.append(trace)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors='replace', timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReplayError(f'ccreplay: {e}') from None
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        raise ReplayError(lines[-1] if lines else f'ccreplay exited with status {r.returncode}')
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise ReplayError('ccreplay --json printed no JSON object') from None
