"""With pytest-html: heatmaps embedded in failing tests, the family's tables on top of
the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_torch.ci.report_tables import gather

#: the name the report's hooks are registered under
PLUGIN_NAME = "torch_ci_html"


def embed_pictures(report: pytest.TestReport, pictures: list[Path]) -> None:
    """The PNGs as images among the report's pytest-html extras."""
    import base64

    from pytest_html import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
        extras as html_extras,
    )

    added = list(getattr(report, "extras", []))
    for picture in pictures:
        encoded = base64.b64encode(picture.read_bytes()).decode("ascii")
        added.append(html_extras.png(encoded, picture.stem))
    report.extras = added  # type: ignore[attr-defined]


class HtmlReport:
    """The family's end-of-run tables (and a note per one that failed) in the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        import html

        tables, notes = gather(self.config)
        for title, table in tables.items():
            text = html.escape("\n".join(table))
            prefix.append(f"<h2>pytest-torch: {html.escape(title)}</h2><pre>{text}</pre>")
        for note in notes:
            prefix.append(f"<p>pytest-torch-ci: {html.escape(note)}</p>")
