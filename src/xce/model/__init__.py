"""Facts and the model they fold into.  Pure: no I/O, no clocks (times come in facts)."""

from xce.model.facts import Fact, decode, encode
from xce.model.state import Model

__all__ = ["Fact", "Model", "decode", "encode"]
