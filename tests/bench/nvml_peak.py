#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peak device memory of this process as NVML sees it, sampled by a thread (ddp_encoder.py).

Why: PyTorch's max_memory_reserved() counts its own cache only, while under the preload (PyTorch's
cache off) our reserved figure also holds what NCCL, cuBLAS and the rest ask through cudaMalloc.
NVML counts everything the driver gave the process, whoever asked, in every configuration alike.

libnvidia-ml.so.1 is read through ctypes (no Python package needed). Per sample: this process's
usedGpuMemory from the device's compute-process list; when the list does not show our pid (a
container's pid namespace hides it) and holds exactly one process, that one; otherwise the
device's used memory (nvmlDeviceGetMemoryInfo), which also counts other processes and the driver's
own share. The source used is reported with the figure. Peaks between two samples (about 2 ms
apart) are missed. Anything missing or failing gives a null figure and a reason, never an error.
"""
import ctypes
import os
import threading
import time

NVML_SUCCESS = 0
NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1   # usedGpuMemory when the driver cannot tell
MAX_PROCESSES = 64


class ProcessInfoV2(ctypes.Structure):
    """nvmlProcessInfo_v2_t: the layout nvmlDeviceGetComputeRunningProcesses_v2 fills."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: the older unversioned entry point's layout."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def pick_process_memory(entries, pid):
    """(bytes, source) from a compute-process list [(pid, used bytes or None)], or (None, why)."""
    known = [(p, b) for p, b in entries if b is not None]
    for p, b in known:
        if p == pid:
            return b, "process"
    if len(entries) == 1 and known:
        return known[0][1], "only process"
    return None, f"pid {pid} not among {len(entries)} process(es)"


class Device:
    """One NVML device handle and the two ways to read its memory; open() returns (Device, None)
    or (None, reason)."""

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle
        self.procs = None
        for name, struct in (("nvmlDeviceGetComputeRunningProcesses_v2", ProcessInfoV2),
                             ("nvmlDeviceGetComputeRunningProcesses", ProcessInfoV1)):
            fn = getattr(lib, name, None)
            if fn is not None:
                self.procs, self.struct = fn, struct
                break

    @classmethod
    def open(cls, uuid=None, pci_bus_id=None, index=None):
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            return None, f"libnvidia-ml.so.1 not loadable ({e})"
        try:
            init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
            if init() != NVML_SUCCESS:
                return None, "nvmlInit failed"
            handle = ctypes.c_void_p()
            tries = []
            if uuid:
                tries.append(("nvmlDeviceGetHandleByUUID", uuid.encode()))
            if pci_bus_id:
                tries.append(("nvmlDeviceGetHandleByPciBusId_v2", pci_bus_id.encode()))
            if index is not None:
                tries.append(("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index)))
            for name, key in tries:
                fn = getattr(lib, name, None)
                if fn is not None and fn(key, ctypes.byref(handle)) == NVML_SUCCESS:
                    return cls(lib, handle), None
            return None, "no NVML handle for this device (" + ", ".join(t[0] for t in tries) + " failed)"
        except (AttributeError, OSError) as e:
            return None, f"NVML: {e}"

    def process_list(self):
        """[(pid, bytes or None)], or None when the call is missing or fails."""
        if self.procs is None:
            return None
        count = ctypes.c_uint(MAX_PROCESSES)
        infos = (self.struct * MAX_PROCESSES)()
        rc = self.procs(self.handle, ctypes.byref(count), infos)
        if rc != NVML_SUCCESS:
            return None   # also when more than 64 processes share the GPU: not a case we measure
        return [(i.pid, None if i.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE else i.usedGpuMemory)
                for i in infos[:count.value]]

    def device_used(self):
        m = Memory()
        return m.used if self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(m)) == NVML_SUCCESS else None

    def reader(self, pid):
        """A function returning (bytes, source) for one sample: the process figure when NVML gives
        one for us, else the device's used memory, else (None, reason)."""
        def read():
            entries = self.process_list()
            if entries is not None:
                b, source = pick_process_memory(entries, pid)
                if b is not None:
                    return b, source
            used = self.device_used()
            return (used, "device") if used is not None else (None, "NVML returned no memory figure")
        return read


class PeakSampler:
    """Calls read() every interval_s on a daemon thread and keeps the largest figure. read returns
    (bytes or None, source); an exception or a None stops nothing, it is only counted."""

    def __init__(self, read, interval_s=0.002):
        self.read, self.interval_s = read, interval_s
        self.peak, self.sources, self.samples, self.misses, self.why = None, set(), 0, 0, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-peak", daemon=True)

    def _sample(self):
        try:
            b, source = self.read()
        except Exception as e:  # noqa: BLE001  (a monitor must never take the measured program down)
            b, source = None, f"{type(e).__name__}: {e}"
        if b is None:
            self.misses += 1
            self.why = source
            return
        self.samples += 1
        self.sources.add(source)
        if self.peak is None or b > self.peak:
            self.peak = b

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        """Stops the thread, takes one last sample, and returns the figures as a dict."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        return {"nvml_peak_mib": None if self.peak is None else round(self.peak / (1 << 20), 1),
                "nvml_source": "/".join(sorted(self.sources)) or None, "nvml_samples": self.samples,
                "nvml_error": None if self.peak is not None else (self.why or "no sample")}


class Unavailable:
    """Stands in for a PeakSampler when NVML cannot be opened: the figure is null, with why."""

    def __init__(self, why):
        self.why = why

    def start(self):
        return self

    def stop(self):
        return {"nvml_peak_mib": None, "nvml_source": None, "nvml_samples": 0, "nvml_error": self.why}


def sampler_for_torch_device(device_index, interval_s=None):
    """A started sampler for torch's CUDA device device_index (found by UUID, else PCI bus id,
    else CUDA_VISIBLE_DEVICES' index). CCI_NVML_INTERVAL_MS overrides the 2 ms period."""
    if interval_s is None:
        try:
            interval_s = float(os.environ.get("CCI_NVML_INTERVAL_MS", "2")) / 1000
        except ValueError:
            interval_s = 0.002
    uuid = pci = index = None
    try:
        import torch
        props = torch.cuda.get_device_properties(device_index)
        u = getattr(props, "uuid", None)
        if u is not None:
            uuid = str(u) if str(u).startswith(("GPU-", "MIG-")) else f"GPU-{u}"
        if hasattr(props, "pci_bus_id"):
            pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001  (no torch, or an older one: fall back to the index)
        pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        index = device_index
    else:
        parts = [p.strip() for p in visible.split(",")]
        if device_index < len(parts) and parts[device_index].isdigit():
            index = int(parts[device_index])
    dev, why = Device.open(uuid=uuid, pci_bus_id=pci, index=index)
    if dev is None:
        return Unavailable(why).start()
    return PeakSampler(dev.reader(os.getpid()), interval_s).start()
