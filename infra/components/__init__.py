"""Pulumi ComponentResources, one per concern. Components never read stack config:
environments hand them typed args."""
