"""The official Kubernetes Python client through kache in front of a real cluster (run by
tests/it/kube_clients/python.rs), each call compared with the same call made directly to the kube-apiserver.

Environment: KACHE_URL (kache, TLS with the apiserver's certificate), APISERVER_URL, KUBE_CA (the cluster's
CA) and the testbed users' tokens KUBE_<USER>_TOKEN (ADMIN, ALICE, BOB, CAROL, DAVE). Each check prints
`ok: NAME` or raises; the last line is `N passed, 0 failed`.
"""

import os
import time

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from helpers import raw, run, state

KACHE_URL = os.environ["KACHE_URL"]
APISERVER_URL = os.environ["APISERVER_URL"]
CA = os.environ["KUBE_CA"]
# How long a state may take to agree on both sides, and a watch read may block (seconds): hang guards.
CONVERGE_TIMEOUT = 60
WATCH_TIMEOUT = 30
POLL = 0.05
PAGE = 7


def api_for(url, user):
    config = client.Configuration()
    config.host = url
    config.ssl_ca_cert = CA
    config.api_key = {"authorization": os.environ[f"KUBE_{user}_TOKEN"]}
    config.api_key_prefix = {"authorization": "Bearer"}
    return client.CoreV1Api(client.ApiClient(config))


def sides(user):
    """(direct, through kache) for a user."""
    return api_for(APISERVER_URL, user), api_for(KACHE_URL, user)


def agree(what, direct_call, via_call):
    """Waits until a consistent list through kache holds what one made directly holds (the cluster's
    controllers and nodes may write in between: both sides are read again until they agree)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    while True:
        via = state(raw(via_call)["items"])
        direct = state(raw(direct_call)["items"])
        if via == direct:
            assert via, f"{what}: something is listed"
            return
        if time.monotonic() > deadline:
            diff = sorted(set(via.items()) ^ set(direct.items()))[:10]
            raise AssertionError(f"{what}: kache and the apiserver differ: {diff}")
        time.sleep(POLL)


def paged(call, *args, **kwargs):
    """Follows _continue tokens PAGE at a time; returns (state, the list's resourceVersion, pages)."""
    items, pages, token, rvs = {}, 0, None, set()
    while True:
        body = raw(call, *args, limit=PAGE, _continue=token, **kwargs)
        pages += 1
        assert len(body["items"]) <= PAGE, f"page of {len(body['items'])} > limit {PAGE}"
        rvs.add(body["metadata"]["resourceVersion"])
        for k, v in state(body["items"]).items():
            assert k not in items, f"{k} listed twice"
            items[k] = v
        token = body["metadata"].get("continue")
        if not token:
            assert len(rvs) == 1, f"the pages of one list at several revisions {rvs}"
            return items, rvs.pop(), pages
        # A continue token carries the list's revision: only the first page names one.
        kwargs.pop("resource_version", None)
        kwargs.pop("resource_version_match", None)


def events(api, namespace, resource_version, until):
    """Watches config maps in `namespace` from resource_version; returns (type, name, resourceVersion) of each
    event up to and including the first for which until(event) is true."""
    w = watch.Watch()
    out = []
    for event in w.stream(
        api.list_namespaced_config_map,
        namespace,
        resource_version=resource_version,
        timeout_seconds=WATCH_TIMEOUT,
    ):
        m = event["raw_object"]["metadata"]
        out.append((event["type"], m.get("name"), m.get("resourceVersion")))
        if until(event):
            w.stop()
            return out
    raise AssertionError(f"the watch ended before the expected event; saw {out}")


def refused(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ApiException as e:
        return e.status, e.body
    raise AssertionError(f"{call.__name__}{args} was not refused")


# === Checks ===


def check_lists_across_namespaces():
    direct, via = sides("CAROL")
    agree("carol's pods", direct.list_pod_for_all_namespaces, via.list_pod_for_all_namespaces)
    agree("carol's config maps", direct.list_config_map_for_all_namespaces, via.list_config_map_for_all_namespaces)
    direct, via = sides("ADMIN")
    agree("the admin's nodes", direct.list_node, via.list_node)
    # Typed models too: the client's own deserialisation of kache's bytes.
    typed = via.list_pod_for_all_namespaces(limit=PAGE)
    assert len(typed.items) == PAGE and typed.metadata._continue, "a typed page with a continue token"


def check_paginated_list():
    direct, via = sides("CAROL")
    got, rv, pages = paged(via.list_pod_for_all_namespaces)
    assert pages > 1, f"the list was paginated ({len(got)} pods)"
    want, _, _ = paged(
        direct.list_pod_for_all_namespaces, resource_version=rv, resource_version_match="Exact"
    )
    assert got == want, f"pages through kache at {rv} differ from the apiserver's at {rv}"


def check_watch_from_resource_version():
    direct, via = sides("BOB")
    ns, name = "team-b", "py-real-watch"
    try:
        direct.delete_namespaced_config_map(name, ns)
    except ApiException as e:
        assert e.status == 404, e
    rv = raw(via.list_namespaced_config_map, ns)["metadata"]["resourceVersion"]
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"n": "0"}}
    via.create_namespaced_config_map(ns, body)
    via.patch_namespaced_config_map(name, ns, {"data": {"n": "1"}})
    via.delete_namespaced_config_map(name, ns)

    def deleted(event):
        return event["type"] == "DELETED" and event["raw_object"]["metadata"]["name"] == name

    got = events(via, ns, rv, deleted)
    want = events(direct, ns, rv, deleted)
    assert got == want, f"watch from {rv}: through kache {got}, directly {want}"
    assert [t for t, n, _ in got if n == name] == ["ADDED", "MODIFIED", "DELETED"], got


def check_gets():
    direct, via = sides("CAROL")
    pods = raw(direct.list_namespaced_pod, "team-a")["items"]
    assert pods, "team-a has pods"
    name = pods[0]["metadata"]["name"]
    assert raw(via.read_namespaced_pod, name, "team-a") == raw(direct.read_namespaced_pod, name, "team-a")
    direct, via = sides("ADMIN")
    node = raw(direct.list_node)["items"][0]["metadata"]["name"]
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    # A node's status is written by its kwok: read both until one pair falls between two writes.
    while raw(via.read_node, node) != raw(direct.read_node, node):
        assert time.monotonic() < deadline, f"node {node}: kache and the apiserver differ"
        time.sleep(POLL)
    # The typed model of a get through kache.
    assert via.read_namespaced_pod(name, "team-a").metadata.name == name


def check_refusals():
    for user, call, args in [
        ("ALICE", "list_namespaced_pod", ("team-b",)),
        ("ALICE", "read_namespaced_config_map", ("web-config", "team-b")),
        ("DAVE", "list_pod_for_all_namespaces", ()),
        ("DAVE", "list_node", ()),
        ("DAVE", "list_namespaced_secret", ("team-a",)),
    ]:
        direct, via = sides(user)
        want = refused(getattr(direct, call), *args)
        got = refused(getattr(via, call), *args)
        assert want[0] == 403, f"{user} {call}{args}: the apiserver answered {want}"
        assert got == want, f"{user} {call}{args}: through kache {got}, directly {want}"
    # A refused watch raises the same ApiException.
    direct, via = sides("ALICE")
    want = refused(lambda: list(watch.Watch().stream(direct.list_namespaced_pod, "team-b", timeout_seconds=1)))
    got = refused(lambda: list(watch.Watch().stream(via.list_namespaced_pod, "team-b", timeout_seconds=1)))
    assert got == want and want[0] == 403, f"alice's watch: through kache {got}, directly {want}"


CHECKS = [
    check_lists_across_namespaces,
    check_paginated_list,
    check_watch_from_resource_version,
    check_gets,
    check_refusals,
]

if __name__ == "__main__":
    run(CHECKS)
