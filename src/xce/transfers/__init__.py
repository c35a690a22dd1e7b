"""Data from where it lives: stage-in and stage-out from URLs and object stores, through rclone.

General layout (stdlib, and ``xce.units`` to write sizes; below the model: the
controller checks locations at submission, workers run the transfers):

- ``site``: the ``[transfers]`` configuration: public URL schemes, named remotes,
  the projects that may use each, and (daemons only) their credentials;
- ``locations``: what a user writes (path, URL, ``REMOTE:path``), resolved for a
  project or refused;
- ``rclone``: one transfer as an rclone child process, credentials in that
  child's environment only, bounded, with its exit code mapped to permanent or
  retryable errors.
"""

from xce.transfers.locations import Location, TransferRefused, kind_of, parse_canonical, populate_destination, \
    resolve, split_stage_in, split_stage_out
from xce.transfers.rclone import Outcome, Transfer, TransferSetupError, plan, run
from xce.transfers.site import Remote, TransferConfigError, TransferSite, load_daemon_site, parse_site

__all__ = [
    "Location", "Outcome", "Remote", "Transfer", "TransferConfigError", "TransferRefused", "TransferSetupError",
    "TransferSite", "kind_of", "load_daemon_site", "parse_canonical", "parse_site", "plan", "populate_destination",
    "resolve", "run", "split_stage_in", "split_stage_out",
]
