"""The GPUs of this process: ``is_available``, ``cuda_devices`` (one ``CudaDevice`` each), and
the simulated GPU (``blu.cuda.fake.FakeDevice``) that stands in for them under
``BLU_FAKE_GPU=1`` (``blu.cuda.device.fake_gpu``). Loads no CUDA library until called.
"""

from __future__ import annotations

import functools
import threading

from blu.cuda import driver
from blu.cuda.device import CudaDevice, fake_gpu
from blu.cuda.fake import FakeDevice

__all__ = ["cuda_devices", "fake_gpu_device", "is_available"]


@functools.cache
def is_available() -> bool:
    """True when cuda-python, an NVIDIA driver and at least one GPU are present (never raises)."""
    if fake_gpu():
        return True
    try:
        return driver.device_count() > 0
    except Exception:  # noqa: BLE001 - missing package, missing driver, no device: all False
        return False


_devices: list[CudaDevice] | None = None
_devices_lock = threading.Lock()


def cuda_devices() -> list[CudaDevice]:
    """Every GPU as a ``CudaDevice`` (an empty list without a usable GPU)."""
    global _devices
    if fake_gpu():
        return [fake_gpu_device()]  # type: ignore[list-item]
    if _devices is None:
        with _devices_lock:
            if _devices is None:
                if not is_available():
                    return []
                _devices = [CudaDevice(i) for i in range(driver.device_count())]
    return _devices


_fake_device: FakeDevice | None = None


def fake_gpu_device() -> FakeDevice:
    """The one simulated GPU of ``BLU_FAKE_GPU=1`` (made on first use)."""
    global _fake_device
    if _fake_device is None:
        _fake_device = FakeDevice(0, capacity=64 << 30)
    return _fake_device
