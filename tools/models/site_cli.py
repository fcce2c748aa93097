"""`strata models quantize MODEL --calibration ... --held-out ...`: the command around
tools/models/site_int8.py. Exit status 0 when the INT8 model agreed and was written, 3 when
the quantizer refused it (the report says the figure), 2 for a usage or install error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REFUSED = 3


def _model_and_repo(
    args: argparse.Namespace, repo_of: Callable[[argparse.Namespace], Any]
) -> tuple[str, Any]:
    """A model folder (with its manifest) names its repository; else -r / config."""
    from strata.shared.models.manifest import MANIFEST_FILE
    from strata.shared.models.repository import ModelRepository

    folder = Path(args.name)
    if (folder / MANIFEST_FILE).is_file():
        return folder.resolve().name, ModelRepository(folder.resolve().parent)
    return args.name, repo_of(args)


def run_site_quantize(
    args: argparse.Namespace,
    repo_of: Callable[[argparse.Namespace], Any],
    target_of: Callable[[argparse.Namespace, Any], Any],
) -> int:
    """Quantize on the site's frames; print the report; refuse below the threshold."""
    from strata.shared.models.repository import ModelError
    from strata.tools.models.int8_engines import EngineUnavailableError
    from strata.tools.models.site_int8 import (
        QuantizeRefusedError,
        SiteQuantizeReport,
        SiteQuantizeRequest,
        quantize_for_site,
    )

    name, repo = _model_and_repo(args, repo_of)
    target = target_of(args, repo)
    req = SiteQuantizeRequest(
        model=name,
        calibration=tuple(args.calibration or ()),
        held_out=tuple(args.held_out or ()),
        engine=args.engine,
        threshold=args.threshold,
        calibration_frames=args.calibration_frames,
        held_out_frames=args.held_out_frames,
        score=args.score,
        threads=args.threads,
        timing_runs=args.runs,
        variant="" if args.variant == "int8" else args.variant,
    )
    report: SiteQuantizeReport
    try:
        report = quantize_for_site(repo, req, into=target)
        status = 0
    except QuantizeRefusedError as exc:
        report, status = exc.report, REFUSED
        print(f"strata models quantize: {exc}", file=sys.stderr)
    except (EngineUnavailableError, ModelError, FileNotFoundError, ValueError) as exc:
        print(f"strata models quantize: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    if args.report:
        args.report.write_text(report.to_json() + "\n")
        print(f"  report        {args.report}")
    return status
