"""The sandbox: local stand-ins for Google's APIs, a real PostgreSQL and simulated
workers, so a promotion can be rehearsed on a laptop. Only endpoints the promote code is
pointed at; it never imports promote."""
