"""llm-sla-warehouse: a ClickHouse-backed warehouse for LLM inference SLA metrics.

``warehouse.connect(url)`` opens a store and returns a :class:`Warehouse`.
"""

from __future__ import annotations

from warehouse.api import Warehouse, connect

__all__ = ["Warehouse", "connect"]
__version__ = "0.1.0"
