"""Config of the model repository (`strata models`)."""

from __future__ import annotations

from pydantic import Field

from .base import StrictModel


class ModelsConfig(StrictModel):
    """Where models are found."""

    repository: str = Field(
        "",
        description="Model repository folder; empty: the starter repository shipped with strata.",
    )
