"""restorelens.collector: see DESIGN.md section 3."""

__all__: list[str] = []
