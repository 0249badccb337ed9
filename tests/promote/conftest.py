"""The session's real PostgreSQL (shared with the other suite through tests/pg.py)."""

from tests.pg import local_pg, pg, supervisor  # noqa: F401
