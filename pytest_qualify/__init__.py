"""pytest-qualify: decide, with evidence, whether one exact vLLM deployment may be promoted."""

__version__ = "0.1.0"
