"""Trace CSV I/O (``docs/spec/trace-format.md``): streaming reader, writer, chunk shapes."""

from agent.trace.model import CANONICAL_STAGES, TraceChunk, TraceMeta

__all__ = ["CANONICAL_STAGES", "TraceChunk", "TraceMeta"]
