"""cairn's own schemathesis checks, for TestOpenAPIFuzz (make fuzz-api).

Loaded with SCHEMATHESIS_HOOKS=<this file>. Reads:
  CAIRN_FUZZ_URL    the server's base URL (http://HOST:PORT)
  CAIRN_FUZZ_TOKEN  a token that may read everything (admin); empty with
                    ACLs off

Two checks beside schemathesis' own:
  error_body_per_api_md      every 4xx and 5xx answer is a JSON body
                             {"error": "...", "code": "..."} whose code is
                             one docs/api.md lists for that status
  refused_write_stores_nothing
                             a write answered 4xx left the store as it was
                             (docs/api.md: "A bad request changes nothing")

The second compares what a write targets, read over the API before the
request (before_call) and right after its answer (after_call), inside the
call: the services and their revisions (apply), the members (join,
leave), the tokens (token routes), or the named instance (content,
incarnation, lease, report, lifecycle) and the audit events only a
client's write makes about it (register and the instance routes). Only
the target: schemathesis sends requests of its own around the one
checked, and a change elsewhere says nothing of it. The server's own work
between the two reads is left out: the evaluator's verdicts, a refusal's
own audit event, and an instance that housekeeping terminates (drain
window over, lease expired). A 503 is left out too: docs/api.md says such
a write may or may not have committed. Evidence (outcomes, probe results)
is held in the leader's memory and not compared.
The comparison needs one request at a time (--workers 1).
"""

import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request

import schemathesis

BASE = os.environ.get("CAIRN_FUZZ_URL", "").rstrip("/")
TOKEN = os.environ.get("CAIRN_FUZZ_TOKEN", "")

# docs/api.md's table: status -> the codes it may carry.
CODES = {
    400: {"invalid_argument"},
    401: {"unauthenticated"},
    403: {"permission_denied", "forbidden_address"},
    404: {"not_found"},
    405: {"method_not_allowed"},
    409: {"fenced", "conflict", "insufficient_capacity"},
    413: {"too_large"},
    429: {"disruption_budget"},
    503: {"no_leader"},
}

# Audit events only a client's write makes; the rest are the server's own
# (evaluator, housekeeping) or a refusal's record.
CLIENT_KINDS = {"applied", "registered", "drained", "deregistered", "reported", "budget_overridden",
                "evacuated", "evacuation_ended"}


def _header(response, name):
    v = response.headers.get(name.lower()) or response.headers.get(name) or []
    if isinstance(v, str):
        return v
    return v[0] if v else ""


@schemathesis.check
def error_body_per_api_md(ctx, response, case):
    """Every error is {"error": "...", "code": "..."} with the status's code (docs/api.md)."""
    status = response.status_code
    if status < 400:
        return None
    ctype = _header(response, "Content-Type")
    if not ctype.startswith("application/json"):
        raise AssertionError(f"{status} answered with Content-Type {ctype!r}, not application/json")
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise AssertionError(f"{status} answered with a body that is not JSON: {exc}: {response.content[:200]!r}")
    if not isinstance(body, dict) or set(body) != {"error", "code"}:
        raise AssertionError(f"{status} answered {body!r}; want exactly the keys error and code")
    if not isinstance(body["error"], str) or not body["error"]:
        raise AssertionError(f"{status}: error {body['error']!r} is not a non-empty string")
    want = CODES.get(status)
    if want is None:
        raise AssertionError(f"status {status} ({body['code']}) is not one docs/api.md lists")
    if body["code"] not in want:
        raise AssertionError(f"{status} carries code {body['code']!r}; docs/api.md gives it {sorted(want)}")
    return None


def _get(path):
    """GET path as the reading token: (status, JSON body or None)."""
    req = urllib.request.Request(BASE + path)
    if TOKEN:
        req.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, None


def _label(v):
    return isinstance(v, str) and 0 < len(v) <= 63 and all(c.islower() or c.isdigit() or c == "-" for c in v) \
        and v.isascii() and v[0] != "-" and v[-1] != "-"


def _service_state(ns, svc):
    q = urllib.parse.quote
    st, eps = _get(f"/v1/services/{q(ns)}/{q(svc)}/endpoints?all=true")
    if st == 404:
        return None
    if st != 200:
        raise RuntimeError(f"reading {ns}/{svc}'s endpoints: {st}")
    insts = {}
    for e in eps:
        rep = e.get("report") or {}
        insts[e["instance_id"]] = {
            "incarnation": e["incarnation"], "addresses": e["addresses"], "ports": e["ports"],
            "region": e["region"], "zone": e["zone"], "base_weight": e["base_weight"],
            "lease_deadline": e["lease_deadline"], "lifecycle": e["lifecycle"],
            "report": [rep.get("ready"), rep.get("dependencies"), rep.get("at")],
        }
    st, evs = _get(f"/v1/services/{q(ns)}/{q(svc)}/events?limit=10000")
    if st != 200:
        raise RuntimeError(f"reading {ns}/{svc}'s events: {st}")
    client = sorted((e["seq"], e["kind"], e.get("instance_id", "")) for e in evs if e["kind"] in CLIENT_KINDS)
    return {"instances": insts, "client_events": client}


def _target(case):
    """What the request could change: (kind, detail)."""
    path = case.path
    if path == "/v1/apply":
        return "services", None
    if path.startswith("/v1/members"):
        return "members", None
    if path.startswith("/v1/acl/tokens"):
        return "tokens", None
    ns, svc = case.path_parameters.get("ns"), case.path_parameters.get("svc")
    if _label(ns) and _label(svc):
        iid = case.path_parameters.get("id")
        if iid is None and isinstance(case.body, dict):
            iid = case.body.get("instance_id")
        return "instance", (ns, svc, iid if isinstance(iid, str) else None)
    return None, None


def _snapshot(case):
    """The state the request targets, and only that: schemathesis sends
    requests of its own beside the one checked, so a change elsewhere
    says nothing of this one."""
    kind, detail = _target(case)
    if kind == "services":
        st, svcs = _get("/v1/services")
        return sorted((s["namespace"], s["name"], s["revision"]) for s in svcs) if st == 200 else st
    if kind == "members":
        st, ms = _get("/v1/members")
        return sorted((m["node_id"], m["raft_addr"], m["http_addr"], m["voter"]) for m in ms) if st == 200 else st
    if kind == "tokens":
        st, toks = _get("/v1/acl/tokens")
        return sorted(t["accessor"] for t in toks) if st == 200 else st
    if kind == "instance":
        ns, svc, iid = detail
        if iid is None:
            return None  # no instance named: nothing it could change is told apart
        state = _service_state(ns, svc)
        if state is None:
            return None
        return {"instance": state["instances"].get(iid),
                "client_events": [e for e in state["client_events"] if e[2] == iid]}
    return None


def _diff(before, after):
    """What changed between two snapshots, less the server's own work."""
    if isinstance(before, dict) and isinstance(after, dict) and "instance" in before:
        out = []
        new_events = [e for e in after["client_events"] if e not in before["client_events"]]
        if new_events:
            out.append(f"client events recorded: {new_events!r}")
        bi, ai = before["instance"], after["instance"]
        if bi is not None and ai is not None and ai["lifecycle"] == "terminated" and bi["lifecycle"] != "terminated":
            # Housekeeping (drain window over, lease expired); a client's
            # deregistration shows as a "deregistered" event above. A
            # terminated record shows its last checkpointed lease, no
            # longer the leader's renewals of the last second.
            ai = dict(ai, lifecycle=bi["lifecycle"], lease_deadline=bi["lease_deadline"])
        if bi != ai:
            out.append(f"instance: {bi!r} -> {ai!r}")
        return out
    if before != after:
        return [f"{before!r} -> {after!r}"]
    return []


# The last request sent, from any phase or thread: its id, the snapshot
# taken before it (a write) and the one taken right after its answer (a
# refused write), both within the call itself (before_call, after_call).
# The check compares the two only for that request and only once: other
# checks send requests of their own between an answer and the checks
# after them, and schemathesis validates answers again later (scenarios
# replayed while shrinking, failures reproduced); neither says anything
# of what the request did.
_last = {"id": None, "before": None, "after": None}
_lock = threading.Lock()


@schemathesis.hook
def before_call(context, case, kwargs):
    snap = None
    if BASE and case.method.upper() != "GET" and _target(case)[0] is not None:
        snap = _snapshot(case)
    with _lock:
        _last.update(id=case.id, before=snap, after=None)


@schemathesis.hook
def after_call(context, case, response):
    with _lock:
        if _last["id"] != case.id or _last["before"] is None:
            return
    if not 400 <= response.status_code < 500:
        return
    snap = _snapshot(case)
    with _lock:
        if _last["id"] == case.id:
            _last["after"] = snap


@schemathesis.check
def refused_write_stores_nothing(ctx, response, case):
    """A write answered 4xx changes nothing (docs/api.md: "A bad request changes nothing")."""
    with _lock:
        if _last["id"] != case.id or _last["before"] is None or _last["after"] is None:
            return None
        before, after = _last["before"], _last["after"]
        _last.update(before=None, after=None)  # compared once
    changed = _diff(before, after)
    if changed:
        raise AssertionError(f"refused with {response.status_code}, yet the store changed: " + "; ".join(changed))
    return None
