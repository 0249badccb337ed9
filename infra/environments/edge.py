"""Edge: what prod, staging and demo share — the VPC with the private services access
range Cloud SQL's addresses come from, and the global HTTPS load balancer (SPEC 3.4)."""

from __future__ import annotations

import pulumi

from infra.components.edge import ArmorPolicy, Edge, EdgeArgs, EdgeHost
from infra.components.labels import standard_labels
from infra.environments import app
from infra.settings import StackSettings


def build(s: StackSettings) -> None:
    net, e = s.network, s.edge
    assert net is not None and e is not None
    app.vpc(net, s.project, s.region, standard_labels("edge", net.name))
    edge = Edge(
        "edge",
        EdgeArgs(
            project=s.project,
            address_name=e.address,
            url_map_name=e.url_map,
            hosts=tuple(EdgeHost(h.host, h.service, s.region, h.armored, environment=h.environment)
                        for h in e.hosts),
            armor=ArmorPolicy(policy_name=e.armor_policy, rate_limit_count=e.rate_limit_per_minute,
                              rate_limit_interval_seconds=60),
            ssl_policy_name=e.ssl_policy,
            min_tls_version=e.min_tls_version,
            labels=standard_labels("edge", "load-balancer"),
        ),
    )
    pulumi.export("address", edge.address)
    # DNS lives at Cloudflare: these are the records to create there.
    pulumi.export("dnsRecords", edge.dns_records)
