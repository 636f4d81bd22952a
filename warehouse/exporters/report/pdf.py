"""The SLA report as a PDF: the same HTML laid out by WeasyPrint, which renders HTML,
CSS and inline SVG to PDF without a browser."""

from __future__ import annotations

from warehouse.errors import ConfigError

__all__ = ["to_pdf"]


def to_pdf(document: str) -> bytes:
    """The PDF of an HTML report."""
    try:
        import weasyprint  # optional: the `pdf` extra, and the pango library it needs
    except (ImportError, OSError) as exc:
        raise ConfigError(
            "--format pdf needs WeasyPrint and the pango library: "
            f"pip install 'llm-sla-warehouse[pdf]' ({exc})"
        ) from None
    return weasyprint.HTML(string=document).write_pdf()
