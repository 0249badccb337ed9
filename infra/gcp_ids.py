"""The IDs Google Cloud and the Pulumi provider know each resource by, built from its
declared inputs: `projects/P/instances/NAME`, `b/BUCKET ROLE MEMBER`...

`pulumi import` takes these (see importplan), and the mock runtime hands them back as
resource IDs, so an offline graph refers to resources exactly as a real one would.
Formats follow each resource's import section in the provider documentation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Inputs = dict[str, Any]


def _email(i: Inputs, project: str) -> str:
    return f"{i['accountId']}@{project}.iam.gserviceaccount.com"


def _secret_of(ref: str) -> str:
    return ref.rstrip("/").split("/")[-1]


def _conditional(base: str, i: Inputs) -> str:
    title = (i.get("condition") or {}).get("title")
    return f"{base} {title}" if title else base


# Type token -> live ID.
LIVE_ID: dict[str, Callable[[Inputs, str, str], str]] = {
    "gcp:cloudrunv2/service:Service": lambda i, p, r: f"projects/{p}/locations/{i.get('location', r)}/services/{i['name']}",
    "gcp:cloudrunv2/job:Job": lambda i, p, r: f"projects/{p}/locations/{i.get('location', r)}/jobs/{i['name']}",
    "gcp:sql/databaseInstance:DatabaseInstance": lambda i, p, r: f"projects/{p}/instances/{i['name']}",
    "gcp:sql/database:Database": lambda i, p, r: f"projects/{p}/instances/{i['instance']}/databases/{i['name']}",
    "gcp:sql/user:User": lambda i, p, r: f"{p}/{i['instance']}/{i['name']}",
    "gcp:storage/bucket:Bucket": lambda i, p, r: f"{p}/{i['name']}",
    "gcp:storage/bucketIAMMember:BucketIAMMember": lambda i, p, r: f"b/{i['bucket']} {i['role']} {i['member']}",
    "gcp:serviceaccount/account:Account": lambda i, p, r: f"projects/{p}/serviceAccounts/{_email(i, p)}",
    "gcp:serviceaccount/iAMMember:IAMMember": lambda i, p, r: _conditional(
        f"{i['serviceAccountId']} {i['role']} {i['member']}", i),
    "gcp:projects/iAMMember:IAMMember": lambda i, p, r: _conditional(f"{p} {i['role']} {i['member']}", i),
    "gcp:secretmanager/secret:Secret": lambda i, p, r: f"projects/{p}/secrets/{i['secretId']}",
    "gcp:secretmanager/secretIamMember:SecretIamMember": lambda i, p, r: (
        f"projects/{p}/secrets/{_secret_of(i['secretId'])} {i['role']} {i['member']}"),
    "gcp:compute/network:Network": lambda i, p, r: f"projects/{p}/global/networks/{i['name']}",
    "gcp:compute/subnetwork:Subnetwork": lambda i, p, r: f"projects/{p}/regions/{i.get('region', r)}/subnetworks/{i['name']}",
    "gcp:compute/globalAddress:GlobalAddress": lambda i, p, r: f"projects/{p}/global/addresses/{i['name']}",
    "gcp:servicenetworking/connection:Connection": lambda i, p, r: (
        f"{_secret_of(str(i['network']))}:{i['service']}"),
    "gcp:compute/regionNetworkEndpointGroup:RegionNetworkEndpointGroup": lambda i, p, r: (
        f"projects/{p}/regions/{i.get('region', r)}/networkEndpointGroups/{i['name']}"),
    "gcp:compute/backendService:BackendService": lambda i, p, r: f"projects/{p}/global/backendServices/{i['name']}",
    "gcp:compute/securityPolicy:SecurityPolicy": lambda i, p, r: f"projects/{p}/global/securityPolicies/{i['name']}",
    "gcp:compute/managedSslCertificate:ManagedSslCertificate": lambda i, p, r: (
        f"projects/{p}/global/sslCertificates/{i['name']}"),
    "gcp:compute/uRLMap:URLMap": lambda i, p, r: f"projects/{p}/global/urlMaps/{i['name']}",
    "gcp:compute/sSLPolicy:SSLPolicy": lambda i, p, r: f"projects/{p}/global/sslPolicies/{i['name']}",
    "gcp:compute/targetHttpsProxy:TargetHttpsProxy": lambda i, p, r: f"projects/{p}/global/targetHttpsProxies/{i['name']}",
    "gcp:compute/targetHttpProxy:TargetHttpProxy": lambda i, p, r: f"projects/{p}/global/targetHttpProxies/{i['name']}",
    "gcp:compute/globalForwardingRule:GlobalForwardingRule": lambda i, p, r: (
        f"projects/{p}/global/forwardingRules/{i['name']}"),
    "gcp:redis/instance:Instance": lambda i, p, r: f"projects/{p}/locations/{i.get('region', r)}/instances/{i['name']}",
    "gcp:logging/metric:Metric": lambda i, p, r: f"{p} {i['name']}",
    "gcp:monitoring/metricDescriptor:MetricDescriptor": lambda i, p, r: f"projects/{p}/metricDescriptors/{i['type']}",
}
