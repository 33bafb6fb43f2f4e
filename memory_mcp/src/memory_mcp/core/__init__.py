"""Infrastructure shared by every component: settings, metrics, logs, database preparation and the
embedding backends' table. Server, operator and embedder import it without importing the command line."""

from importlib.metadata import PackageNotFoundError, version

# The distribution every image installs (the CLI and this package); the version all components report.
DISTRIBUTION = "memory-mcp-core"


def package_version() -> str:
    """The installed version, or ``0+unknown`` when run from a tree that was never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
