"""gpuwarden: policy-as-code guardrails for GPU cloud spend."""

__version__ = "0.1.0"


def installed_version() -> str:
    """The installed package's version; `__version__` in a source tree never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuwarden")
    except PackageNotFoundError:
        return __version__
