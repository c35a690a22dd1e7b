"""The scheduler: a pure function from an immutable snapshot to a plan."""
