"""The ways in: a sweep file's Sweep (sweep) and adaptive studies (adaptive), its command line
(cli), the Python API (api) and what it returns (outcome), the `icl` console command (console),
every sweep file by name (catalog), checks of the command line's places before anything starts
(preflight), the plan --dry-run prints (plan_cost), `icl levels` (levels), regeneration from the
sweep files (regenerate_from_sweeps).

May import every layer below; nothing below imports it.
"""
