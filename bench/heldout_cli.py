"""The command line the held-out set converters share: ``build SOURCE -o FILE [--any-version]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

Built = TypeVar("Built")


def build_main(
    argv: list[str] | None,
    *,
    prog: str,
    doc: str | None,
    source: str,
    build: Callable[..., Built],
    refused: type[Exception],
    describe: Callable[[Path, Built], str],
) -> int:
    """Parse ``argv``, run ``build(source, output, any_version=...)``, print ``describe``'s line;
    a ``refused`` error (another version of the data, a wrong shape) is one line and exit 2."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the LoCoMo-format file of the held-out set")
    make.add_argument("source", type=Path, help=source)
    make.add_argument("-o", "--output", type=Path, required=True)
    make.add_argument(
        "--any-version", action="store_true", help="skip the sha256 check (for the tests' synthetic source)"
    )
    args = parser.parse_args(argv)
    try:
        built = build(args.source, args.output, any_version=args.any_version)
    except refused as e:
        print(f"{prog.removeprefix('python -m ')}: {e}", file=sys.stderr)
        return 2
    print(describe(args.output, built))
    return 0
