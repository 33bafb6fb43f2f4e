"""The ``memory-mcp`` command line: serve, apply, migrate, backfill, operator, embedder."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memory_mcp import (
    admin_commands,
    audit_cli,
    demo_command,
    oauth_commands,
    review_cli,
    transfer_commands,
    webhook_cli,
)
from memory_mcp.cli_errors import OneLineErrors
from memory_mcp.core.settings import Settings
from memory_mcp.options import (
    DatabaseUrl,
    DataDir,
    console,
    database_settings,
    fail,
    load_settings,
    new_data_dir,
    plain_help,
    read_input,
)

if TYPE_CHECKING:
    from memory_mcp.core.database import PreparedDatabase

plain_help()
app = typer.Typer(
    name="memory-mcp",
    cls=OneLineErrors,
    help="Remote memory for AI agents over MCP.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # typer's rich help labels every flag (even --help) with "<bool>"
    pretty_exceptions_show_locals=False,  # --debug's traceback: a database URL holds its password
)


def write_secret_file(path: Path, content: str) -> None:
    """Write ``content`` readable by the owner only (created 0600, never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(content)
    os.chmod(path, 0o600)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765)")] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    embedder: Annotated[
        str | None, typer.Option(metavar="local|URL", help="'local' or the URL of the embedding service")
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            metavar="auto|text|json",
            help="auto (readable in a terminal, JSON lines otherwise), text or json",
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            metavar="ADDRESSES",
            help="Proxies (addresses or networks, comma-separated) whose X-Forwarded-For is believed; "
            "default none",
        ),
    ] = None,
) -> None:
    """Serve MCP at /mcp (plus /v1, /healthz, /readyz, /metrics); embedded PostgreSQL by default."""
    import uvicorn

    from memory_mcp.core import tracing
    from memory_mcp.core.database import prepare_database
    from memory_mcp.core.logs import configure_logging
    from memory_mcp.server.app import create_app
    from memory_mcp.serving import ReadyServer, exit_on_sigterm, port_problem, print_ready
    from memory_mcp.store.errors import DatabaseSetupError

    settings = load_settings(
        host=host,
        port=port,
        data_dir=data_dir,
        database_url=database_url,
        embedder=embedder,
        log_format=log_format,
        forwarded_allow_ips=None
        if forwarded_allow_ips is None
        else [a.strip() for a in forwarded_allow_ips.split(",") if a.strip()],
    )
    configure_logging(settings.log_level, settings.log_format)
    exit_on_sigterm()
    try:
        tracing.setup("memory-mcp-server")
    except tracing.TracingNotInstalled as exc:
        raise fail(str(exc)) from None
    # Before the database or the model: a taken port fails now, not after the model has loaded.
    if problem := port_problem(settings.host, settings.port):
        raise fail(f"cannot listen on {settings.host}:{settings.port}: {problem}; choose another with --port")
    if new_data_dir(settings):
        console.print(
            f"new data dir at {settings.data_dir}: setting up its embedded PostgreSQL", highlight=False
        )
    try:
        prepared = prepare_database(settings)
    except DatabaseSetupError as exc:
        raise fail(str(exc)) from None
    try:
        # Restarts the embedded PostgreSQL if it dies; prepared.stop() ends it before stopping PostgreSQL.
        if prepared.embedded is not None:
            prepared.embedded.supervise()
        wedged = prepared.embedded.wedged if prepared.embedded is not None else None
        key = asyncio.run(_first_start(prepared)) if settings.bootstrap else None
        key_file = settings.data_dir / "bootstrap-key"
        if key is not None:
            write_secret_file(key_file, key + "\n")
            console.print(
                "[bold]First start:[/bold] created user 'admin' (Writer), space 'default' and this API key "
                f"(shown once, also in {key_file}, mode 0600):",
                soft_wrap=True,
            )
            print(key, flush=True)
        db = prepared.open(settings.db_pool_size)
        config = uvicorn.Config(
            create_app(settings, db, on_shutdown=prepared.stop, wedged=wedged),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=settings.shutdown_grace_s,
            # uvicorn believes loopback's forwarded headers unless told otherwise
            proxy_headers=bool(settings.forwarded_allow_ips),
            forwarded_allow_ips=settings.forwarded_allow_ips or None,
        )
        ReadyServer(config, lambda port: print_ready(settings.host, port, key_file)).run()
    except DatabaseSetupError as exc:
        raise fail(str(exc)) from None
    finally:
        # uvicorn re-raises SIGTERM after its shutdown; the app's lifespan has stopped PostgreSQL by then,
        # and this covers start-up failures before the lifespan ran.
        prepared.stop()


async def _first_start(prepared: PreparedDatabase) -> str | None:
    """On an empty database: the admin user, the `default` space and a key (returned once)."""
    from memory_mcp.store.identity import bootstrap

    db = prepared.open(pool_size=1)
    try:
        return await bootstrap(db)
    finally:
        await db.close()


@app.command()
def migrate(data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Bring the database schema to the latest version (running it twice changes nothing)."""
    from memory_mcp.core.database import prepare_database
    from memory_mcp.store.migrate import head_revision

    prepare_database(database_settings(data_dir, database_url), migrate=True).stop()
    console.print(f"schema is at revision {head_revision()}")


@app.command()
def backfill(
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    reembed: Annotated[
        bool,
        typer.Option(
            "--reembed",
            help="Drop every vector and embed all memories again (after a model or backend change); "
            "if interrupted, a plain backfill finishes the job",
        ),
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, max=1024)] = 64,
) -> None:
    """Embed memories without a vector (the model's, and the static model's unless it is turned
    off); resumable, with a progress bar."""
    from memory_mcp.core.database import prepare_database

    settings = database_settings(data_dir, database_url)
    prepared = prepare_database(settings)
    try:
        done, static = asyncio.run(_backfill(settings, prepared.open(), reembed, batch_size))
    finally:
        prepared.stop()
    console.print(f"embedded {done} memories")
    if settings.static_embedding:
        console.print(f"computed {static} static vectors")


async def _backfill(settings: Settings, db: Any, reembed: bool, batch_size: int) -> tuple[int, int]:
    from rich.progress import Progress

    from memory_mcp.embedder.client import BulkPolicy, make_embedder
    from memory_mcp.embedder.static import static_model_for
    from memory_mcp.server.backfill import backfill as run_backfill
    from memory_mcp.server.backfill import backfill_static
    from memory_mcp.store import memories

    embedder = await make_embedder(settings)
    try:
        # Before clearing anything: a model of another width could not store a single vector.
        await db.check_ready(embedder.dim)
        if reembed:
            cleared = await memories.clear_embeddings(db)
            console.print(f"cleared {cleared} vectors; embedding again with {embedder.name}")
        total = await memories.count_missing_embeddings(db)
        with Progress(console=console) as progress:
            task = progress.add_task("embedding", total=total)
            done = await run_backfill(
                db,
                embedder,
                batch_size,
                lambda n: progress.advance(task, n),
                BulkPolicy.from_settings(settings),
            )
        static = await static_model_for(settings, say=lambda note: console.print(note, highlight=False))
        if static is None:
            return done, 0
        total = await memories.count_missing_embeddings(db, "static_embedding")
        with Progress(console=console) as progress:
            task = progress.add_task("static vectors", total=total)
            return done, await backfill_static(db, static, progress=lambda n: progress.advance(task, n))
    finally:
        await embedder.aclose()
        await db.close()


@app.command()
def embedder(
    host: Annotated[str, typer.Option(help="Address of the HTTP endpoint")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the HTTP endpoint")] = 8000,
    num_gpus: Annotated[float, typer.Option(help="GPUs per replica (0 = CPU)")] = 0.0,
    max_batch_size: Annotated[int | None, typer.Option(help="Largest batch per forward pass")] = None,
    min_replicas: Annotated[int, typer.Option(help="Autoscaling lower bound")] = 1,
    max_replicas: Annotated[int, typer.Option(help="Autoscaling upper bound")] = 1,
) -> None:
    """Run the Ray Serve embedding deployment (needs the `ray` extra)."""
    try:
        from memory_mcp.embedder.serve import AutoscalingConfig, run_embedder_service
    except ImportError as exc:
        raise fail(f"the embedder service needs Ray Serve: pip install 'memory-mcp[ray]' ({exc})") from None
    from memory_mcp.serving import port_problem

    # Before Ray starts: Serve's proxy would fail to bind seconds later, in a traceback of its actor.
    if problem := port_problem(host, port):
        raise fail(f"cannot listen on {host}:{port}: {problem}; choose another with --port")
    settings = load_settings()
    autoscaling = AutoscalingConfig(min_replicas=min_replicas, max_replicas=max_replicas)
    run_embedder_service(
        settings,
        host=host,
        port=port,
        autoscaling=autoscaling,
        num_gpus=num_gpus,
        max_batch_size=max_batch_size or settings.embedder_max_batch,
    )


@app.command()
def apply(
    filename: Annotated[
        Path,
        typer.Option(
            "-f", "--filename", help="YAML file of Space, User and ApiKey objects ('-' reads stdin)"
        ),
    ],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    keys_out: Annotated[
        Path | None,
        typer.Option(
            "--keys-out", help='Write new keys to this file as JSON {"<ApiKey name>": "<key>"} (mode 0600)'
        ),
    ] = None,
) -> None:
    """Create or update spaces, users and API keys from manifests, without a cluster.

    New keys are shown once (or written to --keys-out); applying the same file again changes nothing.
    """
    from memory_mcp.apply import ManifestError, apply_and_close, keys_file_content, load_manifests
    from memory_mcp.core.database import prepare_database

    text = read_input(filename)
    try:
        manifests = load_manifests(text, "stdin" if str(filename) == "-" else str(filename))
    except ManifestError as exc:
        for problem in exc.problems:
            console.print(f"[red]invalid:[/red] {problem}", highlight=False)
        raise typer.Exit(1) from None
    if keys_out is not None:  # a file that cannot take the new keys fails before any key is made
        try:
            keys_file_content(keys_out, {})
        except ManifestError as exc:
            raise fail(exc.problems[0]) from None
    prepared = prepare_database(database_settings(data_dir, database_url))
    try:
        report = asyncio.run(apply_and_close(prepared.open(pool_size=2), manifests))
    finally:
        prepared.stop()
    for result in report.results:
        colour = "green" if result.outcome.ready else "red"
        console.print(f"[{colour}]{result.describe()}[/{colour}]", highlight=False)
    if keys_out is not None:
        try:
            write_secret_file(keys_out, keys_file_content(keys_out, report.new_keys))
        except ManifestError as exc:
            raise fail(exc.problems[0]) from None
        console.print(f"{len(report.new_keys)} new key(s) written to {keys_out} (mode 0600)")
    elif report.new_keys:
        console.print("[bold]New API keys, shown once (store them now):[/bold]")
        for name, key in report.new_keys.items():
            print(f"{name}: {key}", flush=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def operator(
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    host: Annotated[str, typer.Option(help="Address of /healthz and /metrics")] = "0.0.0.0",
    port: Annotated[
        int,
        typer.Option(
            envvar="MEMORY_MCP_OPERATOR_PORT", min=1, max=65535, help="Port of /healthz and /metrics"
        ),
    ] = 8080,
    resync_seconds: Annotated[
        float,
        typer.Option(
            envvar="MEMORY_MCP_OPERATOR_RESYNC_SECONDS",
            min=1.0,
            help="How often every object is re-checked for drift",
        ),
    ] = 60.0,
    secret_namespaces: Annotated[
        str | None,
        typer.Option(
            envvar="MEMORY_MCP_OPERATOR_SECRET_NAMESPACES",
            help="Comma-separated namespaces ApiKey Secrets may be written to (default: any)",
        ),
    ] = None,
) -> None:
    """Run the Kubernetes operator for Space, User and ApiKey objects (needs the `operator` extra)."""
    try:
        from memory_mcp.operator.handlers import OperatorOptions
        from memory_mcp.operator.main import KubernetesConfigMissing, run_operator
    except ImportError as exc:
        raise fail(
            f"the operator needs kopf and kubernetes: pip install 'memory-mcp[operator]' ({exc})"
        ) from None
    from memory_mcp.core.logs import configure_logging

    settings = database_settings(data_dir, database_url)
    configure_logging(settings.log_level, settings.log_format)
    namespaces = (
        frozenset(n.strip() for n in secret_namespaces.split(",") if n.strip()) if secret_namespaces else None
    )
    options = OperatorOptions(resync_interval=resync_seconds, secret_namespaces=namespaces)
    try:
        run_operator(settings, host=host, port=port, options=options)
    except KubernetesConfigMissing as exc:
        raise fail(str(exc)) from None


admin_commands.register(app)
oauth_commands.register(app)
transfer_commands.register(app)
review_cli.register(app)
audit_cli.register(app)
webhook_cli.register(app)
demo_command.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
