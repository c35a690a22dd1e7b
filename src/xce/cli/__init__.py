"""The ``xce`` command (alias ``xcecli``).  It speaks only REST to the controller."""
