"""Storage providers: the exec contract claim agents speak, its runner, and ``simfs``.

General layout (one job per module):

- ``contract``  the request and reply documents as data, their validation,
                error codes and ``ContractError`` (the package's only exception); pure
- ``runner``    ``run_provider``: spawn a provider (``posix_spawn``), one batch
                in, one reply per request out, whatever the provider does
- ``btrfs``     the first real provider: a btrfs subvolume per claim, qgroup
                limits, snapshots, clones and online growth
- ``simfs``     the simulated storage provider shipped with XCE and the
                contract's reference implementation; also a fault-injection CLI

This file stays import-light: ``python -m xce.providers.simfs`` is started
once per batch and imports it, so the public names below are loaded on first
use rather than here.  ``docs/providers.md`` is the contract's text.
"""

__all__ = [
    "ACCESS_MODES",
    "CAPABILITY_FLAGS",
    "CONTRACT_VERSION",
    "ContractError",
    "ErrorCode",
    "OPS",
    "ProviderReply",
    "ProviderRequest",
    "check_reply",
    "decode_reply_document",
    "encode_request_document",
    "owner_tags",
    "reply_document",
    "reply_error",
    "reply_ok",
    "request_document",
    "run_provider",
]

_HOME = {name: "contract" for name in __all__}
_HOME["run_provider"] = "runner"


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'xce.providers' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"xce.providers.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
