"""How the pipeline reaches production's Postgres to read the lease: a DB-API connection
factory, either through the Cloud SQL Python Connector with an IAM database login (CI),
or a plain DSN (the Cloud SQL Auth Proxy on localhost, or the sandbox)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

APPLICATION_NAME = "brew-promote"  # so the pipeline's own session is easy to tell apart


def plain(dsn: str, timeout: float = 10) -> Callable[[], Any]:
    """`postgresql://user[:password]@host[:port]/database`."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise ValueError(f"not a postgresql://user@host:port/database DSN: {dsn!r}")
    kwargs = {
        "user": unquote(parts.username or ""),
        "host": parts.hostname,
        "port": parts.port or 5432,
        "database": unquote(parts.path.lstrip("/")) or "postgres",
        "timeout": timeout,
        "application_name": APPLICATION_NAME,
    }
    if parts.password is not None:
        kwargs["password"] = unquote(parts.password)

    def connect():
        import pg8000.dbapi

        return pg8000.dbapi.connect(**kwargs)

    return connect


def cloud_sql(instance_connection_name: str, iam_user: str, database: str) -> Callable[[], Any]:
    """IAM login over the instance's private IP: the deployer's identity, no password."""

    def connect():
        from google.cloud.sql.connector import Connector, IPTypes

        connector = Connector(ip_type=IPTypes.PRIVATE, enable_iam_auth=True, refresh_strategy="lazy")
        return connector.connect(instance_connection_name, "pg8000", user=iam_user, db=database,
                                 application_name=APPLICATION_NAME)

    return connect
