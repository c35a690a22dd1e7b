"""The worker daemon (``xce worker``): one per host; runs jobs in sandboxes, reports to the controller."""
