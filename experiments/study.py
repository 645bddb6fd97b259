"""The MoFlux study's table, scored from a span store: per run, then the study's gates over seeds.

The scoring itself lives in ``restorelens.analysis.study`` (the runs, the gates H1-H3, the
frontier and its dominance, all nearest-rank), so that ``restorelens experiment`` and the
dashboard's policy page score a store with the same code; this module keeps the names the
experiment commands and their tests import.
"""

from __future__ import annotations

from restorelens.analysis.study import (FRONTIER_AXES, GATES, RUN_COLUMNS, STUDY_ARMS, Gate, StudyTable, score,
                                        score_frames, table_cell)

__all__ = ["FRONTIER_AXES", "GATES", "RUN_COLUMNS", "STUDY_ARMS", "Gate", "StudyTable", "score", "score_frames",
           "table_cell"]
