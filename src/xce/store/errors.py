"""Store errors.

    StoreError               base; the store could not do what was asked
    ├── StaleEpoch           an append or lease call carried an epoch that is no longer current;
    │                        nothing was written (the caller has been deposed)
    ├── PositionConflict     an append's positions do not continue the log; nothing was written
    ├── LeaseLost            a renew found another holder (or a newer epoch) on the lease
    └── StoreUnavailable     the backend failed (I/O error, connection lost); the batch may
                             or may not be durable, so the caller must re-read the log

The controller translates all of these into ``xce.errors.Unavailable``.
"""


class StoreError(Exception):
    pass


class StaleEpoch(StoreError):
    pass


class PositionConflict(StoreError):
    pass


class LeaseLost(StoreError):
    pass


class StoreUnavailable(StoreError):
    pass
