#!/usr/bin/env python3
"""Generates schema/src/schema.rs: the JSON <-> protobuf schema of the kinds the sim models.

Run from the repository root:  python3 schema/gen/proto_schema.py [KUBE_PROTO] > schema/src/schema.rs

Sources, and what each contributes:
- k8s-pb (the prost types generated from Kubernetes' own .proto files, in the cargo registry): every
  message, its fields in declaration (= Go struct) order, their tags, wire types, repetition and the
  message type they refer to.
- k8s-openapi (same registry): the JSON names. A .proto field name *is* the JSON name and k8s-pb's Rust
  name is its snake_case, which is not invertible ("hostIP" and "hostIp" both give host_ip), so the JSON
  name is the k8s-openapi key of the same struct whose letters match; k8s-pb's name camel-cased otherwise.
- kube-proto (testbed/build.sh: the real Go types and serializers): what neither .proto nor OpenAPI
  says, because it lives in the Go struct: which fields are pointers. Go's encoder writes a non-pointer
  field even when it is empty; a pointer only when set. For every message reachable from the sim's kinds,
  an object is built with that message present but empty (`{}`) and encoded; the fields that still come
  out are the non-pointer ones (`always`). The same object decoded back to JSON shows which empty fields
  Go's JSON encoder still prints (no `omitempty`, or a struct), and how (`zero_json`).
"""
import base64, glob, json, os, re, subprocess, sys
from collections import OrderedDict

REG = os.path.expanduser("~/.cargo/registry/src")
PB = glob.glob(f"{REG}/*/k8s-pb-0.9.0/src")[0]
OA = glob.glob(f"{REG}/*/k8s-openapi-0.29.0/src/v1_36")[0]

# Messages with their own JSON form (apimachinery's custom marshallers): handled by rules in codec.rs.
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.runtime.RawExtension": "RawExtension",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "FieldsV1",
}

# (message, apiVersion, kind): the objects the sim serves in protobuf, and the meta.k8s.io ones around them.
ROOTS = [(f"api.core.v1.{k}", "v1", k) for k in
         ["Namespace", "Pod", "ConfigMap", "Secret", "Service", "Endpoints", "Node", "Event", "Status"]]
ROOTS += [(f"api.apps.v1.{k}", "apps/v1", k) for k in ["Deployment", "ReplicaSet"]]
ROOTS += [("api.coordination.v1.Lease", "coordination.k8s.io/v1", "Lease")]
ROOTS += [(r.replace(r.split(".")[-1], r.split(".")[-1] + "List"), a, k + "List") for r, a, k in ROOTS if k != "Status"]
ROOTS = [(m.replace("api.core.v1.Status", "apimachinery.pkg.apis.meta.v1.Status"), a, k) for m, a, k in ROOTS]
ROOTS += [(f"apimachinery.pkg.apis.meta.v1.{k}", "meta.k8s.io/v1", k)
          for k in ["PartialObjectMetadata", "PartialObjectMetadataList"]]
# DeleteOptions is registered in every group version (client-go sends it as a body in protobuf).
ROOTS += [("apimachinery.pkg.apis.meta.v1.DeleteOptions", "v1", "DeleteOptions")]

FIELD_RE = re.compile(r'#\[prost\(([^\n]*)\)\]\n\s*pub (?:r#)?(\w+):\s*([^\n]*),\n')


def resolve(module, ty):
    ty = re.sub(r"::core::option::Option<|::prost::alloc::vec::Vec<|>+$", "", ty)
    ty = ty.replace("::prost::alloc::collections::BTreeMap<::prost::alloc::string::String, ", "")
    parts = ty.split("::")
    base = module.split(".")
    while parts and parts[0] == "super":
        parts.pop(0)
        base.pop()
    return ".".join(base + parts)


def parse_pb():
    msgs = {}
    for path in glob.glob(f"{PB}/**/mod.rs", recursive=True):
        module = os.path.relpath(os.path.dirname(path), PB).replace("/", ".")
        text = open(path).read()
        for m in re.finditer(r"pub struct (\w+) \{\n(.*?)\n\}", text, re.S):
            fields = []
            body = re.sub(r"^\s*///[^\n]*\n", "", m.group(2) + "\n", flags=re.M)
            # rustfmt wraps long types: one field per line again.
            body = re.sub(r":\s*\n\s*", ": ", body)
            body = re.sub(r"<\s*\n\s*", "<", body)
            body = re.sub(r",\s*\n\s*([^#\s])", r", \1", body)
            body = re.sub(r"\s*\n\s*>", ">", body)
            body = re.sub(r",\s*>", ">", body)
            for a, name, ty in FIELD_RE.findall(body):
                tag = int(re.search(r'tag = "(\d+)"', a).group(1))
                kind = a.split(",")[0].split("=")[0].strip()
                f = {"rust": name, "tag": tag, "repeated": "repeated" in a}
                if kind == "btree_map":
                    val = re.search(r'btree_map = "string, (\w+)"', a).group(1)
                    f["ty"] = {"string": "MapString", "bytes": "MapBytes", "message": "MapMsg"}[val]
                    if val == "message":
                        f["ref"] = resolve(module, ty)
                elif kind == "message":
                    f["ty"], f["ref"] = "Msg", resolve(module, ty)
                else:
                    f["ty"] = {"string": "String", "int32": "Int32", "int64": "Int64", "bool": "Bool",
                               "bytes": "Bytes", "double": "Double"}[kind]
                fields.append(f)
            msgs[f"{module}.{m.group(1)}"] = fields
    return msgs


def openapi_names(full):
    module, name = full.rsplit(".", 1)
    d = os.path.join(OA, module.replace(".", "/"))
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    p = os.path.join(d, snake + ".rs")
    if not os.path.exists(p):
        return []
    return re.findall(r'"(\w+)" => Field::Key_', open(p).read())


def camel(rust):
    w = rust.split("_")
    return w[0] + "".join(x[:1].upper() + x[1:] for x in w[1:])


def reachable(msgs):
    seen, order = set(), []
    def walk(m):
        if m in seen:
            return
        seen.add(m)
        order.append(m)
        if m in SPECIAL:
            return
        for f in msgs[m]:
            if "ref" in f:
                walk(f["ref"])
    for r, _, _ in ROOTS:
        walk(r)
    return order


def paths(msgs):
    """A path of (json name, field) from a root to every reachable non-special message."""
    out = {}
    queue = [(r, (a, k), []) for r, a, k in ROOTS]
    while queue:
        m, root, path = queue.pop(0)
        if m in out or m in SPECIAL:
            continue
        out[m] = (root, path)
        for f in msgs[m]:
            if "ref" in f:
                queue.append((f["ref"], root, path + [f]))
    return out


# === protobuf wire reading (the probe's output) ===

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v, i


def fields_of(b):
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        tag, wt = k >> 3, k & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        elif wt == 1:
            v = b[i:i + 8]; i += 8
        else:
            raise ValueError(f"wire type {wt}")
        out.append((tag, v))
    return out


def field(b, tag):
    return [v for t, v in fields_of(b) if t == tag]


def unwrap(obj):  # k8s\0 + Unknown{typeMeta, raw}
    assert obj[:4] == b"k8s\x00"
    return field(obj[4:], 2)[0]


def main():
    kube_proto = sys.argv[1] if len(sys.argv) > 1 else glob.glob(os.path.expanduser("~/.cache/kache-testbed/*/kube-proto"))[0]
    msgs = parse_pb()
    while True:
        gone = probe(kube_proto, msgs)
        if gone is None:
            return
        print(f"// not in the Go types: {gone['json']}", file=sys.stderr)
        for fs in msgs.values():
            if gone in fs:
                fs.remove(gone)


def probe(kube_proto, msgs):
    order = reachable(msgs)
    names = {}
    for m in order:
        if m in SPECIAL:
            continue
        oa = {n.lower(): n for n in openapi_names(m)}
        for f in msgs[m]:
            f["json"] = oa.get(f["rust"].replace("_", ""), camel(f["rust"]))
            f["inline"] = False
    # Go's embedded structs (`json:",inline"`: Volume's VolumeSource, Probe's ProbeHandler, ...) are a
    # nested message in protobuf and flattened in JSON: a message field OpenAPI does not name, whose own
    # fields OpenAPI names on the parent.
    for m in order:
        if m in SPECIAL:
            continue
        oa = {n.lower(): n for n in openapi_names(m)}
        for f in msgs[m]:
            if oa and f["json"] not in oa.values() and f["ty"] == "Msg" and f["ref"] not in SPECIAL:
                inner = msgs[f["ref"]]
                if inner and all(g["rust"].replace("_", "") in oa for g in inner):
                    f["inline"] = True
                    for g in inner:  # the embedded struct has no schema of its own in OpenAPI
                        g["json"] = oa[g["rust"].replace("_", "")]
    # The probe: one object per message, that message present and empty at the end of its path.
    where = paths(msgs)
    probes = []
    for m in order:
        if m in SPECIAL:
            continue
        (api, kind), path = where[m]
        obj = {"apiVersion": api, "kind": kind}
        cur = obj
        for f in path:
            nxt = {}
            if f["inline"]:
                continue
            if f["ty"] == "MapMsg":
                cur[f["json"]] = {"k": nxt}
            elif f["repeated"]:
                cur[f["json"]] = [nxt]
            else:
                cur[f["json"]] = nxt
            cur = nxt
        probes.append((m, path, obj))
    events = "".join(json.dumps({"type": "ADDED", "object": o}) + "\n" for _, _, o in probes).encode()
    pb = subprocess.run([kube_proto, "encode-watch"], input=events, capture_output=True).stdout
    js = subprocess.run([kube_proto, "decode-watch"], input=pb, capture_output=True).stdout
    js = [json.loads(l, object_pairs_hook=OrderedDict) for l in js.decode().splitlines() if l.strip()]
    frames, i = [], 0
    while i < len(pb):
        n = int.from_bytes(pb[i:i + 4], "big"); frames.append(pb[i + 4:i + 4 + n]); i += 4 + n
    assert len(frames) == len(probes) == len(js), (len(frames), len(probes), len(js))
    always, zero = {}, {}
    for (m, path, _), frame, ev in zip(probes, frames, js):
        b = unwrap(field(field(frame, 2)[0], 1)[0])
        j = ev["object"]
        for f in path:
            got = field(b, f["tag"])
            if not got:
                # A field k8s-pb has and the Go types of this Kubernetes version do not (dropped as
                # unknown): not part of the schema.
                return f

            b = got[0]
            if f["ty"] == "MapMsg":
                b = field(b, 2)[0]
            if f["inline"]:
                continue
            j = j[f["json"]]
            j = j["k"] if f["ty"] == "MapMsg" else (j[0] if f["repeated"] else j)
        present = {t for t, _ in fields_of(b)}
        always[m] = present
        zero[m] = {k: json.dumps(v, separators=(",", ":")) for k, v in j.items()}
    emit(msgs, order, always, zero)
    return None


def ident(m):
    return re.sub(r"[^A-Za-z0-9]", "_", m).upper()


def rust_str(s):
    return json.dumps(s)


def emit(msgs, order, always, zero):
    print("// @generated by schema/gen/proto_schema.py from k8s-pb 0.9.0, k8s-openapi 0.29.0 (v1_36) and kube-proto")
    print("// (k8s.io/api v0.36.3). Do not edit: rerun the generator (see its doc).")
    print("//! The protobuf schema of the kinds the sim models: every message reachable from them, fields in Go")
    print("//! struct order.\n")
    print("use super::{Field, Message, Special, Ty};\n")
    for m in order:
        if m in SPECIAL:
            print(f"pub static {ident(m)}: Message = Message {{ name: {rust_str(m)}, special: Some(Special::{SPECIAL[m]}), fields: &[], by_tag: &[] }};")
            continue
        print(f"pub static {ident(m)}: Message = Message {{\n    name: {rust_str(m)},\n    special: None,\n    fields: &[")
        for f in msgs[m]:
            ty = f["ty"]
            if "ref" in f:
                ty = f"{ty}(&{ident(f['ref'])})"
            else:
                ty = f"{ty}"
            z = zero[m].get(f["json"])
            zj = f"Some({rust_str(z)})" if z is not None else "None"
            print(f"        Field {{ json: {rust_str(f['json'])}, tag: {f['tag']}, ty: Ty::{ty}, repeated: {str(f['repeated']).lower()}, inline: {str(f['inline']).lower()}, always: {str(f['tag'] in always[m]).lower()}, zero_json: {zj} }},")
        by_tag = sorted(range(len(msgs[m])), key=lambda i: msgs[m][i]["tag"])
        print(f"    ],\n    by_tag: &{by_tag},\n}};")
    print("\n/// The top-level messages by (apiVersion, kind).")
    print("pub static KINDS: &[(&str, &str, &Message)] = &[")
    for r, a, k in ROOTS:
        print(f"    ({rust_str(a)}, {rust_str(k)}, &{ident(r)}),")
    print("];")


if __name__ == "__main__":
    main()
