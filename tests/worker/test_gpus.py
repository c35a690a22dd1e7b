"""A worker's GPUs (``xce.worker.gpus``): the two device sources behind one interface, what a run is told
of its GPUs, and the devices cgroup's rules for the GPUs it does not hold."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from xce.worker import gpus
from xce.worker.gpus import ConfiguredDevices, Gpu, GpuConfigError, NvmlDevices, device_rules, parse_ids


def test_configured_ids_as_given():
    assert parse_ids("0,1,2,3") == parse_ids("0-3") == parse_ids("3,0-2") == [0, 1, 2, 3]
    assert parse_ids("none") == []
    for bad in ("a", "1,1", "3-1", "-1", "2000"):
        with pytest.raises(GpuConfigError):
            parse_ids(bad)


def test_configured_devices_are_fake_but_stable():
    a, b = ConfiguredDevices("host1", [0, 1]).devices(), ConfiguredDevices("host1", [0, 1]).devices()
    assert a == b and [g.id for g in a] == [0, 1] and a[0].uuid != a[1].uuid
    assert a[0].uuid != ConfiguredDevices("host2", [0]).devices()[0].uuid  # unique across hosts
    assert all(g.uuid.startswith("GPU-") and g.minor is None and g.model == gpus.FAKE_MODEL for g in a)
    assert gpus.source_for("host1", "none") is None
    assert isinstance(gpus.source_for("host1", "0-1"), ConfiguredDevices)


class FakeNvml:
    """What ``NvmlDevices`` calls of pynvml, answering for two GPUs (no GPU on this machine)."""

    def __init__(self) -> None:
        self.open = 0
        self.modes: dict[int, int] = {}

    def nvmlInit(self):
        self.open += 1

    def nvmlShutdown(self):
        self.open -= 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3" if h == 0 else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}-aaaa"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30, free=1, used=0)

    def nvmlDeviceGetMinorNumber(self, h):
        return 7 - h

    NVML_COMPUTEMODE_DEFAULT, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 0, 3  # (pynvml's values)

    def nvmlDeviceSetComputeMode(self, h, mode):
        assert self.open == 1
        self.modes[h] = mode


def test_nvml_devices_read_each_gpu_and_close_the_library():
    nvml = FakeNvml()
    found = NvmlDevices(nvml).devices()
    assert found == [Gpu(0, "GPU-00000000-aaaa", "NVIDIA H100 80GB HBM3", 80 * 2**30, 7),
                     Gpu(1, "GPU-00000001-aaaa", "NVIDIA H100 80GB HBM3", 80 * 2**30, 6)]
    assert nvml.open == 0
    assert found[0].as_json() == {"id": 0, "uuid": "GPU-00000000-aaaa", "model": "NVIDIA H100 80GB HBM3",
                                  "memory": 80 * 2**30}


def test_a_run_sees_only_its_gpus():
    env = gpus.job_env([{"id": 2, "uuid": "GPU-b"}, {"id": 3, "uuid": "GPU-c"}])
    assert env == {"CUDA_VISIBLE_DEVICES": "2,3", "NVIDIA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                   "XCE_GPUS": "2,3", "XCE_GPU_UUIDS": "GPU-b,GPU-c"}
    assert gpus.job_env([]) == {}


def test_device_rules_deny_the_other_gpus_nodes_where_they_exist():
    devices = [Gpu(i, f"GPU-{i}", "A100", 1, minor=i) for i in range(4)] + [Gpu(9, "GPU-fake", "fake", 1)]
    nodes = {f"/dev/nvidia{i}": os.makedev(195, i) for i in (0, 1, 2)}  # /dev/nvidia3 absent

    def fake_stat(path):
        if path not in nodes:
            raise FileNotFoundError(path)
        return SimpleNamespace(st_mode=stat.S_IFCHR | 0o666, st_rdev=nodes[path])

    assert device_rules(devices, [1], fake_stat) == ["c 195:0 rwm", "c 195:2 rwm"]
    assert device_rules(devices, None, fake_stat) == ["c 195:0 rwm", "c 195:1 rwm", "c 195:2 rwm"]
    assert device_rules(devices, [0, 1, 2, 3], fake_stat) == []


def test_exclusive_process_is_set_through_nvml_and_given_back():
    nvml = FakeNvml()
    NvmlDevices(nvml).set_compute_mode([1], gpus.EXCLUSIVE_PROCESS)
    assert nvml.modes == {1: 3} and nvml.open == 0
    NvmlDevices(nvml).set_compute_mode([1], gpus.DEFAULT_MODE)
    assert nvml.modes == {1: 0}


def test_fake_devices_record_their_compute_mode(tmp_path):
    fake = ConfiguredDevices("host1", [0, 1], record=str(tmp_path / "gpus"))
    fake.set_compute_mode([1], gpus.EXCLUSIVE_PROCESS)
    assert fake.modes == {1: "exclusive_process"}
    assert (tmp_path / "gpus" / "gpu1.compute_mode").read_text() == "exclusive_process\n"
    with pytest.raises(gpus.GpuConfigError):
        fake.set_compute_mode([7], gpus.EXCLUSIVE_PROCESS)
