"""The evidence in the repository: the rows every published verdict and reduced figure is
computed from, compacted, with their provenance. A folder per preset laid out like a store,
so every reader of stores reads it too (`icl regenerate <sweep> --storage evidence/reduced`
redraws the figures):

    evidence/<preset>/<sweep>/<study>/rows/rows.parquet   the rows, only the columns read
    evidence/<preset>/<sweep>/<study>/study.json          the study's manifest (from the run)
    evidence/<preset>/<sweep>/<study>/provenance.json     commit, preset, device, seeds, time

Commit a study's evidence from a finished store (any --storage a run wrote):

    icl evidence --from results --preset reduced algoformer/loops   (icl.commands.evidence)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Collection
from pathlib import Path

import polars as pl

from analysis.reading.store import EVIDENCE_FILE, read_rows
from icl_core.common.validation import ConfigError

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"  # the source tree's folder
# columns no claim or figure reads: provenance that is kept once per study (provenance.json)
# or names a machine
DROPPED = ("config_json", "hostname", "python_version", "numpy_version", "polars_version",
           "optuna_version", "ray_version", "finished_at", "code_version", "threads",
           "matmul_peak_flops", "peak_memory_kind")  # device_name, torch_version kept: a
# merge's provenance names each member's device from its rows
BUDGET_MB = 25.0  # all evidence in git together


def study_dir(preset: str, sweep: str, study: str, root: Path | None = None) -> Path:
    return (root or EVIDENCE) / preset / sweep / study


def _files(preset: str, sweep: str, study: str, root: Path | None) -> list[Path]:
    return sorted((study_dir(preset, sweep, study, root) / "rows").glob("*.parquet"))


def committed(preset: str, sweep: str, study: str, root: Path | None = None) -> bool:
    """Is a study's evidence committed (without reading it)?"""
    return bool(_files(preset, sweep, study, root))


def load(preset: str, sweep: str, study: str, root: Path | None = None) -> pl.DataFrame | None:
    """A study's committed rows, or None when its evidence is not (yet) committed."""
    files = _files(preset, sweep, study, root)
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed") if files else None


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, cwd=EVIDENCE.parent, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _by_device(members: pl.DataFrame) -> dict:
    """Members per device name (a member without one: its device type), where a study's
    members ran on more than one device."""
    names = [pl.col(c) for c in ("device_name", "device_type", "device") if c in members.columns]
    if not names:
        return {}
    name = pl.coalesce(*names).cast(pl.Utf8).fill_null("unknown").alias("name")
    counts = members.group_by(name).len()
    if counts.height < 2:
        return {}
    return {"members_by_device": dict(sorted(counts.iter_rows()))}


def provenance(rows: pl.DataFrame, preset: str, code_version: str | None = None,
               earlier: dict | None = None) -> dict:
    """`earlier`: the provenance of evidence merged with `rows`, for the members whose rows lack
    device_name or torch_version (evidence written before it kept them): its value follows,
    "<these rows' values>; earlier <its value>"."""
    model = rows.filter(pl.col("predictor") == "model")
    members = model.unique("config_hash")

    def first(col, also=None):  # one value, or every value joined by "+" where members differ
        values = sorted(members[col].drop_nulls().cast(pl.Utf8).unique().to_list()) \
            if col in members.columns else []
        joined = "+".join(values) or None
        if also and (col not in members.columns or members[col].null_count() > 0):
            return f"{joined}; earlier {also}" if joined else also  # the earlier evidence's
        return joined

    wall = members["wall_time_s"].sum() if "wall_time_s" in members.columns else None
    return {"preset": preset, "commit": code_version or _commit(),
            "device": first("device_type") or first("device"),
            "device_name": first("device_name", (earlier or {}).get("device_name")),
            "dtype": first("dtype"), "torch": first("torch_version", (earlier or {}).get("torch")),
            "members": members.height, **_by_device(members), "seeds": sorted(members["seed"].drop_nulls().unique().to_list()),
            "statuses": dict(sorted(members.group_by("status").len().iter_rows())),
            "member_wall_time_s": round(float(wall), 1) if wall is not None else None,
            "rows": rows.height}


CPU_NAME = re.compile(r"x86_64|amd64|AMD64|i[3-6]86|aarch64|arm64|arm|ppc64le|s390x")


def _named(kept: pl.DataFrame, earlier: dict) -> pl.DataFrame:
    """Evidence rows written before evidence kept device_name: named from their provenance
    where its names tell the device types apart (one CPU name, one GPU name at most)."""
    if "device_name" in kept.columns and kept["device_name"].null_count() == 0:
        return kept
    names = set(earlier.get("members_by_device") or {}) or \
        set((earlier.get("device_name") or "").split("+")) - {""}
    cpu = {n for n in names if n == "cpu" or CPU_NAME.fullmatch(n)}  # platform.processor()
    by_type = {"cpu": cpu, "cuda": names - cpu}
    if "device_type" not in kept.columns or any(
            len(by_type.get(t, ())) != 1 for t in kept["device_type"].drop_nulls().unique()):
        return kept  # not told apart: the provenance joins the earlier names instead
    by_type = {t: next(iter(n)) for t, n in by_type.items() if len(n) == 1}
    named = pl.col("device_type").replace_strict(by_type, default=None, return_dtype=pl.Utf8)
    return kept.with_columns((pl.col("device_name").fill_null(named)
                              if "device_name" in kept.columns else named).alias("device_name"))


def draws_of(rows: pl.DataFrame) -> set[str]:
    """How a frame's members drew their training batches (train.draws); rows from before the
    field drew from the generator."""
    if "train.draws" not in rows.columns:
        return {"generator"}
    return set(rows["train.draws"].fill_null("generator").unique().to_list())


def _at_preset(rows: pl.DataFrame, members: Callable[[int], Collection[str] | None],
               preset: str, sweep: str, study: str) -> tuple[pl.DataFrame, int]:
    """The rows of the study's members at `preset` (seeds 0..the rows' largest), and how many
    members of the store are not among them (a store shared with another preset's run or a
    --set run); ConfigError when none is."""
    seeds = rows["seed"].drop_nulls()
    ours = members(int(seeds.max()) + 1 if seeds.len() else 1)
    if ours is None:  # no plan to check against: more seeds than a grid plans
        return rows, 0
    ours = set(ours)
    inside = pl.col("config_hash").is_in(list(ours))
    stray = rows.filter(~inside)["config_hash"].n_unique()
    if stray and stray == rows["config_hash"].n_unique():
        raise ConfigError(f"{sweep}/{study}: none of the store's {stray} members is one of the "
                          f"study's at preset {preset!r} (another preset's rows, or a --set "
                          "run's): --preset names the preset the store was run at")
    return rows.filter(inside), stray


def _incoming(storage: str, preset: str, sweep: str, study: str,
              members: Callable[[int], Collection[str] | None] | None, root: Path | None,
              merge: bool) -> tuple[pl.DataFrame, int, pl.DataFrame | None]:
    """What `check` and `compact` both read: the store's rows of the study's members at the
    preset, how many others it holds, and with `merge` the committed rows (None without them);
    ConfigError where the store's rows are refused (none at the preset; a merge of another
    random stream), MissingResults where the store has none."""
    rows, _ = read_rows(storage, sweep, study)
    stray = 0
    if members is not None:
        rows, stray = _at_preset(rows, members, preset, sweep, study)
    before = load(preset, sweep, study, root) if merge else None
    if before is not None:
        _same_stream(rows, before, sweep, study)
    return rows, stray, before


def check(storage: str, preset: str, sweep: str, study: str,
          members: Callable[[int], Collection[str] | None] | None, root: Path | None = None,
          merge: bool = False) -> int:
    """What `compact(..., members=members, merge=merge)` would leave out of the store's rows
    for the study (members not at the preset), writing nothing; its refusals as `_incoming`'s."""
    return _incoming(storage, preset, sweep, study, members, root, merge)[1]


def _same_stream(rows: pl.DataFrame, before: pl.DataFrame, sweep: str, study: str) -> None:
    ours, theirs = draws_of(rows), draws_of(before)
    if ours != theirs:
        raise ConfigError(
            f"{sweep}/{study}: the store's members draw their batches by "
            f"{'/'.join(sorted(ours))}, the committed evidence's by "
            f"{'/'.join(sorted(theirs))}: another random stream, not more seeds of the same "
            "one; --merge refused (without --merge the store's rows replace the evidence)")


def compact(storage: str, preset: str, sweep: str, study: str, root: Path | None = None,
            scale: str | None = None, merge: bool = False,
            members: Callable[[int], Collection[str] | None] | None = None) -> Path:
    """Copy one study's rows from a store into the evidence folder, compacted; returns the
    study's evidence folder. `scale` (e.g. "reduced: d = 3, N = 10, 4000 steps, 3 seeds") is
    kept as the rows' `scale` column, which every figure's title shows (a merge without one keeps
    the committed evidence's, its provenance's or its rows' one, for every row). `members(n)`:
    the config hashes of the study's members at `preset` with seeds 0..n-1; the store's other
    members are left out (a store another preset's run shared), counted in the provenance's
    `left_out`.
    With `merge`, the members already in evidence that the store does not hold are kept beside
    its rows (a window that ran only new seeds), and so are those the store holds only as
    failed (a window's out-of-memory or crash does not displace a finished member); provenance
    then names the earlier commits too. Raises MissingResults when the store has no rows for
    it."""
    rows, stray, before = _incoming(storage, preset, sweep, study, members, root, merge)
    left_out = {"not_at_preset": stray} if stray else {}
    earlier = json.loads((study_dir(preset, sweep, study, root) / "provenance.json").read_text()) \
        if before is not None else None
    if not scale and before is not None:  # a merge keeps the committed scale's words
        held = before["scale"].drop_nulls().unique() if "scale" in before.columns else []
        scale = (earlier or {}).get("scale") or (held[0] if len(held) == 1 else None)
    if scale:  # every row's, the kept ones' too: one scale, not the earlier rows' beside nulls
        rows = rows.with_columns(pl.lit(scale).alias("scale"))
    code = rows["code_version"].drop_nulls()[0] if "code_version" in rows.columns and \
        rows["code_version"].drop_nulls().len() else None
    keep = [c for c in rows.columns if c not in DROPPED]
    merged_from = []
    if before is not None:
        if scale:
            before = before.with_columns(pl.lit(scale).alias("scale"))
        failed = set(rows.filter(pl.col("status") == "failed")["config_hash"].to_list()) & set(
            before.filter(pl.col("status") != "failed")["config_hash"].to_list())
        if failed:  # the committed member stays; the store's failure of it is left out
            rows = rows.filter(~pl.col("config_hash").is_in(list(failed)))
            left_out["failed_where_committed"] = len(failed)
        kept = _named(before.filter(
            ~pl.col("config_hash").is_in(rows["config_hash"].unique().to_list())), earlier)
        rows = pl.concat([kept, rows.select(keep)], how="diagonal_relaxed")
        keep = rows.columns
        merged_from = sorted({earlier["commit"], *earlier.get("merged_from", [])})
    prov = {**provenance(rows, preset, code, earlier), **({"scale": scale} if scale else {}),
            **({"merged_from": merged_from} if merged_from else {}),
            **({"left_out": left_out} if left_out else {})}
    out = study_dir(preset, sweep, study, root)
    if out.exists():
        shutil.rmtree(out)
    (out / "rows").mkdir(parents=True)
    rows.select(keep).write_parquet(out / "rows" / EVIDENCE_FILE, compression="zstd",
                                    compression_level=19)
    manifest = Path(storage) / sweep / study / "study.json"
    if manifest.exists():
        shutil.copy(manifest, out / "study.json")
    (out / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
    return out


def size_mb(root: Path | None = None) -> float:
    base = root or EVIDENCE
    return sum(f.stat().st_size for f in base.rglob("*") if f.is_file()) / 2 ** 20


if __name__ == "__main__":  # the command moved to the face: `icl evidence`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.claims.evidence")
