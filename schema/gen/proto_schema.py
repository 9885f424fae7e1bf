#!/usr/bin/env python3
"""Generates schema/src/schema.rs: the JSON <-> protobuf schema of the kube-apiserver's built-in kinds.

Run from the repository root:  python3 schema/gen/proto_schema.py [KUBE_PROTO] > schema/src/schema.rs

Sources, and what each contributes (all at the versions testbed/go.mod pins, from Go's module cache:
`cd testbed && go mod download` fetches them):
- the Go packages' generated.proto (k8s.io/api, apimachinery, kube-aggregator, apiextensions-apiserver):
  every message, its fields in declaration (= Go struct) order, their tags, types, repetition and the
  message they refer to;
- the same packages' Go types: the JSON name of each field (its `json:` tag, matched by the `protobuf:`
  tag's number) and Go's embedded structs (`json:",inline"`: a nested message in protobuf, flattened in
  JSON);
- kube-proto (testbed/build.sh: the real Go types and serializers): what neither says directly: which
  fields are pointers. Go's encoder writes a non-pointer field even when it is empty; a pointer only when
  set. For every message reachable from the kinds, an object is built with that message present but empty
  (`{}`) and encoded; the fields that still come out are the non-pointer ones (`always`). The same object
  decoded back to JSON shows which empty fields Go's JSON encoder still prints (no `omitempty`, or a
  struct), and how (`zero_json`).
"""
import glob, json, os, re, subprocess, sys
from collections import OrderedDict

GOMOD = os.environ.get("GOMODCACHE", os.path.expanduser("~/go/pkg/mod"))
K8S = f"{GOMOD}/k8s.io"
V = "v0.36.3"

# The Go packages of the kube-apiserver's built-in kinds, as the testbed pins them (testbed/go.mod): their
# generated.proto (messages, tags, types, Go struct order) and Go files (JSON names, embedded structs).
# Every GA group version the 1.36 kube-apiserver serves whose objects have a protobuf form. Not here: the
# beta and alpha versions (off by default), and the groups without stored objects (authentication,
# authorization: create-only reviews).
API_GROUPS = ["admissionregistration/v1", "apps/v1", "autoscaling/v1", "autoscaling/v2", "batch/v1",
              "certificates/v1", "coordination/v1", "core/v1", "discovery/v1", "events/v1", "flowcontrol/v1",
              "networking/v1", "node/v1", "policy/v1", "rbac/v1", "resource/v1", "scheduling/v1", "storage/v1"]
KIND_PACKAGES = [f"{K8S}/api@{V}/{gv}" for gv in API_GROUPS]
KIND_PACKAGES += [f"{K8S}/kube-aggregator@{V}/pkg/apis/apiregistration/v1"]
# CustomResourceDefinitions: their JSONSchemaProps holds Go types with a JSON form of their own (SPECIAL).
KIND_PACKAGES += [f"{K8S}/apiextensions-apiserver@{V}/pkg/apis/apiextensions/v1"]
OTHER_PACKAGES = [f"{K8S}/apimachinery@{V}/pkg/{p}" for p in
                  ["apis/meta/v1", "api/resource", "util/intstr", "runtime", "runtime/schema"]]

# Messages with their own JSON form (apimachinery's and apiextensions' custom marshallers): handled by rules
# of their own in each encoder (kache's k8s/src/proto/special.rs and encode.rs, the sim's sim/src/proto/).
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.runtime.RawExtension": "RawExtension",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "FieldsV1",
    # `type ExtraValue []string`: a JSON array of strings, a message of `repeated string items = 1`.
    "api.certificates.v1.ExtraValue": "StringList",
    # apiextensions' JSONSchemaProps (marshal.go): `JSON` is raw JSON text (`raw`=1); the three unions are
    # a JSON value of one of two types, each a field of their message (below: UNIONS).
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON": "Json",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool": "SchemaOrBool",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray": "SchemaOrArray",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray": "SchemaOrStringArray",
}

# The special messages whose protobuf fields the schema still lists (the encoders take the nested
# JSONSchemaProps message from them); their JSON names are the .proto names, as they have no JSON of
# their own, and their `always` is false (the encoders write them by their own rules).
UNIONS = {"SchemaOrBool", "SchemaOrArray", "SchemaOrStringArray"}


def group_of(pkg_dir):
    for f in glob.glob(f"{pkg_dir}/register.go"):
        m = re.search(r'GroupName\s*=\s*"([^"]*)"', open(f).read())
        if m:
            return m.group(1)
    raise SystemExit(f"no GroupName in {pkg_dir}")


def proto_package(pkg_dir):
    text = open(f"{pkg_dir}/generated.proto").read()
    return re.search(r"^package ([\w.]+);", text, re.M).group(1).removeprefix("k8s.io.")


PROTO_FIELD_RE = re.compile(r"^\s*(optional|repeated)?\s*(map<\s*string\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;", re.M)
SCALARS = {"string": "String", "int32": "Int32", "int64": "Int64", "bool": "Bool", "bytes": "Bytes", "double": "Double"}


# The messages whose Go struct embeds metav1.TypeMeta (`kind` and `apiVersion` in JSON, no protobuf field).
TYPE_META = set()


def parse_go_tags(pkg_dir, package):
    """{struct: {proto tag: (json name, inline)}} from the package's Go types; notes in TYPE_META the structs
    that embed TypeMeta."""
    out = {}
    for path in glob.glob(f"{pkg_dir}/*.go"):
        if path.endswith("_test.go") or os.path.basename(path).startswith(("zz_", "generated.")):
            continue
        text = open(path).read()
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, re.M | re.S):
            tags = {}
            if re.search(r'^\s*(?:metav1\.)?TypeMeta\s+`json:",inline"', m.group(2), re.M):
                TYPE_META.add(f"{package}.{m.group(1)}")
            for t in re.finditer(r"`([^`]*)`", m.group(2)):
                pb = re.search(r'protobuf:"(\w+),(\d+),[^"]*"', t.group(1))
                js = re.search(r'json:"([^"]*)"', t.group(1))
                if not pb or not js:
                    continue
                name, *opts = js.group(1).split(",")
                tags[int(pb.group(2))] = (name, name == "" and "inline" in opts)
            out[m.group(1)] = tags
    return out


def parse_pb():
    """Every message of the packages: fields in declaration (= Go struct) order, with tags, types,
    repetition, the message they refer to, the JSON name and whether Go embeds the struct."""
    msgs = {}
    for pkg_dir in KIND_PACKAGES + OTHER_PACKAGES:
        proto = f"{pkg_dir}/generated.proto"
        if not os.path.exists(proto):
            continue
        package = proto_package(pkg_dir)
        go = parse_go_tags(pkg_dir, package)
        text = re.sub(r"//[^\n]*", "", open(proto).read())
        for m in re.finditer(r"^message (\w+) \{\n(.*?)^\}", text, re.M | re.S):
            assert not re.search(r"^\s*(message|enum|oneof)\s+\w+\s*\{", m.group(2), re.M), m.group(1)
            fields = []
            for rep, ty, mapval, name, tag in PROTO_FIELD_RE.findall(m.group(2)):
                tag = int(tag)
                js, inline = go.get(m.group(1), {}).get(tag, (name, False))
                f = {"json": js or name, "inline": inline, "tag": tag, "repeated": rep == "repeated"}
                if mapval:
                    if mapval in ("string", "bytes"):
                        f["ty"] = {"string": "MapString", "bytes": "MapBytes"}[mapval]
                    else:
                        f["ty"], f["ref"] = "MapMsg", resolve(package, mapval)
                elif ty in SCALARS:
                    f["ty"] = SCALARS[ty]
                else:
                    f["ty"], f["ref"] = "Msg", resolve(package, ty)
                fields.append(f)
            msgs[f"{package}.{m.group(1)}"] = fields
    return msgs


def resolve(package, ty):
    ty = ty.removeprefix(".")
    return ty.removeprefix("k8s.io.") if "." in ty else f"{package}.{ty}"


def roots(msgs):
    """(message, apiVersion, kind): every kind with a list (`XList` whose `items` are X) of the kind
    packages, its list, and the meta.k8s.io ones around them."""
    out = []
    for pkg_dir in KIND_PACKAGES:
        package, group = proto_package(pkg_dir), group_of(pkg_dir)
        version = package.rsplit(".", 1)[1]
        av = f"{group}/{version}" if group else version
        for name in msgs:
            pkg, kind = name.rsplit(".", 1)
            items = [f for f in msgs[name] if f["json"] == "items"] if pkg == package else []
            if kind.endswith("List") and items and items[0].get("ref") == f"{package}.{kind[:-4]}":
                out.append((f"{package}.{kind[:-4]}", av, kind[:-4]))
                out.append((name, av, kind))
    out += [("apimachinery.pkg.apis.meta.v1.Status", "v1", "Status")]
    out += [(f"apimachinery.pkg.apis.meta.v1.{k}", "meta.k8s.io/v1", k)
            for k in ["PartialObjectMetadata", "PartialObjectMetadataList"]]
    # DeleteOptions is registered in every group version (client-go sends it as a body in protobuf).
    out += [("apimachinery.pkg.apis.meta.v1.DeleteOptions", "v1", "DeleteOptions")]
    return out


ROOTS = []


def reachable(msgs):
    seen, order = set(), []
    def walk(m):
        if m in seen:
            return
        seen.add(m)
        order.append(m)
        if m in SPECIAL and SPECIAL[m] not in UNIONS:
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
    kube_proto = sys.argv[1] if len(sys.argv) > 1 else "target/testbed-bin/kube-proto"
    msgs = parse_pb()
    ROOTS.extend(roots(msgs))
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
                # A field the .proto has and the Go types do not (dropped as unknown): not part of the
                # schema.
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
    print(f"// @generated by schema/gen/proto_schema.py from the generated.proto and Go types of k8s.io/api {V},")
    print(f"// apimachinery {V}, kube-aggregator {V} and apiextensions-apiserver {V}, and kube-proto. Do not edit:")
    print("// rerun the generator (see its doc).")
    print("//! The protobuf schema of the kube-apiserver's built-in kinds: every message reachable from them,")
    print("//! fields in Go struct order.\n")
    print("use super::{Field, Message, Special, Ty};\n")
    for m in order:
        if m in SPECIAL and SPECIAL[m] not in UNIONS:
            print(f"pub static {ident(m)}: Message = Message {{ name: {rust_str(m)}, special: Some(Special::{SPECIAL[m]}), type_meta: false, fields: &[], by_tag: &[] }};")
            continue
        special = f"Some(Special::{SPECIAL[m]})" if m in SPECIAL else "None"
        print(f"pub static {ident(m)}: Message = Message {{\n    name: {rust_str(m)},\n    special: {special},\n    type_meta: {str(m in TYPE_META).lower()},\n    fields: &[")
        for f in msgs[m]:
            ty = f["ty"]
            if "ref" in f:
                ty = f"{ty}(&{ident(f['ref'])})"
            else:
                ty = f"{ty}"
            z = zero.get(m, {}).get(f["json"])
            zj = f"Some({rust_str(z)})" if z is not None else "None"
            print(f"        Field {{ json: {rust_str(f['json'])}, tag: {f['tag']}, ty: Ty::{ty}, repeated: {str(f['repeated']).lower()}, inline: {str(f['inline']).lower()}, always: {str(f['tag'] in always.get(m, ())).lower()}, zero_json: {zj} }},")
        by_tag = sorted(range(len(msgs[m])), key=lambda i: msgs[m][i]["tag"])
        print(f"    ],\n    by_tag: &{by_tag},\n}};")
    raw = sorted({f["json"] for m in order if m not in SPECIAL for f in msgs[m]
                  if SPECIAL.get(f.get("ref")) in ("RawExtension", "FieldsV1", "Json")})
    print("\n/// The JSON names of the fields whose value is raw JSON (RawExtension, FieldsV1, JSON), in any message:")
    print("/// their protobuf holds the JSON's source text.")
    print(f"pub static RAW_JSON_KEYS: &[&str] = &[{', '.join(rust_str(k) for k in raw)}];")
    print("\n/// The top-level messages by (apiVersion, kind).")
    print("pub static KINDS: &[(&str, &str, &Message)] = &[")
    for r, a, k in ROOTS:
        print(f"    ({rust_str(a)}, {rust_str(k)}, &{ident(r)}),")
    print("];")


if __name__ == "__main__":
    main()
