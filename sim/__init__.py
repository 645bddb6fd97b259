"""restorelens.sim: see DESIGN.md section 3."""

__all__: list[str] = []
