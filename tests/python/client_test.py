"""The official Kubernetes Python client through kache (run by tests/it/python.rs).

Environment: KACHE_URL (kache, the server under test) and SIM_URL (the simulated apiserver behind it, used to
compute the expected state and for its admin hooks). When the script needs kache restarted on the same port
it prints `@@restart-kache` and waits for a line on stdin (the Rust harness answers once the new kache is
synced). Each check prints `ok: NAME` or raises; the last line is `N passed, 0 failed`.
"""

import json
import os
import sys
import time
import urllib.request

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from helpers import raw, run, state

KACHE_URL = os.environ["KACHE_URL"]
SIM_URL = os.environ["SIM_URL"]
NAMESPACE = "ns-1"
# How long a watch read may block before the check gives up (seconds).
WATCH_TIMEOUT = 30
# Connection attempts while kache restarts, and the pause between them (seconds).
RECONNECT_ATTEMPTS = 100
RECONNECT_PAUSE = 0.1


def api_for(url):
    config = client.Configuration()
    config.host = url
    return client.CoreV1Api(client.ApiClient(config))


kache = api_for(KACHE_URL)
sim = api_for(SIM_URL)


def sim_admin(path):
    req = urllib.request.Request(f"{SIM_URL}{path}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def pod(name, labels=None):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def paged(call, *args, limit, **kwargs):
    """Follows _continue tokens; returns (items, number of pages)."""
    items, pages, token = [], 0, None
    while True:
        body = raw(call, *args, limit=limit, _continue=token, **kwargs)
        pages += 1
        assert len(body["items"]) <= limit, f"page of {len(body['items'])} > limit {limit}"
        items.extend(body["items"])
        token = body["metadata"].get("continue")
        if not token:
            return items, pages
        assert pages < 10_000, "pagination does not end"


def watch_events(namespace, resource_version, until):
    """Watches pods through kache from resource_version; returns the raw events up to and including the
    first for which until(event) is true."""
    w = watch.Watch()
    events = []
    stream = w.stream(
        kache.list_namespaced_pod,
        namespace,
        resource_version=resource_version,
        timeout_seconds=WATCH_TIMEOUT,
        allow_watch_bookmarks=False,
    )
    for event in stream:
        events.append(event)
        if until(event):
            w.stop()
            break
    else:
        raise AssertionError(f"watch ended before the expected event; saw {summary(events)}")
    return events


def summary(events):
    return [(e["type"], e["raw_object"]["metadata"].get("name"), e["raw_object"]["metadata"].get("resourceVersion")) for e in events]


def named(name, kind=None):
    def check(event):
        meta = event["raw_object"].get("metadata", {})
        return meta.get("name") == name and (kind is None or event["type"] == kind)

    return check


def foreign_writes(per_sec):
    """Asks the harness to set the sim's background writes to leases and events (a real cluster's)."""
    print(f"@@foreign-writes {per_sec}", flush=True)
    line = sys.stdin.readline()
    assert line.strip() == "ok", f"harness answered {line!r}"


def foreign_write(n):
    """A write kache does not look at (a config map), moving the global revision as a lease renewal would."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"py-foreign-{n}"}}
    sim.create_namespaced_config_map("default", body)


def restart_kache():
    print("@@restart-kache", flush=True)
    line = sys.stdin.readline()
    assert line.strip() == "restarted", f"harness answered {line!r}"


# === Checks ===


def check_paginated_lists():
    want = state(raw(sim.list_pod_for_all_namespaces)["items"])
    assert len(want) > 50, f"the sim is seeded ({len(want)} pods)"
    for limit in (1, 7, 50, 500):
        items, pages = paged(kache.list_pod_for_all_namespaces, limit=limit)
        assert state(items) == want, f"limit={limit}: pages differ from the sim's list"
        assert pages == max(1, -(-len(want) // limit)), f"limit={limit}: {pages} pages for {len(want)} pods"
    want = state(raw(sim.list_namespaced_pod, NAMESPACE, field_selector="spec.nodeName=node-0")["items"])
    items, _ = paged(kache.list_namespaced_pod, NAMESPACE, limit=3, field_selector="spec.nodeName=node-0")
    assert state(items) == want, "filtered pages differ from the sim's list"
    # Typed models too: the client's own deserialisation of kache's bytes.
    typed = kache.list_namespaced_pod(NAMESPACE, limit=5)
    assert len(typed.items) == 5 and typed.metadata._continue, "typed page with a continue token"
    nxt = kache.list_namespaced_pod(NAMESPACE, limit=5, _continue=typed.metadata._continue)
    assert {p.metadata.name for p in typed.items}.isdisjoint({p.metadata.name for p in nxt.items})


def check_paginated_lists_under_foreign_writes():
    """While leases and events move the global revision (the pods are quiet), pages followed through
    kache, a foreign write between every two, never fail (no 504) and hold the sim's pods at one revision,
    whichever side answers the first page."""
    foreign_writes(100)
    try:
        writes = 0
        for namespace in (None, NAMESPACE):
            if namespace is None:
                want = state(raw(sim.list_pod_for_all_namespaces)["items"])
                calls = (kache.list_pod_for_all_namespaces, sim.list_pod_for_all_namespaces)
                args = ()
            else:
                want = state(raw(sim.list_namespaced_pod, namespace)["items"])
                calls = (kache.list_namespaced_pod, sim.list_namespaced_pod)
                args = (namespace,)
            for limit in (7, 50):
                for first_from_sim in (False, True):
                    items, token, rvs = [], None, set()
                    while True:
                        call = calls[1] if first_from_sim and token is None else calls[0]
                        body = raw(call, *args, limit=limit, _continue=token)
                        items.extend(body["items"])
                        rvs.add(body["metadata"]["resourceVersion"])
                        token = body["metadata"].get("continue")
                        if not token:
                            break
                        foreign_write(writes)
                        writes += 1
                    what = f"namespace={namespace} limit={limit} first_from_sim={first_from_sim}"
                    assert state(items) == want, f"{what}: pages differ from the sim's list"
                    assert len(rvs) == 1, f"{what}: pages of one list at several revisions {rvs}"
        assert writes > 20, f"foreign writes between pages: {writes}"
    finally:
        foreign_writes(0)


def check_watch_resumes_after_dropped_connection():
    rv = raw(kache.list_namespaced_pod, NAMESPACE)["metadata"]["resourceVersion"]
    kache.create_namespaced_pod(NAMESPACE, pod("py-a", {"step": "1"}))
    first = watch_events(NAMESPACE, rv, named("py-a", "ADDED"))
    last_rv = first[-1]["raw_object"]["metadata"]["resourceVersion"]
    # The connection is gone (stop closed it); changes happen meanwhile, straight on the sim.
    sim.patch_namespaced_pod("py-a", NAMESPACE, {"metadata": {"labels": {"step": "2"}}})
    sim.create_namespaced_pod(NAMESPACE, pod("py-b"))
    sim.delete_namespaced_pod("py-a", NAMESPACE)
    resumed = watch_events(NAMESPACE, last_rv, named("py-a", "DELETED"))
    got = [(t, n) for t, n, _ in summary(resumed)]
    assert got == [("MODIFIED", "py-a"), ("ADDED", "py-b"), ("DELETED", "py-a")], f"resumed: {summary(resumed)}"
    rvs = [int(r) for _, _, r in summary(resumed)]
    assert rvs == sorted(rvs) and rvs[0] > int(last_rv), f"resumed after {last_rv}: {rvs}"
    b = raw(sim.read_namespaced_pod, "py-b", NAMESPACE)
    assert resumed[1]["raw_object"]["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]


def check_watch_across_kache_restart():
    """A watch whose server (kache) restarts: the client resumes from its last RV, or gets 410 and relists;
    either way it ends at the sim's state."""
    listed = raw(kache.list_namespaced_pod, NAMESPACE)
    known = state(listed["items"])
    last_rv = listed["metadata"]["resourceVersion"]
    restart_kache()
    sim.create_namespaced_pod(NAMESPACE, pod("py-c"))
    relisted = False
    for _ in range(RECONNECT_ATTEMPTS):
        try:
            events = watch_events(NAMESPACE, last_rv, named("py-c", "ADDED"))
            for e in events:
                m = e["raw_object"]["metadata"]
                key = f"{NAMESPACE}/{m['name']}"
                if e["type"] == "DELETED":
                    known.pop(key, None)
                else:
                    known[key] = m["resourceVersion"]
            break
        except ApiException as e:
            assert e.status == 410, f"unexpected status {e.status}: {e}"
            listed = raw(kache.list_namespaced_pod, NAMESPACE)
            known, last_rv, relisted = state(listed["items"]), listed["metadata"]["resourceVersion"], True
            if f"{NAMESPACE}/py-c" in known:
                break
        except (urllib3.exceptions.HTTPError, ConnectionError):
            time.sleep(RECONNECT_PAUSE)
    want = state(raw(sim.list_namespaced_pod, NAMESPACE)["items"])
    assert known == want, f"after the restart (relisted={relisted}) the client state differs from the sim"
    print(f"   (kache restart: {'410 and relist' if relisted else 'resumed'})")


def check_expired_resource_versions():
    """Compaction upstream: a watch from a compacted RV gets an ERROR event with 410 (the client raises
    ApiException 410), an Exact list at it 410 Expired; a relist recovers."""
    kache.create_namespaced_pod(NAMESPACE, pod("py-d"))
    sim_admin("/sim/compact")
    sim_admin("/sim/drop-watches")  # kache's upstream watches restart after the compaction
    try:
        watch_events(NAMESPACE, "1", lambda e: True)
        raise AssertionError("a watch from resourceVersion 1 was not refused")
    except ApiException as e:
        assert e.status == 410, f"watch from a compacted RV: {e.status} {e.reason}"
    try:
        kache.list_namespaced_pod(NAMESPACE, resource_version="1", resource_version_match="Exact", limit=5)
        raise AssertionError("an Exact list at resourceVersion 1 was not refused")
    except ApiException as e:
        assert e.status == 410, f"Exact list at a compacted RV: {e.status}"
        status = json.loads(e.body)
        assert status["kind"] == "Status" and status["reason"] == "Expired", status
    listed = raw(kache.list_namespaced_pod, NAMESPACE)
    assert state(listed["items"]) == state(raw(sim.list_namespaced_pod, NAMESPACE)["items"])
    # The relist's RV is a valid place to watch from again.
    kache.delete_namespaced_pod("py-d", NAMESPACE)
    events = watch_events(NAMESPACE, listed["metadata"]["resourceVersion"], named("py-d", "DELETED"))
    assert events[-1]["type"] == "DELETED"


def check_kache_relists_after_compaction():
    """kache's own upstream watch misses changes and its resourceVersion is compacted away: kache relists;
    a client watching from before either gets the changes or 410 and relists, and ends at the sim's state."""
    listed = raw(kache.list_namespaced_pod, NAMESPACE)
    old_rv = listed["metadata"]["resourceVersion"]
    sim_admin("/sim/stall-watches?on=true")
    try:
        sim.create_namespaced_pod(NAMESPACE, pod("py-e"))
        victim = listed["items"][0]["metadata"]["name"]
        sim.patch_namespaced_pod(victim, NAMESPACE, {"metadata": {"labels": {"touched": "yes"}}})
        sim_admin("/sim/compact")
        sim_admin("/sim/drop-watches")
    finally:
        sim_admin("/sim/stall-watches?on=false")
    want = state(raw(sim.list_namespaced_pod, NAMESPACE)["items"])
    # resourceVersion=0 reads kache's own store: a consistent read would be right at once (forwarded while
    # kache's store is behind) and so says nothing about kache having relisted.
    for _ in range(RECONNECT_ATTEMPTS):
        if state(raw(kache.list_namespaced_pod, NAMESPACE, resource_version="0")["items"]) == want:
            break
        time.sleep(RECONNECT_PAUSE)
    else:
        raise AssertionError("kache did not catch up with the sim after the compaction")
    known = state(listed["items"])
    try:
        # The relabelling was the last change: the replay ends with it.
        for e in watch_events(NAMESPACE, old_rv, named(victim, "MODIFIED")):
            m = e["raw_object"]["metadata"]
            known[f"{NAMESPACE}/{m['name']}"] = m["resourceVersion"]
        outcome = "replayed"
    except ApiException as e:
        assert e.status == 410, f"watch from before the compaction: {e.status} {e.reason}"
        known, outcome = state(raw(kache.list_namespaced_pod, NAMESPACE)["items"]), "410 and relist"
    assert known == want, f"client state after {outcome} differs from the sim"
    print(f"   (watch from before kache's relist: {outcome})")


CHECKS = [
    check_paginated_lists,
    check_paginated_lists_under_foreign_writes,
    check_watch_resumes_after_dropped_connection,
    check_watch_across_kache_restart,
    check_expired_resource_versions,
    check_kache_relists_after_compaction,
]

if __name__ == "__main__":
    run(CHECKS)
