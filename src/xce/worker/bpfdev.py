"""Device rules on cgroup v2: a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program that denies a run's cgroup the
device nodes it may not open (the GPUs it does not hold), and allows every other.

cgroup v2 has no ``devices.deny`` file; the kernel asks a BPF program attached to the cgroup instead
(Linux 4.15), as systemd and runc do.  No well-kept Python library loads one, and the program is a
handful of instructions, so it is written here, as systemd writes its own (``bpf-devices.c``): for each
denied node, compare the access's device type, major and minor, and answer 0 (deny) on a match; answer
1 (allow) at the end.  Loaded and attached with the ``bpf(2)`` system call (root); the cgroup holds the
program once attached, and frees it with the cgroup.

The rules are the v1 controller's (``c MAJOR:MINOR rwm``, from ``xce.worker.gpus.device_rules``): every
access to a denied node is refused, whatever its mode, as ``rwm`` says.
"""

from __future__ import annotations

import ctypes
import os
import struct

SYS_BPF = 321  # x86_64 (asm/unistd_64.h); the only architecture XCE's native parts are built for here
BPF_PROG_LOAD, BPF_PROG_ATTACH = 5, 8
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6  # the attach type
BPF_F_ALLOW_MULTI = 2  # beside programs a supervisor attached above (systemd's): each must allow
DEV_TYPE = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR

_libc = ctypes.CDLL(None, use_errno=True)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One ``struct bpf_insn``: opcode, dst and src registers (4 bits each), offset, immediate."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


LDX_W, AND_K, JNE_K, MOV_K, EXIT = 0x61, 0x57, 0x55, 0xB7, 0x95  # BPF_LDX|MEM|W, ALU64|AND|K, JMP|JNE|K...


def program(denied: list[tuple[int, int, int]]) -> bytes:
    """The instructions: r2 = the access's device type, r3 its major, r4 its minor (``struct
    bpf_cgroup_dev_ctx``: access_type, major, minor); each (type, major, minor) denied; else allowed."""
    code = [_insn(LDX_W, 2, 1, 0), _insn(AND_K, 2, imm=0xFFFF), _insn(LDX_W, 3, 1, 4), _insn(LDX_W, 4, 1, 8)]
    for kind, major, minor in denied:
        code += [_insn(JNE_K, 2, off=4, imm=kind), _insn(JNE_K, 3, off=3, imm=major), _insn(JNE_K, 4, off=2, imm=minor),
                 _insn(MOV_K, 0, imm=0), _insn(EXIT)]
    return b"".join(code + [_insn(MOV_K, 0, imm=1), _insn(EXIT)])


def parse_rules(rules: list[str]) -> list[tuple[int, int, int]]:
    """``c 195:3 rwm`` -> (2, 195, 3)."""
    out = []
    for rule in rules:
        kind, numbers, _ = rule.split()
        major, minor = numbers.split(":")
        out.append((DEV_TYPE[kind], int(major), int(minor)))
    return out


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(SYS_BPF, cmd, buf, len(attr))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return fd


def deny(cgroup_dir: str, rules: list[str]) -> None:
    """Attach to the v2 cgroup ``cgroup_dir`` a program denying the nodes of ``rules`` (OSError if the
    kernel will not: not root, no BPF cgroup support)."""
    if not rules:
        return
    insns = ctypes.create_string_buffer(program(parse_rules(rules)))
    license = ctypes.create_string_buffer(b"GPL")
    # union bpf_attr for BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
    # kern_version, prog_flags, prog_name[16], prog_ifindex, expected_attach_type
    load = struct.pack("<IIQQIIQII16sII", BPF_PROG_TYPE_CGROUP_DEVICE, (len(insns) - 1) // 8,
                       ctypes.addressof(insns), ctypes.addressof(license), 0, 0, 0, 0, 0, b"xce_devices", 0,
                       BPF_CGROUP_DEVICE)
    prog = _bpf(BPF_PROG_LOAD, load)
    try:
        cg = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # BPF_PROG_ATTACH: target_fd, attach_bpf_fd, attach_type, attach_flags
            _bpf(BPF_PROG_ATTACH, struct.pack("<IIII", cg, prog, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI))
        finally:
            os.close(cg)
    finally:
        os.close(prog)  # the cgroup holds it now

