"""What the Python client tests share: raw JSON answers and a list's (key, resourceVersion) state."""
import json


def raw(call, *args, **kwargs):
    """Calls a list/get method and returns the decoded JSON body (no model conversion)."""
    resp = call(*args, _preload_content=False, **kwargs)
    return json.loads(resp.data)


def state(items):
    """{namespace/name: resourceVersion} of a list's items."""
    return {
        f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}": i["metadata"]["resourceVersion"]
        for i in items
    }


def run(checks):
    """Runs each check in order (the first failure raises and ends the run), naming each that passed."""
    for check in checks:
        check()
        print(f"ok: {check.__name__}", flush=True)
    print(f"{len(checks)} passed, 0 failed", flush=True)
